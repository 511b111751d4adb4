package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

func TestTokenVia(t *testing.T) {
	for _, via := range []client.TokenVia{client.ViaHeader, client.ViaSubprotocol, client.ViaQuery} {
		t.Run(via.String(), func(t *testing.T) {
			srv := newServer(t, serverOpts{})
			ev := newEvents()
			cfg := baseConfig(srv.URL, ev)
			cfg.User = ""
			cfg.TokenVia = via
			cfg.Token = func(context.Context) (string, error) { return "tok-1", nil }
			start(t, cfg)
			h := srv.handshake(t)
			ev.welcome(t)

			var got []string
			if h.auth != "" {
				got = append(got, "header")
			}
			if slices.Contains(h.protocols, "bearer.tok-1") {
				got = append(got, "subprotocol")
			}
			if h.query.Get("token") != "" {
				got = append(got, "query")
			}
			if len(got) != 1 || got[0] != via.String() {
				t.Fatalf("token sent via %v, want only %v (handshake %+v)", got, via, h)
			}
			switch via {
			case client.ViaHeader:
				if h.auth != "Bearer tok-1" {
					t.Errorf("Authorization = %q", h.auth)
				}
			case client.ViaSubprotocol:
				if !slices.Equal(h.protocols, []string{"wsgate.v1", "bearer.tok-1"}) || h.selected != "wsgate.v1" {
					t.Errorf("protocols offered %q, selected %q", h.protocols, h.selected)
				}
			case client.ViaQuery:
				if h.query.Get("token") != "tok-1" {
					t.Errorf("token = %q", h.query.Get("token"))
				}
			}
			if h.query.Has("user") {
				t.Errorf("user sent along with a token: %v", h.query)
			}
		})
	}
}

func TestInsecureUser(t *testing.T) {
	srv := newServer(t, serverOpts{})
	ev := newEvents()
	start(t, baseConfig(srv.URL, ev))
	h := srv.handshake(t)
	if h.query.Get("user") != "alice" {
		t.Fatalf("user = %q", h.query.Get("user"))
	}
	if h.auth != "" || h.query.Has("since") || h.query.Has("format") {
		t.Errorf("unexpected handshake %+v", h)
	}
	if w := ev.welcome(t); w.User != "alice" || w.Node != "n1" || w.ConnID != "c1" || w.PingInterval != 25*time.Second || w.URL != srv.URL {
		t.Errorf("welcome %+v", w)
	}
}

func TestResumeAfterAbruptClose(t *testing.T) {
	srv := newServer(t, serverOpts{script: func(sc *serverConn) {
		if sc.n == 1 {
			sc.messages(1, 2, 3)
			if sc.waitAck(3) {
				sc.drop()
			}
			return
		}
		sc.messages(4, 5)
	}})
	ev := newEvents()
	r := start(t, baseConfig(srv.URL, ev))

	if h := srv.handshake(t); h.query.Has("since") {
		t.Errorf("first dial with since=%s", h.query.Get("since"))
	}
	if h := srv.handshake(t); h.query.Get("since") != "3" {
		t.Errorf("reconnect with since=%q, want 3", h.query.Get("since"))
	}
	if got := ev.seqs(t, 5); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Errorf("delivered %v", got)
	}
	if c := recv(t, ev.closes, "close"); c.code != 1006 {
		t.Errorf("close code %d, want 1006", c.code)
	}
	if code := r.c.Stats().LastCloseCode; code != 1006 {
		t.Errorf("LastCloseCode %d, want 1006", code)
	}
	r.c.Close() // Run is over: the counters are final
	st := r.c.Stats()
	if st.Connects != 2 || st.Reconnects != 1 || st.LastSeq != 5 || r.c.LastSeq() != 5 {
		t.Errorf("stats %+v", st)
	}
}

func TestDuplicatesDroppedInOrder(t *testing.T) {
	srv := newServer(t, serverOpts{script: func(sc *serverConn) {
		sc.messages(1, 2, 3, 4, 3)
		sc.message(0, "live", `{"x":1}`)
		sc.messages(5, 4, 5, 6)
	}})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	since := int64(2)
	cfg.Since = &since
	r := start(t, cfg)

	if h := srv.handshake(t); h.query.Get("since") != "2" {
		t.Errorf("since = %q, want 2", h.query.Get("since"))
	}
	got := ev.seqs(t, 5)
	if !slices.Equal(got, []int64{3, 4, 0, 5, 6}) {
		t.Fatalf("delivered %v, want [3 4 0 5 6]", got)
	}
	// 1 and 2 (<= Since), 3, 4 and 5 again.
	r.c.Close() // Run is over: the counters are final
	if st := r.c.Stats(); st.Duplicates != 5 || st.Messages != 5 {
		t.Errorf("stats %+v, want 5 duplicates and 5 messages", st)
	}
}

func TestAcksBatched(t *testing.T) {
	const n = 120
	srv := newServer(t, serverOpts{script: func(sc *serverConn) {
		for i := int64(1); i <= n; i++ {
			sc.messages(i)
		}
	}})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.AckDelay = 0 // default 200ms
	r := start(t, cfg)
	sc := srv.conn(t)
	ev.seqs(t, n)

	var acks []int64
	for len(acks) == 0 || acks[len(acks)-1] != n {
		acks = append(acks, recv(t, sc.acks, fmt.Sprintf("ack %d (got %v)", n, acks)))
	}
	if len(acks) >= n/10 || !slices.IsSorted(acks) || acks[0] != client.DefaultAckEvery {
		t.Errorf("acks %v: want a few, increasing, the first after %d messages", acks, client.DefaultAckEvery)
	}
	r.c.Close() // Run is over: the counters are final
	if st := r.c.Stats(); st.Acks != int64(len(acks)) {
		t.Errorf("Stats.Acks %d, server got %d", st.Acks, len(acks))
	}
}

func TestAckOnClose(t *testing.T) {
	srv := newServer(t, serverOpts{script: func(sc *serverConn) { sc.messages(1, 2, 3, 4, 5, 6, 7) }})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.AckEvery, cfg.AckDelay = 1000, time.Hour
	r := start(t, cfg)
	sc := srv.conn(t)
	ev.seqs(t, 7)
	if err := r.c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.wait(t); err != nil {
		t.Errorf("Run after Close = %v, want nil", err)
	}
	if a := recv(t, sc.acks, "ack"); a != 7 {
		t.Errorf("ack %d, want 7", a)
	}
	sc.waitClosed(t)
	if code := sc.closeCode.Load(); code != 1000 {
		t.Errorf("client closed with %d, want 1000", code)
	}
	if err := r.c.Publish(context.Background(), protocol.Target{Type: "user", ID: "bob"}, "e", nil); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Publish after Close = %v", err)
	}
	if err := r.c.Run(context.Background()); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Run after Close = %v", err)
	}
}

func TestAckResentAfterReconnect(t *testing.T) {
	// The ack of 1..3 does not go out (AckDelay is long) before the
	// connection breaks: the next connection acknowledges them at once.
	srv := newServer(t, serverOpts{script: func(sc *serverConn) {
		if sc.n == 1 {
			sc.messages(1, 2, 3)
		}
	}})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.AckEvery, cfg.AckDelay = 1000, time.Hour
	start(t, cfg)
	sc := srv.conn(t)
	ev.seqs(t, 3)
	sc.drop()
	sc2 := srv.conn(t)
	if a := recv(t, sc2.acks, "ack"); a != 3 {
		t.Errorf("ack %d on the new connection, want 3", a)
	}
	if len(sc.acks) != 0 {
		t.Errorf("the first connection got an ack")
	}
}

func TestGap(t *testing.T) {
	srv := newServer(t, serverOpts{script: func(sc *serverConn) {
		sc.send(&protocol.Gap{Type: protocol.TypeGap, From: 1, To: 3, Missed: 3})
		sc.messages(4)
	}})
	ev := newEvents()
	r := start(t, baseConfig(srv.URL, ev))
	if g := recv(t, ev.gaps, "gap"); g != [3]int64{1, 3, 3} {
		t.Errorf("gap %v", g)
	}
	if got := ev.seqs(t, 1); got[0] != 4 {
		t.Errorf("delivered %v", got)
	}
	r.c.Close() // Run is over: the counters are final
	if st := r.c.Stats(); st.Gaps != 1 || st.Missed != 3 || st.LastSeq != 4 {
		t.Errorf("stats %+v", st)
	}
}

func TestRedirect(t *testing.T) {
	b := newServer(t, serverOpts{node: "B"})
	a := newServer(t, serverOpts{node: "A", script: func(sc *serverConn) {
		sc.send(&protocol.Redirect{Type: protocol.TypeRedirect, URL: b.URL, Reason: "draining"})
		sc.closeWith(protocol.CloseDraining, "draining")
	}})
	ev := newEvents()
	r := start(t, baseConfig(a.URL, ev))
	if w := ev.welcome(t); w.Node != "A" {
		t.Fatalf("first welcome from %q", w.Node)
	}
	w := ev.welcome(t)
	if w.Node != "B" || w.URL != b.URL {
		t.Errorf("after the redirect: welcome %+v, want node B at %s", w, b.URL)
	}
	if c := recv(t, ev.closes, "close"); c.code != 4001 || c.reason != "draining" {
		t.Errorf("close %+v", c)
	}
	if n := a.n.Load(); n != 1 {
		t.Errorf("A got %d handshakes, want 1", n)
	}
	if code := r.c.Stats().LastCloseCode; code != 4001 {
		t.Errorf("LastCloseCode %d, want 4001", code)
	}
	r.c.Close() // Run is over: the counters are final
	if st := r.c.Stats(); st.Reconnects != 1 || st.Connects != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestStopCodes(t *testing.T) {
	for _, code := range []int{1000, 1008, 1009, 4003, 4009} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			srv := newServer(t, serverOpts{script: func(sc *serverConn) { sc.closeWith(code, "bye") }})
			ev := newEvents()
			r := start(t, baseConfig(srv.URL, ev))
			err := r.wait(t)
			var ce *client.CloseError
			if !errors.As(err, &ce) || ce.Code != code || ce.Reason != "bye" {
				t.Fatalf("Run = %v, want a CloseError %d", err, code)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(code)) {
				t.Errorf("error %q lacks the code", err)
			}
			if n := srv.n.Load(); n != 1 {
				t.Errorf("%d handshakes, want 1", n)
			}
			if c := recv(t, ev.closes, "close"); c.code != code {
				t.Errorf("OnClose %d", c.code)
			}
			var last stateEvent
			for len(ev.states) > 0 {
				last = <-ev.states
			}
			if last.state != client.StateClosed || !errors.As(last.err, &ce) {
				t.Errorf("last state %v %v, want closed with the close error", last.state, last.err)
			}
		})
	}
}

func TestReconnectCodes(t *testing.T) {
	for _, code := range []int{1001, 4001, 4008, 4429, 1011} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			srv := newServer(t, serverOpts{script: func(sc *serverConn) {
				if sc.n == 1 {
					sc.messages(1)
					if sc.waitAck(1) {
						sc.closeWith(code, "")
					}
				}
			}})
			ev := newEvents()
			start(t, baseConfig(srv.URL, ev))
			srv.handshake(t)
			if h := srv.handshake(t); h.query.Get("since") != "1" {
				t.Errorf("reconnect with since=%q, want 1", h.query.Get("since"))
			}
			if c := recv(t, ev.closes, "close"); c.code != code {
				t.Errorf("OnClose %d", c.code)
			}
		})
	}
}

func TestQuickReconnectGuard(t *testing.T) {
	// A server that closes with 4001 at once, again and again: three
	// reconnects come at once, then the backoff applies.
	srv := newServer(t, serverOpts{script: func(sc *serverConn) { sc.closeWith(protocol.CloseDraining, "") }})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.MinBackoff, cfg.MaxBackoff = 300*time.Millisecond, time.Second
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// No jitter on the quick path, the whole window on the backoff.
	client.SetRand(c, func(n int64) int64 {
		if n == int64(250*time.Millisecond)+1 {
			return 0
		}
		return n - 1
	})
	run(t, c, context.Background())
	var at []time.Time
	for range 5 {
		at = append(at, srv.handshake(t).at)
	}
	for i := 1; i <= 3; i++ {
		if d := at[i].Sub(at[i-1]); d >= cfg.MinBackoff {
			t.Errorf("reconnect %d after %v, want at once", i, d)
		}
	}
	if d := at[4].Sub(at[3]); d < cfg.MinBackoff {
		t.Errorf("reconnect 4 after %v, want the backoff (%v)", d, cfg.MinBackoff)
	}
}

func TestTokenRefreshOn4401(t *testing.T) {
	srv := newServer(t, serverOpts{script: func(sc *serverConn) {
		if sc.n == 1 {
			sc.closeWith(protocol.CloseTokenExpired, "token expired")
		}
	}})
	ev := newEvents()
	tokens := &counter{}
	cfg := baseConfig(srv.URL, ev)
	cfg.Token = tokens.token
	start(t, cfg)
	if h := srv.handshake(t); h.auth != "Bearer tok-1" {
		t.Errorf("first Authorization %q", h.auth)
	}
	if h := srv.handshake(t); h.auth != "Bearer tok-2" {
		t.Errorf("Authorization after 4401 %q, want a new token", h.auth)
	}
	ev.welcome(t)
	ev.welcome(t)
	if n := tokens.calls(); n != 2 {
		t.Errorf("Token called %d times, want 2", n)
	}
}

func TestHandshakeRefusedStops(t *testing.T) {
	cases := []struct {
		status int
		code   string
	}{
		{status: 400, code: "bad_request"},
		{status: 401, code: "unauthorized"},
		{status: 403, code: "origin_forbidden"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			srv := newServer(t, serverOpts{refuse: func(int64) *refusal {
				return &refusal{status: tc.status, code: tc.code, msg: "token expired at noon"}
			}})
			ev := newEvents()
			r := start(t, baseConfig(srv.URL, ev))
			err := r.wait(t)
			var he *client.HandshakeError
			if !errors.As(err, &he) || he.Status != tc.status || he.Code != tc.code || he.Message != "token expired at noon" {
				t.Fatalf("Run = %#v, want a HandshakeError %d", err, tc.status)
			}
			for _, want := range []string{fmt.Sprint(tc.status), tc.code, "token expired at noon"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if st := r.c.Stats(); st.Dials != 1 || st.Connects != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestHandshakeRetryAfter(t *testing.T) {
	srv := newServer(t, serverOpts{refuse: func(n int64) *refusal {
		switch n {
		case 1:
			return &refusal{status: 503, retryAfter: "1", code: "unavailable", msg: "draining"}
		case 2:
			return &refusal{status: 429, code: "rate_limited", msg: "slow down"}
		}
		return nil
	}})
	ev := newEvents()
	r := start(t, baseConfig(srv.URL, ev))
	h1 := srv.handshake(t)
	h2 := srv.handshake(t)
	srv.handshake(t)
	ev.welcome(t)
	if d := h2.at.Sub(h1.at); d < time.Second {
		t.Errorf("retried %v after a 503 with Retry-After: 1", d)
	}
	var he *client.HandshakeError
	if s := recv(t, ev.states, "state"); s.state != client.StateConnecting {
		t.Errorf("first state %v", s.state)
	}
	if s := recv(t, ev.states, "state"); s.state != client.StateReconnecting || !errors.As(s.err, &he) || he.Status != 503 || he.RetryAfter != time.Second {
		t.Errorf("state %v %v, want reconnecting after 503", s.state, s.err)
	}
	if st := r.c.Stats(); st.Dials != 3 || st.Connects != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestAllocator(t *testing.T) {
	b := newServer(t, serverOpts{node: "B", script: func(sc *serverConn) {
		sc.closeWith(protocol.CloseGoingAway, "")
	}})
	a := newServer(t, serverOpts{node: "A", script: func(sc *serverConn) {
		if sc.n == 1 {
			sc.send(&protocol.Redirect{Type: protocol.TypeRedirect, URL: b.URL})
			sc.closeWith(protocol.CloseDraining, "")
		}
	}})
	var calls atomic.Int64
	users := make(chan string, 10)
	alloc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/allocate" {
			http.NotFound(w, r)
			return
		}
		users <- r.URL.Query().Get("user")
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"no node"}}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"node": "A", "url": a.URL})
	}))
	defer alloc.Close()

	ev := newEvents()
	cfg := baseConfig("", ev)
	cfg.Allocator = alloc.URL + "/"
	start(t, cfg)
	var nodes []string
	for range 3 {
		nodes = append(nodes, ev.welcome(t).Node)
	}
	// A (allocated), B (redirect, no allocator call), A (allocated after 1001).
	if !slices.Equal(nodes, []string{"A", "B", "A"}) {
		t.Errorf("connected to %v", nodes)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("allocator called %d times, want 3 (one 503, then two)", n)
	}
	if u := recv(t, users, "allocator call"); u != "alice" {
		t.Errorf("allocator user=%q", u)
	}
}

func TestRequests(t *testing.T) {
	srv := newServer(t, serverOpts{respond: func(sc *serverConn, cf *protocol.ClientFrame) {
		switch {
		case cf.Room == "secret":
			sc.send(&protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, Error: &protocol.ErrorBody{Code: protocol.ErrForbidden, Message: "not in rooms"}})
		case cf.Room == "limited":
			sc.send(&protocol.ErrorFrame{Type: protocol.TypeError, Code: protocol.ErrRateLimited, Message: "too fast"})
		default:
			sc.send(&protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, OK: true})
		}
	}})
	ev := newEvents()
	c, err := client.New(baseConfig(srv.URL, ev))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	// A request made before Run waits for the connection.
	published := make(chan error, 1)
	go func() {
		published <- c.Publish(ctx, protocol.Target{Type: protocol.TargetRoom, ID: "lobby"}, "chat", map[string]string{"text": "hi"})
	}()
	run(t, c, context.Background())
	if err := recv(t, published, "Publish"); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	sc := srv.conn(t)
	f := sc.frame(t, protocol.TypePublish)
	if f.ID == "" || *f.Target != (protocol.Target{Type: "room", ID: "lobby"}) || f.Event != "chat" || string(f.Data) != `{"text":"hi"}` {
		t.Errorf("publish frame %+v data %s", f, f.Data)
	}

	if err := c.Join(ctx, "lobby"); err != nil {
		t.Errorf("Join: %v", err)
	}
	if f := sc.frame(t, protocol.TypeJoin); f.Room != "lobby" {
		t.Errorf("join frame %+v", f)
	}
	var re *client.ReplyError
	if err := c.Join(ctx, "secret"); !errors.As(err, &re) || re.Code != protocol.ErrForbidden || re.Message != "not in rooms" {
		t.Errorf("Join refused = %v", err)
	}
	if err := c.Leave(ctx, "limited"); !errors.As(err, &re) || re.Code != protocol.ErrRateLimited {
		t.Errorf("Leave answered by an error frame = %v", err)
	}
	if err := c.Leave(ctx, "lobby"); err != nil {
		t.Errorf("Leave: %v", err)
	}
	if rtt, err := c.Ping(ctx); err != nil || rtt <= 0 {
		t.Errorf("Ping = %v, %v", rtt, err)
	}

	// An error frame with no request pending is surfaced.
	sc.send(&protocol.ErrorFrame{Type: protocol.TypeError, Code: protocol.ErrBadFrame, Message: "what"})
	if e := recv(t, ev.errs, "error event"); e.Code != protocol.ErrBadFrame || e.Message != "what" {
		t.Errorf("OnError %+v", e)
	}

	if err := c.Publish(ctx, protocol.Target{Type: "broadcast"}, "e", nil); err == nil {
		t.Error("Publish to broadcast accepted")
	}
	if err := c.Join(ctx, ""); err == nil {
		t.Error("Join of an empty room accepted")
	}
}

func TestConcurrentRequests(t *testing.T) {
	srv := newServer(t, serverOpts{})
	ev := newEvents()
	r := start(t, baseConfig(srv.URL, ev))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	errs := make(chan error, 40)
	for i := range 20 {
		go func() {
			errs <- r.c.Publish(ctx, protocol.Target{Type: "user", ID: "bob"}, "e", i)
		}()
		go func() {
			_, err := r.c.Ping(ctx)
			errs <- err
		}()
	}
	for range 40 {
		if err := recv(t, errs, "answer"); err != nil {
			t.Error(err)
		}
	}
}

func TestRequestLostWithConnection(t *testing.T) {
	srv := newServer(t, serverOpts{respond: func(sc *serverConn, cf *protocol.ClientFrame) { sc.drop() }})
	ev := newEvents()
	r := start(t, baseConfig(srv.URL, ev))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r.c.Join(ctx, "lobby"); !errors.Is(err, client.ErrConnectionLost) {
		t.Errorf("Join on a dropped connection = %v", err)
	}
}

func TestMsgPack(t *testing.T) {
	srv := newServer(t, serverOpts{script: func(sc *serverConn) {
		sc.message(1, "chat", `{"text":"hi","n":3}`)
	}})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.Format = protocol.MsgPack
	r := start(t, cfg)
	if h := srv.handshake(t); h.query.Get("format") != "msgpack" {
		t.Errorf("format=%q", h.query.Get("format"))
	}
	m := recv(t, ev.msgs, "message")
	var data map[string]any
	if err := json.Unmarshal(m.Data, &data); err != nil || !reflect.DeepEqual(data, map[string]any{"text": "hi", "n": 3.0}) || m.Event != "chat" || m.Seq != 1 || m.TS == 0 {
		t.Errorf("message %+v (%s): %v", m, m.Data, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r.c.Publish(ctx, protocol.Target{Type: "user", ID: "bob"}, "e", json.RawMessage(`[1,"x"]`)); err != nil {
		t.Fatal(err)
	}
	sc := srv.conn(t)
	if f := sc.frame(t, protocol.TypePublish); string(f.Data) != `[1,"x"]` {
		t.Errorf("publish data %s", f.Data)
	}
	if a := recv(t, sc.acks, "ack"); a != 1 {
		t.Errorf("ack %d", a)
	}
}

func TestRunContextCancel(t *testing.T) {
	srv := newServer(t, serverOpts{})
	ev := newEvents()
	c, err := client.New(baseConfig(srv.URL, ev))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := run(t, c, ctx)
	ev.welcome(t)
	sc := srv.conn(t)
	if err := c.Run(ctx); !errors.Is(err, client.ErrRunning) {
		t.Errorf("second Run = %v", err)
	}
	cancel()
	if err := r.wait(t); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	sc.waitClosed(t)
	if code := sc.closeCode.Load(); code != 1000 {
		t.Errorf("close code %d, want 1000", code)
	}
}

func TestIdleTimeout(t *testing.T) {
	srv := newServer(t, serverOpts{})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.IdleTimeout = 50 * time.Millisecond
	start(t, cfg)
	ev.welcome(t)
	if c := recv(t, ev.closes, "close"); c.code != 1006 {
		t.Errorf("close %+v, want 1006 after the idle timeout", c)
	}
	ev.welcome(t)
}

func TestNetworkErrorRetried(t *testing.T) {
	// Nothing listens at first: the client keeps retrying with backoff.
	ev := newEvents()
	cfg := baseConfig("ws://127.0.0.1:1/ws", ev)
	r := start(t, cfg)
	recv(t, ev.states, "connecting")
	for range 3 {
		if s := recv(t, ev.states, "state"); s.state != client.StateReconnecting || s.err == nil {
			t.Errorf("state %v %v", s.state, s.err)
		}
	}
	if st := r.c.Stats(); st.Dials < 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestNewValidates(t *testing.T) {
	bad := []client.Config{
		{User: "a"},
		{URL: "http://x/ws", User: "a"},
		{URL: "ws://x/ws"},
		{URL: "ws://x/ws", User: "a", MinBackoff: time.Second, MaxBackoff: time.Millisecond},
		{URL: "ws://x/ws", User: "a", LocalAddr: "nope"},
		{Allocator: "ws://x", User: "a"},
		{URL: "ws://x/ws", User: "a", TokenVia: 7},
	}
	for _, cfg := range bad {
		if _, err := client.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	if _, err := client.New(client.Config{URL: "ws://x/ws", User: "a", LocalAddr: "127.0.0.1"}); err != nil {
		t.Error(err)
	}
}

// After the cluster lost its state its seqs start again: a welcome whose
// inbox_seq (2) is below the client's resume point (40) lowers it to 2, so
// that seq 3 onwards is not taken for duplicates.
func TestResumePointFollowsLowerInboxSeq(t *testing.T) {
	srv := newServer(t, serverOpts{inboxSeq: 2, script: func(sc *serverConn) {
		sc.messages(2, 3, 4)
	}})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	since := int64(40)
	cfg.Since = &since
	start(t, cfg)
	if got := ev.seqs(t, 2); !slices.Equal(got, []int64{3, 4}) {
		t.Errorf("delivered %v after a welcome with inbox_seq 2 and since 40, want [3 4]", got)
	}
}

// Config.Device goes with every connect and reconnect; a bad one is
// refused by New.
func TestDeviceSentOnEveryConnect(t *testing.T) {
	srv := newServer(t, serverOpts{script: func(sc *serverConn) {
		if sc.n == 1 {
			sc.drop()
		}
	}})
	cfg := baseConfig(srv.URL, newEvents())
	cfg.Device = "laptop-1"
	start(t, cfg)
	for i := 1; i <= 2; i++ {
		if h := srv.handshake(t); h.query.Get("device") != "laptop-1" {
			t.Errorf("connect %d with device=%q, want laptop-1", i, h.query.Get("device"))
		}
	}
	for _, bad := range []string{"a b", strings.Repeat("x", 65), "é"} {
		cfg.Device = bad
		if _, err := client.New(cfg); err == nil || !strings.Contains(err.Error(), "Device") {
			t.Errorf("New with device %q: %v", bad, err)
		}
	}
}

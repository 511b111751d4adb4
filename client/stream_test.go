package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

// streamStandIn is a node behind a proxy that refuses WebSocket upgrades
// (403) and passes SSE and HTTP streaming (contract §18): each stream
// gets a welcome with a session, then what the test pushes; posted frames
// are recorded and pings answered on the stream.
type streamStandIn struct {
	srv *httptest.Server

	mu      sync.Mutex
	dials   []string      // "ws", "sse" or "stream", in order, with the query
	posts   []postedReq   // POST /v1/conn/{id}
	streams []chan string // per stream: frames to send (JSON); closed to end it
	changed chan struct{}
}

type postedReq struct {
	conn, auth string
	frames     []map[string]any
}

func newStreamStandIn(t *testing.T) *streamStandIn {
	s := &streamStandIn{changed: make(chan struct{}, 100)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *streamStandIn) note() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *streamStandIn) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/ws":
		s.mu.Lock()
		s.dials = append(s.dials, "ws?"+r.URL.RawQuery)
		s.mu.Unlock()
		s.note()
		http.Error(w, "websocket blocked by the proxy", http.StatusForbidden)
	case strings.HasPrefix(r.URL.Path, "/v1/conn/"):
		var one map[string]any
		var many []map[string]any
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &many) != nil {
			json.Unmarshal(b, &one)
			many = []map[string]any{one}
		}
		conn := strings.TrimPrefix(r.URL.Path, "/v1/conn/")
		s.mu.Lock()
		s.posts = append(s.posts, postedReq{conn: conn, auth: r.Header.Get("Authorization"), frames: many})
		var ch chan string
		if i := strings.Index(conn, "-"); i > 0 {
			var n int
			fmt.Sscan(conn[i+1:], &n)
			ch = s.streams[n]
		}
		s.mu.Unlock()
		for _, f := range many {
			if f["type"] == "ping" {
				ch <- `{"type":"pong"}`
			}
		}
		s.note()
		w.WriteHeader(http.StatusAccepted)
	case r.URL.Path == "/sse" || r.URL.Path == "/stream":
		kind := strings.TrimPrefix(r.URL.Path, "/")
		ch := make(chan string, 16)
		s.mu.Lock()
		n := len(s.streams)
		s.streams = append(s.streams, ch)
		s.dials = append(s.dials, kind+"?"+r.URL.RawQuery)
		s.mu.Unlock()
		s.note()
		ct := "text/event-stream"
		if kind == "stream" {
			ct = "application/x-ndjson"
		}
		w.Header().Set("Content-Type", ct)
		fl := w.(http.Flusher)
		write := func(frame string) {
			if kind == "sse" {
				fmt.Fprintf(w, ": idle\n\ndata: %s\nid: x%d\n\n", frame, n)
			} else {
				fmt.Fprintf(w, "%s\n", frame)
			}
			fl.Flush()
		}
		write(fmt.Sprintf(`{"type":"welcome","conn_id":"c-%d","node":"n1","user":"alice","ping_interval_ms":25000,"inbox_seq":1000000,"session":"secret%d","transport":%q}`, n, n, kind))
		for {
			select {
			case f, ok := <-ch:
				if !ok {
					return
				}
				write(f)
			case <-r.Context().Done():
				return
			}
		}
	default:
		http.NotFound(w, r)
	}
}

// await waits until cond holds on the stand-in's records.
func (s *streamStandIn) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("stand-in: no %s within %v; dials %v, posts %+v", what, waitTimeout, s.dials, s.posts)
		}
	}
}

func (s *streamStandIn) stream(n int) chan string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[n]
}

// With the upgrade refused, the client falls back to SSE at once at the
// same node, gets its messages, posts acks and requests with the session,
// follows the close frame, tries WebSocket first again and resumes on SSE
// from the last seq without a duplicate; with Transports [Stream] it
// reads ndjson.
func TestTransportFallback(t *testing.T) {
	s := newStreamStandIn(t)
	ev := newEvents()
	cfg := baseConfig("ws"+strings.TrimPrefix(s.srv.URL, "http")+"/ws", ev)
	cfg.Transports = nil // the default: websocket, sse, stream
	r := start(t, cfg)
	w := recv(t, ev.welcomes, "welcome")
	if w.Transport != client.SSE || w.ConnID != "c-0" {
		t.Fatalf("welcome %+v, want one over sse", w)
	}
	s.stream(0) <- `{"type":"message","id":"m1","event":"e","data":1,"ts":1,"target":{"type":"user","id":"alice"},"seq":1}`
	if m := recv(t, ev.msgs, "message"); m.Seq != 1 {
		t.Fatalf("message %+v", m)
	}
	s.await(t, "posted ack", func() bool {
		return slices.ContainsFunc(s.posts, func(p postedReq) bool { return p.frames[0]["type"] == "ack" })
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := r.c.Ping(ctx); err != nil {
		t.Fatalf("ping over posts and the stream: %v", err)
	}
	s.mu.Lock()
	for _, p := range s.posts {
		if p.conn != "c-0" || p.auth != "Bearer secret0" {
			t.Errorf("post %+v: want conn c-0 with the session", p)
		}
	}
	s.mu.Unlock()
	// Redirect and the close frame: WebSocket is tried first again.
	s.stream(0) <- `{"type":"close","code":4001,"reason":"draining"}`
	close(s.stream(0))
	w = recv(t, ev.welcomes, "second welcome")
	if w.Transport != client.SSE || w.ConnID != "c-1" {
		t.Fatalf("second welcome %+v", w)
	}
	s.stream(1) <- `{"type":"message","id":"m1","event":"e","data":1,"ts":1,"target":{"type":"user","id":"alice"},"seq":1}`
	s.stream(1) <- `{"type":"message","id":"m2","event":"e","data":2,"ts":1,"target":{"type":"user","id":"alice"},"seq":2}`
	if m := recv(t, ev.msgs, "message"); m.Seq != 2 {
		t.Fatalf("after the resume: %+v, want seq 2 (1 is a duplicate)", m)
	}
	s.mu.Lock()
	dials := slices.Clone(s.dials)
	s.mu.Unlock()
	var kinds []string
	for _, d := range dials {
		kinds = append(kinds, d[:strings.Index(d, "?")])
	}
	if !slices.Equal(kinds, []string{"ws", "sse", "ws", "sse"}) {
		t.Fatalf("dials %v, want ws, sse, ws, sse", dials)
	}
	if !strings.Contains(dials[3], "since=1") {
		t.Fatalf("the second SSE dial %q does not resume from 1", dials[3])
	}
	if st := r.c.Stats(); st.Duplicates != 1 {
		t.Fatalf("duplicates %d, want 1", st.Duplicates)
	}
}

func TestTransportStreamOnly(t *testing.T) {
	s := newStreamStandIn(t)
	ev := newEvents()
	cfg := baseConfig("ws"+strings.TrimPrefix(s.srv.URL, "http")+"/ws", ev)
	cfg.Transports = []client.Transport{client.Stream}
	start(t, cfg)
	if w := recv(t, ev.welcomes, "welcome"); w.Transport != client.Stream {
		t.Fatalf("welcome %+v", w)
	}
	s.stream(0) <- `{"type":"message","id":"m5","event":"e","data":5,"ts":1,"target":{"type":"user","id":"alice"},"seq":5}`
	if m := recv(t, ev.msgs, "message"); m.Seq != 5 {
		t.Fatalf("message %+v", m)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dials) != 1 || !strings.HasPrefix(s.dials[0], "stream?") {
		t.Fatalf("dials %v", s.dials)
	}
}

func TestTransportsValidated(t *testing.T) {
	for _, cfg := range []client.Config{
		{URL: "ws://x/ws", User: "a", Transports: []client.Transport{"polling"}},
		{URL: "ws://x/ws", User: "a", Transports: []client.Transport{client.SSE}, Format: protocol.MsgPack},
	} {
		if _, err := client.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

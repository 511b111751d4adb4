package gateway

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// rawConn is a client that reads nothing until told to, and then reads
// the frames off the socket itself (no client-side dedup or reordering).
type rawConn struct {
	conn net.Conn
	r    io.Reader
}

func dialRaw(t *testing.T, addr, user, query string) *rawConn {
	t.Helper()
	hdr := http.Header{"Authorization": {"Bearer " + token(t, user, nil)}}
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(hdr), Timeout: 5 * time.Second}
	conn, br, _, err := d.Dial(context.Background(), "ws://"+addr+"/ws"+query)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &rawConn{conn: conn, r: conn}
	if br != nil {
		c.r = io.MultiReader(br, conn)
	}
	return c
}

// readSeqs reads frames, appending the seq of every message frame to
// *got, until seq upTo arrived (0), the server closed (its close code) or
// nothing came for 10 s (-1).
func (c *rawConn) readSeqs(got *[]int64, upTo int64) int {
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		h, err := ws.ReadHeader(c.r)
		if err != nil {
			return -1
		}
		payload := make([]byte, h.Length)
		if _, err := io.ReadFull(c.r, payload); err != nil {
			return -1
		}
		switch h.OpCode {
		case ws.OpClose:
			code := 1005
			if len(payload) >= 2 {
				code = int(binary.BigEndian.Uint16(payload))
			}
			c.conn.Close()
			return code
		case ws.OpText:
			var m struct {
				Type string `json:"type"`
				Seq  int64  `json:"seq"`
			}
			if json.Unmarshal(payload, &m) == nil && m.Type == "message" && m.Seq > 0 {
				*got = append(*got, m.Seq)
				if m.Seq >= upTo {
					return 0
				}
			}
		}
	}
}

// receiveAll reads every seq up to upTo from c, resuming (since = the
// last seq received) whenever the node closes with 4008, as a client
// does, and returns what arrived, in arrival order, and the 4008 closes.
func receiveAll(t *testing.T, n *testNode, c *rawConn, user string, upTo int64) (got []int64, resumes int) {
	t.Helper()
	return receiveAllResuming(t, n, c, user, upTo, func(since int64) string { return fmt.Sprintf("?since=%d", since) })
}

// receiveAllResuming is receiveAll with the resume query made by query
// from the last seq received.
func receiveAllResuming(t *testing.T, n *testNode, c *rawConn, user string, upTo int64, query func(since int64) string) (got []int64, resumes int) {
	t.Helper()
	for {
		code := c.readSeqs(&got, upTo)
		switch code {
		case 0:
			return got, resumes
		case protocol.CloseSlowConsumer:
			resumes++
			if resumes > 20 {
				t.Fatalf("more than 20 resumes; got %d seqs", len(got))
			}
			var since int64
			if len(got) > 0 {
				since = got[len(got)-1]
			}
			c = dialRaw(t, n.addr, user, query(since))
		default:
			t.Fatalf("read ended with %d after %d seqs (last %v)", code, len(got), got[max(0, len(got)-3):])
		}
	}
}

// checkWhole fails unless got is exactly 1..upTo.
func checkWhole(t *testing.T, got []int64, upTo int64) {
	t.Helper()
	for i, s := range got {
		if s != int64(i+1) {
			t.Fatalf("seq %d at position %d (after %v): a hole, a duplicate or out of order; %d of %d arrived", s, i, got[max(0, i-3):i], len(got), upTo)
		}
	}
	if int64(len(got)) != upTo {
		t.Fatalf("got %d seqs, want %d", len(got), upTo)
	}
}

// Backpressure never discards a reliable message, whatever its class: a
// client that stalls while reliable messages pile up, then reads, gets
// every seq exactly once, in order, without holes (contract 4.3, 4.5).
func TestReliableSurvivesBackpressureEveryClass(t *testing.T) {
	const total = 120
	payload := `"` + strings.Repeat("x", 60000) + `"`
	for _, cl := range []string{"realtime", "chat", "notify"} {
		for _, batch := range []bool{false, true} {
			name := cl + "/single"
			if batch {
				name = cl + "/batch"
			}
			t.Run(name, func(t *testing.T) {
				n := startNode(t, func(c *config.Gateway) { c.SendQueue = 16; c.InboxLimit = 1000 })
				user := "stall-" + cl
				c := dialRaw(t, n.addr, user, "")
				eventually(t, 5*time.Second, "connected", func() bool { return n.hub.count() == 1 })
				if batch {
					for i := 0; i < total; i += 40 {
						var msgs []json.RawMessage
						for j := i; j < i+40; j++ {
							msgs = append(msgs, json.RawMessage(fmt.Sprintf(`{"target":{"type":"user","id":%q},"event":"e","data":%s,"reliable":true,"class":%q}`, user, payload, cl)))
						}
						for k, r := range n.publishBatch(context.Background(), msgs, "") {
							if _, ok := r.(api.PublishResult); !ok {
								t.Fatalf("batch message %d: %v", i+k, r)
							}
						}
					}
				} else {
					for i := 0; i < total; i++ {
						pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: user}, Event: "e", Data: raw(payload), Reliable: true, Class: cl})
					}
				}
				got, resumes := receiveAll(t, n, c, user, total)
				checkWhole(t, got, total)
				t.Logf("%d seqs, %d resumes after 4008", len(got), resumes)
			})
		}
	}
}

// pausedConnect is the embedded backend with Connect paused after its
// read, until released: the connection stays in its resume meanwhile.
type pausedConnect struct {
	cluster.Backend
	user    string
	read    chan struct{}
	release chan struct{}
}

func (p *pausedConnect) Connect(ctx context.Context, route cluster.Route, ttl time.Duration, since int64, opt cluster.InboxOptions, lim cluster.ConnLimit) (cluster.ConnectResult, error) {
	cr, err := p.Backend.Connect(ctx, route, ttl, since, opt, lim)
	if route.User == p.user {
		close(p.read)
		<-p.release
	}
	return cr, err
}

// A message that reached the inbox but whose bus copy was lost while the
// connection was resuming is fetched before the held later one: the
// resume path fills holes as an open connection does.
func TestResumeFillsAHoleSeenInHeldMessages(t *testing.T) {
	b := &pausedConnect{Backend: cluster.NewMemory(), user: "resumer", read: make(chan struct{}), release: make(chan struct{})}
	pubNode := startNodeWith(t, b, nil)
	connNode := startNodeWith(t, b, func(c *config.Gateway) { c.NodeID = "t2" })
	connNode.loseBus = func(seq int64) bool { return seq == 1 }
	dialed := make(chan *rawConn, 1)
	go func() { dialed <- dialRaw(t, connNode.addr, "resumer", "") }()
	<-b.read // the replay is read (empty); the route is stored
	reliable(t, pubNode, "resumer", 1)
	reliable(t, pubNode, "resumer", 2)
	eventually(t, 5*time.Second, "seq 2 held by the resuming connection", func() bool {
		cs := connNode.hub.userConns("resumer")
		if len(cs) != 1 {
			return false
		}
		cs[0].mu.Lock()
		defer cs[0].mu.Unlock()
		return cs[0].sess.Holding() == 1
	})
	close(b.release)
	c := <-dialed
	var got []int64
	if code := c.readSeqs(&got, 2); code != 0 {
		t.Fatalf("read ended with %d after %v", code, got)
	}
	checkWhole(t, got, 2)
}

// Redis drops the nodes' Pub/Sub connections (CLIENT KILL TYPE pubsub, as
// the output-buffer limit does) while reliable messages are published to
// a user on another node: every seq arrives, in order, without any later
// message being published and without a reconnect. The node loses the bus
// copies of seqs 2-10 for sure (as if they were published while its
// subscription was down), and its 30 s safety net is off: only the
// catch-up that follows the restored subscription can bring them.
func TestSubscriberLossIsCaughtUpWithoutALaterMessage(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	pubNode := startNodeWith(t, redisBackend(t, srv.URL(), "subloss", 0), nil)
	connNode := startNodeWith(t, redisBackend(t, srv.URL(), "subloss", 0), func(c *config.Gateway) { c.NodeID = "t2" })
	connNode.catchUpEvery.Store(0)
	const total = 10
	connNode.loseBus = func(seq int64) bool { return seq >= 2 && seq <= total }
	c := dialRaw(t, connNode.addr, "far", "")
	eventually(t, 5*time.Second, "connected", func() bool { return connNode.hub.count() == 1 })
	var got []int64
	reliable(t, pubNode, "far", 0)
	if code := c.readSeqs(&got, 1); code != 0 {
		t.Fatalf("first message: read ended with %d", code)
	}
	for i := 2; i <= total; i++ {
		reliable(t, pubNode, "far", i)
	}
	admin := srv.Client()
	defer admin.Close()
	if err := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if code := c.readSeqs(&got, total); code != 0 {
		t.Fatalf("read ended with %d after %v", code, got)
	}
	checkWhole(t, got, total)
}

// lostCopy is the setup of the tests of a bus copy that never arrives: a
// publishing node on pubBackend and a node on connBackend (the same state,
// perhaps wrapped) that loses the bus copy of seq 2, with its safety-net
// check every `every` seconds (0: off) and one raw client of user.
type lostCopy struct {
	pub, conn *testNode
	c         *rawConn
	user      string
}

func newLostCopy(t *testing.T, pubBackend, connBackend cluster.Backend, every int64, user string) *lostCopy {
	t.Helper()
	l := &lostCopy{user: user}
	l.pub = startNodeWith(t, pubBackend, nil)
	l.conn = startNodeWith(t, connBackend, func(c *config.Gateway) { c.NodeID = "t2" })
	l.conn.catchUpEvery.Store(every)
	l.conn.loseBus = func(seq int64) bool { return seq == 2 }
	l.c = dialRaw(t, l.conn.addr, user, "")
	eventually(t, 5*time.Second, "connected", func() bool { return l.conn.hub.count() == 1 })
	return l
}

// publish sends seqs 1 and 2 (whose copy is lost).
func (l *lostCopy) publish(t *testing.T) {
	t.Helper()
	reliable(t, l.pub, l.user, 1)
	reliable(t, l.pub, l.user, 2)
}

// expectBoth reads until seqs 1 and 2 arrived, in order, once each.
func (l *lostCopy) expectBoth(t *testing.T) {
	t.Helper()
	var got []int64
	if code := l.c.readSeqs(&got, 2); code != 0 {
		t.Fatalf("read ended with %d after %v", code, got)
	}
	checkWhole(t, got, 2)
}

// A bus copy lost on the way, with no later message for the user and no
// reconnect, still arrives: the node checks its connections against their
// users' last seqs every catchUpPeriod (here shortened to 1 s).
func TestLostBusCopyArrivesWithoutALaterMessage(t *testing.T) {
	b := cluster.NewMemory()
	l := newLostCopy(t, b, b, 1, "quiet")
	l.publish(t)
	l.expectBoth(t)
}

// A node that dies between a reliable message's append and its bus send
// leaves the message in the inbox only. The survivors notice the death
// (three silent heartbeats) and catch their connections up then, without
// a later message and without waiting for the safety net (switched off
// here).
func TestPublisherDeathCatchesUpWithoutALaterMessage(t *testing.T) {
	b := cluster.NewMemory()
	l := newLostCopy(t, b, b, 0, "orphan")
	// The node that "dies": its heartbeat kept fresh until both messages
	// are published, silent from then on.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			_ = b.RegisterNode(context.Background(), cluster.NodeInfo{ID: "doomed", Status: cluster.StatusActive})
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	l.publish(t) // the copy of seq 2 is lost, as if its publisher died
	close(stop)
	wg.Wait()
	l.expectBoth(t)
}

// flakyLastSeqs fails its first fails calls of LastSeqs, as a backend
// that is just coming back does.
type flakyLastSeqs struct {
	cluster.Backend
	fails atomic.Int32
}

func (f *flakyLastSeqs) LastSeqs(ctx context.Context, users []string) ([]int64, error) {
	if f.fails.Add(-1) >= 0 {
		return nil, cluster.ErrUnavailable
	}
	return f.Backend.LastSeqs(ctx, users)
}

// A catch-up check that fails (the backend answers the resubscription's
// check before it is really back) is tried again soon: the lost copy
// arrives without waiting for the safety net (switched off here).
func TestFailedCatchUpCheckIsRetried(t *testing.T) {
	b := cluster.NewMemory()
	flaky := &flakyLastSeqs{Backend: b}
	flaky.fails.Store(3)
	l := newLostCopy(t, b, flaky, 0, "retry")
	l.publish(t)
	l.conn.catchUpBehind() // as after a resubscription
	l.expectBoth(t)
}

// A client's close is answered with its code when the code is one a peer
// may send, 1002 when not or for a 1-byte payload, 1007 for a reason that
// is not UTF-8 (contract 4.4); the codes clients choose share one metric
// label.
func TestClientCloseCodes(t *testing.T) {
	n := startNode(t, nil)
	body := func(code int, reason string) []byte { return ws.NewCloseFrameBody(ws.StatusCode(code), reason) }
	for _, tc := range []struct {
		name    string
		payload []byte
		want    int
	}{
		{"no payload", nil, 1000},
		{"1-byte payload", []byte{3}, 1002},
		{"1000", body(1000, "bye"), 1000},
		{"1001", body(1001, ""), 1001},
		{"1003", body(1003, ""), 1003},
		{"1004 reserved", body(1004, ""), 1002},
		{"1005 not on the wire", body(1005, ""), 1002},
		{"1006 not on the wire", body(1006, ""), 1002},
		{"1007", body(1007, ""), 1007},
		{"1014", body(1014, ""), 1014},
		{"1015 not on the wire", body(1015, ""), 1002},
		{"999", body(999, ""), 1002},
		{"2999", body(2999, ""), 1002},
		{"3000", body(3000, ""), 3000},
		{"4999", body(4999, ""), 4999},
		{"5000", body(5000, ""), 1002},
		{"invalid UTF-8 reason", append(body(1000, ""), 0xff, 0xfe), 1007},
	} {
		c := n.connect(t, "closer", "")
		c.sendRaw(ws.OpClose, tc.payload)
		if got := c.waitClosed(5 * time.Second); got != tc.want {
			t.Errorf("%s: answered %d, want %d", tc.name, got, tc.want)
		}
	}
	for _, label := range []string{"3000", "4999", "5000"} {
		if got := counterValue(t, n, "wsgate_connection_closes_total", label); got != 0 {
			t.Errorf("a close label %q exists (%v)", label, got)
		}
	}
	if got := counterValue(t, n, "wsgate_connection_closes_total", "other"); got != 2 {
		t.Errorf("closes labelled other: %v, want 2 (3000 and 4999)", got)
	}
}

// A connection that wants a writer after Shutdown (one still in its
// handshake, a late catch-up or fan-out flush) does not crash the node:
// the writers' channel is never closed under a sender.
func TestKickAfterShutdown(t *testing.T) {
	n := startNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.Shutdown(ctx)
	c := &conn{n: n.Node, fd: -1, state: stOpen}
	c.mu.Lock()
	c.outq = [][]byte{wsframe.PingFrame}
	c.kickLocked()
	c.mu.Unlock()
}

func histogramCount(t *testing.T, n *testNode, name string) uint64 {
	t.Helper()
	mfs, err := n.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// wsgate_delivery_latency_seconds has one sample per live message written
// to a socket (per connection, also after a short write), none for a
// replay (contract 16).
func TestDeliveryLatencyOneSamplePerWrittenLiveMessage(t *testing.T) {
	n := startNode(t, nil)
	a1, a2 := n.connect(t, "lat", ""), n.connect(t, "lat", "")
	for i := 1; i <= 10; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "lat"}, Event: "e", Data: raw("1")})
		reliable(t, n, "lat", i)
	}
	for _, c := range []*wsClient{a1, a2} {
		seqs(t, c, 10)
	}
	// A replay is not a live delivery.
	for i := 1; i <= 5; i++ {
		reliable(t, n, "offline", i)
	}
	seqs(t, n.connect(t, "offline", ""), 5)
	// A client that does not read for a while: short writes leave frames
	// in the unsent buffer, written later.
	big := dialRaw(t, n.addr, "big", "")
	eventually(t, 5*time.Second, "connected", func() bool { return len(n.hub.userConns("big")) == 1 })
	payload := raw(`"` + strings.Repeat("x", 60000) + `"`)
	const bigN = 150
	for i := 1; i <= bigN; i++ {
		reliable := i == bigN // the last one marks the end
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "big"}, Event: "e", Data: payload, Reliable: reliable})
	}
	var got []int64
	if code := big.readSeqs(&got, 1); code != 0 {
		t.Fatalf("big: read ended with %d", code)
	}
	const want = 2*20 + bigN
	eventually(t, 5*time.Second, "latency samples", func() bool {
		c := histogramCount(t, n, "wsgate_delivery_latency_seconds")
		if c > want {
			t.Fatalf("%d latency samples, want %d", c, want)
		}
		return c == want
	})
	if d := counterValue(t, n, "wsgate_messages_delivered_total", ""); d != want+5 {
		t.Fatalf("delivered %v, want %d live and 5 replayed", d, want)
	}
}

// A notify message that waits for room is counted once in
// wsgate_send_queue_full_total, not once per retry.
func TestNotifyWaitCountsTheFullQueueOnce(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.SendQueue = 4 })
	dialRaw(t, n.addr, "waiter", "") // never reads
	eventually(t, 5*time.Second, "connected", func() bool { return n.hub.count() == 1 })
	payload := raw(`"` + strings.Repeat("x", 60000) + `"`)
	const total = 200
	for i := 0; i < total; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "waiter"}, Data: payload, Class: "notify"})
	}
	eventually(t, 10*time.Second, "every notify message queued or dropped", func() bool {
		return counterValue(t, n, "wsgate_messages_delivered_total", "")+counterValue(t, n, "wsgate_messages_dropped_total", "notify_timeout") == total
	})
	full := counterValue(t, n, "wsgate_send_queue_full_total", "")
	dropped := counterValue(t, n, "wsgate_messages_dropped_total", "notify_timeout")
	if dropped == 0 || full < dropped || full > total {
		t.Fatalf("send_queue_full %v for %v notify drops of %d messages: want one count per message that met a full queue", full, dropped, total)
	}
}

// A notify message waiting for room is queued as soon as the queue has
// room again: the wait is woken by the drain, not by a timer. The wait is
// made an hour long, so only the wake-up can deliver what waits.
func TestNotifyWaitWokenByTheDrain(t *testing.T) {
	n := startNodeWith(t, cluster.NewMemory(), func(c *config.Gateway) { c.SendQueue = 4 }, func(n *Node) { n.notifyWait = time.Hour })
	c := dialRaw(t, n.addr, "waiter", "") // does not read until the queue is full
	eventually(t, 5*time.Second, "connected", func() bool { return n.hub.count() == 1 })
	payload := raw(`"` + strings.Repeat("x", 60000) + `"`)
	total := 0
	for counterValue(t, n, "wsgate_send_queue_full_total", "") < 3 {
		if total == 1000 {
			t.Fatal("1000 notify messages of 60 kB and the queue never filled")
		}
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "waiter"}, Data: payload, Class: "notify"})
		total++
	}
	got := 0
	for got < total {
		_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		h, err := ws.ReadHeader(c.r)
		if err != nil {
			t.Fatalf("%d of %d notify messages arrived, then: %v (%v dropped)", got, total, err, counterValue(t, n, "wsgate_messages_dropped_total", "notify_timeout"))
		}
		if _, err := io.CopyN(io.Discard, c.r, h.Length); err != nil {
			t.Fatal(err)
		}
		if h.OpCode == ws.OpText && h.Length > 60000 {
			got++
		}
	}
	if d := counterValue(t, n, "wsgate_messages_dropped_total", "notify_timeout"); d != 0 {
		t.Fatalf("%v notify messages dropped", d)
	}
}

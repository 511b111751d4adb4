package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

func TestPublishReachesUserAndNobodyElse(t *testing.T) {
	n := startNode(t, nil)
	a1 := n.connect(t, "alice", "")
	a2 := n.connect(t, "alice", "?format=json")
	bob := n.connect(t, "bob", "")
	res := pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "alice"}, Event: "hi", Data: raw(`{"x":1}`)})
	for _, c := range []*wsClient{a1, a2} {
		m := c.expect("message")
		if m["id"] != res.ID || m["event"] != "hi" || m["seq"] != nil {
			t.Fatalf("message %v", m)
		}
	}
	bob.send(`{"type":"ping","ts":5}`)
	if f := bob.next(5 * time.Second); f["type"] != "pong" || f["ts"].(float64) != 5 {
		t.Fatalf("bob got %v before his pong", f)
	}
}

func TestCloseIsIdempotentUnderConcurrency(t *testing.T) {
	n := startNode(t, nil)
	cl := n.connect(t, "closer", "")
	conns := n.hub.userConns("closer")
	if len(conns) != 1 {
		t.Fatalf("conns %d", len(conns))
	}
	c := conns[0]
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(3)
		go func() { defer wg.Done(); c.close(protocol.CloseDisconnected, "bye") }()
		go func() { defer wg.Done(); c.teardown("test") }()
		go func() { defer wg.Done(); c.send([]byte{0x81, 0}) }()
	}
	wg.Wait()
	cl.waitClosed(5 * time.Second)
	eventually(t, 5*time.Second, "connection forgotten", func() bool { return n.hub.count() == 0 })
}

func TestBadFrameFloodClosesOnlyTheOffender(t *testing.T) {
	n := startNode(t, nil)
	bad := n.connect(t, "mallory", "")
	good := n.connect(t, "alice", "")
	for i := 0; i < 10; i++ {
		bad.send(`{"type":`)
		if f := bad.expect("error"); f["code"] != "bad_frame" {
			t.Fatalf("error frame %v", f)
		}
	}
	bad.send(`{"type":"nope"}`)
	if code := bad.waitClosed(5 * time.Second); code != protocol.ClosePolicy {
		t.Fatalf("close code %d, want 1008", code)
	}
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "alice"}, Event: "still"})
	if m := good.expect("message"); m["event"] != "still" {
		t.Fatalf("good client got %v", m)
	}
}

func TestBinaryFrameOnJSONConnectionCloses1008(t *testing.T) {
	n := startNode(t, nil)
	c := n.connect(t, "bin", "")
	c.sendRaw(ws.OpBinary, []byte{1, 2, 3})
	if code := c.waitClosed(5 * time.Second); code != protocol.ClosePolicy {
		t.Fatalf("close code %d", code)
	}
}

func TestMessageRateLimit(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.MessageRate = 5 })
	c := n.connect(t, "chatty", "")
	limited := 0
	for i := 0; i < 8; i++ {
		c.send(`{"type":"ping"}`)
	}
	for i := 0; i < 8; i++ {
		f := c.next(5 * time.Second)
		if f["type"] == "error" && f["code"] == "rate_limited" {
			limited++
		}
	}
	if limited == 0 {
		t.Fatal("no rate_limited error for 8 frames at a rate of 5/s")
	}
	for i := 0; i < 10; i++ {
		c.send(`{"type":"ping"}`)
	}
	if code := c.waitClosed(5 * time.Second); code != protocol.CloseRateLimited {
		t.Fatalf("close code %d, want 4429", code)
	}
}

func TestOversizedFrameCloses1009(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.MaxMessageBytes = 1024 })
	c := n.connect(t, "big", "")
	c.send(`{"type":"ping","pad":"` + strings.Repeat("a", 2000) + `"}`)
	if code := c.waitClosed(5 * time.Second); code != protocol.CloseTooBig {
		t.Fatalf("close code %d, want 1009", code)
	}
}

func TestFragmentedMessageIsAssembled(t *testing.T) {
	n := startNode(t, nil)
	c := n.connect(t, "frag", "")
	msg := []byte(`{"type":"ping","ts":77}`)
	parts := [][]byte{msg[:5], msg[5:12], msg[12:]}
	for i, p := range parts {
		op := ws.OpContinuation
		if i == 0 {
			op = ws.OpText
		}
		f := ws.NewFrame(op, i == len(parts)-1, append([]byte(nil), p...))
		c.wmu.Lock()
		ws.WriteFrame(c.conn, ws.MaskFrameInPlace(f))
		c.wmu.Unlock()
	}
	if f := c.expect("pong"); f["ts"].(float64) != 77 {
		t.Fatalf("pong %v", f)
	}
}

func TestRealtimeDropsWhenQueueFull(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.SendQueue = 4 })
	// A client that never reads: its socket buffers fill, then its queue.
	hdr := http.Header{"Authorization": {"Bearer " + token(t, "stalled", nil)}}
	n.dial(t, "", hdr, false)
	eventually(t, 5*time.Second, "connected", func() bool { return n.hub.count() == 1 })
	payload := raw(`"` + strings.Repeat("x", 60000) + `"`)
	for i := 0; i < 200; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "stalled"}, Data: payload, Class: "realtime"})
	}
	if n.hub.count() != 1 {
		t.Fatal("a realtime overflow must not close the connection")
	}
	if got := counterValue(t, n, "wsgate_messages_dropped_total", "queue_full"); got == 0 {
		t.Fatal("no queue_full drop counted")
	}
}

func TestChatOverflowClosesSlowConsumerOnly(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.SendQueue = 4 })
	hdr := http.Header{"Authorization": {"Bearer " + token(t, "stalled", nil)}}
	n.dial(t, "", hdr, false)
	fast := n.connect(t, "fast", "")
	eventually(t, 5*time.Second, "connected", func() bool { return n.hub.count() == 2 })
	payload := raw(`"` + strings.Repeat("x", 60000) + `"`)
	for i := 0; i < 200 && len(n.hub.userConns("stalled")) > 0; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "stalled"}, Data: payload})
	}
	eventually(t, 10*time.Second, "slow consumer removed", func() bool { return len(n.hub.userConns("stalled")) == 0 })
	if got := counterValue(t, n, "wsgate_connection_closes_total", "4008"); got != 1 {
		t.Fatalf("4008 closes: %v", got)
	}
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "fast"}, Event: "ok"})
	fast.expect("message")
}

// A connection closed as a slow consumer leaves presence and
// wsgate_connections at once, while its close frame still waits for the
// socket (contract 22): publishes in that window answer online:false.
// The close handshake's timeout is put off for the test, so only the
// close itself can take the connection out.
func TestSlowConsumerLeavesPresenceAtOnce(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.SendQueue = 4 })
	hdr := http.Header{"Authorization": {"Bearer " + token(t, "stalled", nil)}}
	n.dial(t, "", hdr, false) // never reads
	n.connect(t, "fast", "")
	eventually(t, 5*time.Second, "connected", func() bool { return n.hub.count() == 2 })
	stalled := n.hub.userConns("stalled")[0]
	payload := raw(`"` + strings.Repeat("x", 60000) + `"`)
	for i := 0; i < 200 && counterValue(t, n, "wsgate_connection_closes_total", "4008") == 0; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "stalled"}, Data: payload})
	}
	stalled.mu.Lock()
	if stalled.state != stClosing {
		stalled.mu.Unlock()
		t.Fatalf("stalled connection in state %d after its 4008, want closing", stalled.state)
	}
	stalled.closingSince = time.Now().Add(time.Hour).Unix() // the sweep leaves it closing
	stalled.pendingSince = 0
	stalled.mu.Unlock()
	eventually(t, 20*time.Second, "stalled gone from presence", func() bool {
		p, err := n.Presence(context.Background(), "stalled")
		return err == nil && len(p) == 0
	})
	if got := counterValue(t, n, "wsgate_connections", ""); got != 1 {
		t.Fatalf("wsgate_connections %v after the slow consumer's close, want 1", got)
	}
	r := pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "stalled"}, Event: "e", Data: raw(`1`)})
	if r.Online == nil || *r.Online {
		t.Fatalf("publish to the closed slow consumer: %+v, want online false", r)
	}
	stalled.mu.Lock()
	defer stalled.mu.Unlock()
	if stalled.state != stClosing {
		t.Fatalf("state %d: the connection was torn down, the test shows nothing", stalled.state)
	}
}

func TestSilentClientTimesOut(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.PingInterval = time.Second; c.PongTimeout = 2 * time.Second })
	hdr := http.Header{"Authorization": {"Bearer " + token(t, "silent", nil)}}
	n.dial(t, "", hdr, false) // never reads, never answers pings
	eventually(t, 5*time.Second, "connected", func() bool { return n.hub.count() == 1 })
	eventually(t, 10*time.Second, "silent connection closed", func() bool { return n.hub.count() == 0 })
}

func TestTokenExpiryCloses4401(t *testing.T) {
	n := startNode(t, nil)
	tok := token(t, "shortlived", map[string]any{"exp": time.Now().Add(2 * time.Second).Unix()})
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + tok}}, true)
	c.expect("welcome")
	if code := c.waitClosed(10 * time.Second); code != protocol.CloseTokenExpired {
		t.Fatalf("close code %d, want 4401", code)
	}
}

func TestHandshakeRefusalsRegisterNothing(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.MaxConnsPerUser = 1 })
	n.connect(t, "only-once", "")
	for _, tc := range []struct {
		query string
		hdr   http.Header
		code  int
	}{
		{"", nil, 401},
		{"?token=garbage", nil, 401},
		{"?format=xml", http.Header{"Authorization": {"Bearer " + token(t, "x", nil)}}, 400},
		{"?since=-3", http.Header{"Authorization": {"Bearer " + token(t, "x", nil)}}, 400},
		{"", http.Header{"Authorization": {"Bearer " + token(t, "only-once", nil)}}, 429},
		{"", http.Header{"Authorization": {"Bearer " + token(t, "x", nil)}, "Origin": {"https://evil.example"}}, 403},
	} {
		d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(tc.hdr), Timeout: 5 * time.Second}
		_, _, _, err := d.Dial(t.Context(), "ws://"+n.addr+"/ws"+tc.query)
		se, ok := err.(ws.StatusError)
		if !ok || int(se) != tc.code {
			t.Errorf("%s %v: got %v, want HTTP %d", tc.query, tc.hdr, err, tc.code)
		}
	}
	if c := n.hub.count(); c != 1 {
		t.Fatalf("%d connections registered after refusals, want 1", c)
	}
}

func TestSingleDevicePolicyReplacesOlder(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.DevicePolicy = config.DeviceSingle })
	old := n.connect(t, "solo", "")
	n.connect(t, "solo", "")
	if code := old.waitClosed(5 * time.Second); code != protocol.CloseReplaced {
		t.Fatalf("old connection closed with %d, want 4009", code)
	}
	eventually(t, 5*time.Second, "one connection left", func() bool { return len(n.hub.userConns("solo")) == 1 })
}

func counterValue(t testing.TB, n *testNode, name, label string) float64 {
	t.Helper()
	mfs, err := n.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == label {
					match = true
				}
			}
			if match {
				if c := m.GetCounter(); c != nil {
					sum += c.GetValue()
				}
				if g := m.GetGauge(); g != nil {
					sum += g.GetValue()
				}
			}
		}
	}
	return sum
}

var _ = fmt.Sprint

// A client that sends a frame and its FIN in one segment (a frame, then
// an abrupt close) is gone at once, not after the pong timeout: the FIN
// has no edge of its own.
func TestFrameAndFINInOneSegment(t *testing.T) {
	n := startNode(t, nil) // pong timeout 60 s
	c := n.connect(t, "abrupt", "")
	tc := c.conn.(*net.TCPConn)
	rc, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 1) })
	c.send(`{"type":"ping"}`)
	tc.CloseWrite() // corked: the FIN leaves in the frame's segment
	eventually(t, 5*time.Second, "connection ended", func() bool { return n.hub.count() == 0 })
}

// A kick while the writer pool takes no more connections writes on the
// kicking goroutine: the frame is on the socket before the connection's
// lock is released, and no goroutine per connection is started (it would
// need the lock, which the test holds, to write).
func TestKickWritesInlineWhenTheWriterPoolIsFull(t *testing.T) {
	n := startNodeWith(t, cluster.NewMemory(), nil, func(n *Node) {
		n.writers = make(chan *conn) // nobody takes from it: the pool is full
	})
	cl := n.connect(t, "alice", "")
	var c *conn
	eventually(t, 5*time.Second, "alice's connection registered", func() bool {
		cs := n.hub.userConns("alice")
		if len(cs) == 1 {
			c = cs[0]
		}
		return c != nil
	})
	for i := range 50 {
		b, _ := protocol.Encode(c.format, protocol.Reply{Type: protocol.TypeReply, ID: fmt.Sprint(i), OK: true})
		c.mu.Lock()
		ok := c.sendLocked(c.dataFrame(b))
		writing, queued := c.writing, len(c.outq)+len(c.wbuf)
		c.mu.Unlock()
		if !ok || writing || queued != 0 {
			t.Fatalf("frame %d: queued %v, writer still owning the connection %v, %d frames or bytes not written before the lock was released", i, ok, writing, queued)
		}
	}
	for i := range 50 {
		if m := cl.expect("reply"); m["id"] != fmt.Sprint(i) {
			t.Fatalf("reply %d: %v", i, m)
		}
	}
}

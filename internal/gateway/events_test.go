package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/upstream"
	"github.com/wsgate/wsgate/protocol"
)

// recordSink keeps what it accepts; while down it refuses every Write.
type recordSink struct {
	mu      sync.Mutex
	down    bool
	refused int
	recs    []upstream.Record
	changed chan struct{} // 1-buffered: a Write ended
}

func newRecordSink() *recordSink { return &recordSink{changed: make(chan struct{}, 1)} }

func (s *recordSink) Write(ctx context.Context, recs []upstream.Record) error {
	s.mu.Lock()
	defer func() {
		s.mu.Unlock()
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}()
	if s.down {
		s.refused++
		return errors.New("sink down on purpose")
	}
	s.recs = append(s.recs, recs...)
	return nil
}

func (s *recordSink) Close() error { return nil }

func (s *recordSink) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// of returns the accepted records of the given type (all for "").
func (s *recordSink) of(typ string) []upstream.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []upstream.Record
	for _, r := range s.recs {
		if typ == "" || r.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

// wait waits, Write by Write, until cond holds on the accepted records.
func (s *recordSink) wait(t testing.TB, what string, cond func(recs []upstream.Record) bool) []upstream.Record {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		recs := s.of("")
		if cond(recs) {
			return recs
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("%s: not within 20s; records: %+v", what, recs)
		}
	}
}

func count(recs []upstream.Record, typ, user string) int {
	n := 0
	for _, r := range recs {
		if r.Type == typ && (user == "" || r.User == user) {
			n++
		}
	}
	return n
}

func withEvents(events ...string) func(*config.Gateway) {
	return func(c *config.Gateway) { c.Events = events }
}

func enable(t *testing.T, s upstream.Sink) func(*Node) {
	return func(n *Node) {
		if err := n.EnableEvents(s); err != nil {
			t.Fatal(err)
		}
	}
}

var allEvents = withEvents(config.EventNames...)

// A normal close and a kick: connect (ip, info), online, disconnect (the
// close code, a duration) and offline, with v growing.
func TestEventsConnectDisconnect(t *testing.T) {
	sink := newRecordSink()
	n := startNodeWith(t, cluster.NewMemory(), allEvents, enable(t, sink))
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "ann", map[string]any{"info": map[string]any{"name": "Ann"}})}}, true)
	c.expect("welcome")
	c.sendRaw(ws.OpClose, ws.NewCloseFrameBody(1000, "bye"))
	c.waitClosed(5 * time.Second)
	recs := sink.wait(t, "ann's four records", func(r []upstream.Record) bool { return count(r, "offline", "ann") == 1 })
	var types []string
	for _, r := range recs {
		types = append(types, r.Type)
	}
	if !slices.Equal(types, []string{"connect", "online", "disconnect", "offline"}) {
		t.Fatalf("record types %v, want connect, online, disconnect, offline", types)
	}
	conn, on, dis, off := recs[0], recs[1], recs[2], recs[3]
	if conn.IP != "127.0.0.1" || string(conn.Info) != `{"name":"Ann"}` || conn.ConnID == "" || conn.Node != "t1" || conn.Device != "default" {
		t.Fatalf("connect record %+v: want ip 127.0.0.1, info, conn id, node t1, device default", conn)
	}
	if dis.Code != 1000 || dis.DurationMS == nil || *dis.DurationMS < 0 || dis.ConnID != conn.ConnID {
		t.Fatalf("disconnect record %+v: want code 1000, a duration, the connect's conn id", dis)
	}
	if on.V != 1 || off.V != 2 {
		t.Fatalf("online v %d, offline v %d: want 1 and 2", on.V, off.V)
	}
	ids := map[string]bool{}
	for _, r := range recs {
		if ids[r.ID] || r.TS == 0 {
			t.Fatalf("record %+v: id repeated or no ts", r)
		}
		ids[r.ID] = true
	}

	// A kick through the server API: disconnect 4003.
	k := n.connect(t, "ann", "")
	status, _ := apiCall(t, n, "POST", "/api/v1/users/ann/disconnect", "k", `{"reason":"banned"}`)
	if status != 200 {
		t.Fatalf("disconnect API: %d", status)
	}
	k.waitClosed(5 * time.Second)
	recs = sink.wait(t, "the kick's disconnect", func(r []upstream.Record) bool { return count(r, "offline", "ann") == 2 })
	last := recs[len(recs)-2]
	if last.Type != "disconnect" || last.Code != 4003 {
		t.Fatalf("kick record %+v: want disconnect with code 4003", last)
	}
	if v := recs[len(recs)-1].V; v != 4 {
		t.Fatalf("second offline v %d, want 4", v)
	}
}

// One user connects and disconnects on two nodes at once, over and over:
// by v the records alternate online/offline, and the last is offline
// only once every connection is gone (never while one lives).
func TestEventsPresenceTwoNodes(t *testing.T) {
	sink := newRecordSink()
	backend := cluster.NewMemory()
	n1 := startNodeWith(t, backend, withEvents("online", "offline"), enable(t, sink))
	n2 := startNodeWith(t, backend, func(c *config.Gateway) { c.NodeID = "t2"; c.Events = []string{"online", "offline"} }, enable(t, sink))
	keep := n1.connect(t, "bob", "") // lives through the churn
	var wg sync.WaitGroup
	for i := range 2 {
		node := []*testNode{n1, n2}[i]
		wg.Go(func() {
			for range 10 {
				c := node.connect(t, "bob", "")
				c.sendRaw(ws.OpClose, ws.NewCloseFrameBody(1000, ""))
				c.waitClosed(5 * time.Second)
			}
		})
	}
	wg.Wait()
	// A barrier: every end of bob's churn is claimed (the backend lists
	// only keep as live), so a wrong offline would have been sent by now.
	eventually(t, 20*time.Second, "bob's churn claimed", func() bool {
		r1, err1 := backend.NodeConns(context.Background(), "t1")
		r2, err2 := backend.NodeConns(context.Background(), "t2")
		return err1 == nil && err2 == nil && len(r1) == 1 && len(r2) == 0
	})
	// And a churn of another user on each node in turn (one node's end
	// claimed before the other's start: else the two overlap, one
	// offline): the records of both nodes reach the sink.
	for i, node := range []*testNode{n1, n2} {
		c := node.connect(t, "zed", "")
		c.sendRaw(ws.OpClose, ws.NewCloseFrameBody(1000, ""))
		c.waitClosed(5 * time.Second)
		sink.wait(t, "zed's churn", func(r []upstream.Record) bool { return count(r, "offline", "zed") == i+1 })
	}
	if got := sink.of("offline"); count(got, "offline", "bob") != 0 {
		t.Fatalf("offline for bob while a connection of his lived: %+v", got)
	}
	if on := count(sink.of("online"), "online", "bob"); on != 1 {
		t.Fatalf("%d online records for bob, want 1", on)
	}
	keep.sendRaw(ws.OpClose, ws.NewCloseFrameBody(1000, ""))
	keep.waitClosed(5 * time.Second)
	sink.wait(t, "bob's offline", func(r []upstream.Record) bool { return count(r, "offline", "bob") == 1 })
	var bob []upstream.Record
	for _, r := range sink.of("") {
		if r.User == "bob" {
			bob = append(bob, r)
		}
	}
	if len(bob) != 2 || bob[0].Type != "online" || bob[1].Type != "offline" || bob[1].V <= bob[0].V {
		t.Fatalf("bob's records %+v: want online then offline with a higher v", bob)
	}
}

// The connections of a node that died: a survivor reports each end once
// (1006, "node died") and the offline of users left with none, also with
// two survivors sweeping at once.
func TestEventsDeadNodeSwept(t *testing.T) {
	sink := newRecordSink()
	backend := cluster.NewMemory()
	ctx := context.Background()
	// The dead node's record: silent for ten heartbeat intervals, far
	// below the route TTL (an hour): its ends are reported after three
	// (contract 22), not when its record is gone.
	dead := cluster.NodeInfo{ID: "dead", Status: cluster.StatusActive, Heartbeat: time.Now().Add(-2 * time.Second).UnixMilli()}
	if err := backend.RegisterNode(ctx, dead); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		r := cluster.Route{User: fmt.Sprintf("u%d", i%3), ConnID: fmt.Sprintf("dead-%d", i), Node: "dead", ConnectedAt: time.Now().UnixMilli()}
		if _, err := backend.ConnUp(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	mut := func(id string) func(*config.Gateway) {
		return func(c *config.Gateway) {
			c.NodeID = id
			c.Events = []string{"disconnect", "offline"}
			c.RouteTTL = time.Hour
		}
	}
	startNodeWith(t, backend, mut("s1"), enable(t, sink))
	startNodeWith(t, backend, mut("s2"), enable(t, sink))
	recs := sink.wait(t, "the dead node's ends", func(r []upstream.Record) bool {
		return count(r, "disconnect", "") >= 6 && count(r, "offline", "") >= 3
	})
	seen := map[string]int{}
	for _, r := range recs {
		if r.Type == "disconnect" {
			seen[r.ConnID]++
			if r.Code != 1006 || r.Reason != "node died" || r.Node != "dead" {
				t.Fatalf("disconnect %+v: want code 1006, reason node died, node dead", r)
			}
		}
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("end of %s reported %d times", id, k)
		}
	}
	// Each end was claimed by one survivor only:
	// no second report.
	if d, o := count(sink.of(""), "disconnect", ""), count(sink.of(""), "offline", ""); d != 6 || o != 3 {
		t.Fatalf("%d disconnects and %d offlines, want 6 and 3", d, o)
	}
}

// join and leave, by frame and by the API; ack, one record per ack frame.
func TestEventsJoinLeaveAck(t *testing.T) {
	sink := newRecordSink()
	n := startNodeWith(t, cluster.NewMemory(), withEvents("join", "leave", "ack"), enable(t, sink))
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "cy", map[string]any{"rooms": []string{"*"}})}}, true)
	c.expect("welcome")
	c.send(map[string]any{"type": "join", "id": "j", "room": "lobby"})
	if r := c.expect("reply"); r["ok"] != true {
		t.Fatalf("join refused: %v", r)
	}
	if status, _ := apiCall(t, n, "PUT", "/api/v1/rooms/team/members/cy", "k", ""); status != 204 {
		t.Fatalf("join API: %d", status)
	}
	if status, _ := apiCall(t, n, "DELETE", "/api/v1/rooms/lobby/members/cy", "k", ""); status != 204 {
		t.Fatalf("leave API: %d", status)
	}
	r := pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "cy"}, Event: "e", Data: raw(`1`), Reliable: true})
	c.expect("message")
	c.send(map[string]any{"type": "ack", "seq": r.Seq})
	recs := sink.wait(t, "join, join, leave, ack", func(r []upstream.Record) bool { return len(r) >= 4 })
	want := []string{"join:lobby", "join:team", "leave:lobby", "ack:"}
	for i, w := range want {
		got := recs[i].Type + ":" + recs[i].Room
		if got != w || recs[i].User != "cy" {
			t.Fatalf("record %d = %+v, want %s for cy", i, recs[i], w)
		}
	}
	if recs[3].Seq != r.Seq || recs[3].ConnID == "" {
		t.Fatalf("ack record %+v: want seq %d and the conn id", recs[3], r.Seq)
	}
}

// undelivered: once for a reliable message nobody acknowledged in time,
// never for one acknowledged in time (checks are handled in due order:
// the later message's report comes after the acknowledged one's check).
func TestEventsUndelivered(t *testing.T) {
	sink := newRecordSink()
	backend := cluster.NewMemory()
	mut := func(id string) func(*config.Gateway) {
		return func(c *config.Gateway) {
			c.NodeID, c.Events, c.UndeliveredAfter = id, []string{"undelivered"}, 300*time.Millisecond
		}
	}
	n1 := startNodeWith(t, backend, mut("t1"), enable(t, sink))
	startNodeWith(t, backend, mut("t2"), enable(t, sink)) // polls the same due set
	c := n1.connect(t, "acker", "")
	acked := pub(t, n1, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "acker"}, Event: "hi", Data: raw(`1`), Reliable: true})
	c.expect("message")
	c.send(map[string]any{"type": "ack", "seq": acked.Seq})
	c.send(map[string]any{"type": "ping", "id": "barrier"})
	c.expect("pong")
	lost := pub(t, n1, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "away"}, Event: "push-me", Data: raw(`2`), Reliable: true})
	recs := sink.wait(t, "away's undelivered", func(r []upstream.Record) bool { return count(r, "undelivered", "away") >= 1 })
	if count(recs, "undelivered", "acker") != 0 {
		t.Fatalf("undelivered for an acknowledged message: %+v", recs)
	}
	u := recs[0]
	if len(recs) != 1 || u.Seq != lost.Seq || u.MessageID != lost.ID || u.Event != "push-me" {
		t.Fatalf("records %+v: want one undelivered with seq %d, message id %s, event push-me", recs, lost.Seq, lost.ID)
	}
	// Exactly one: a third message's report is the barrier for any
	// second report of the second.
	pub(t, n1, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "later"}, Event: "x", Data: raw(`3`), Reliable: true})
	recs = sink.wait(t, "later's undelivered", func(r []upstream.Record) bool { return count(r, "undelivered", "later") >= 1 })
	if count(recs, "undelivered", "away") != 1 {
		t.Fatalf("away's message reported %d times, want once", count(recs, "undelivered", "away"))
	}
	// A batch publish schedules one check per reliable message.
	status, _ := apiCall(t, n1, "POST", "/api/v1/publish/batch", "k", `{"messages":[
		{"target":{"type":"user","id":"bat"},"event":"b","reliable":true,"data":1},
		{"target":{"type":"user","id":"bat"},"event":"b","reliable":true,"data":2},
		{"target":{"type":"user","id":"cow"},"event":"b","reliable":true,"data":3}]}`)
	if status != 200 {
		t.Fatalf("batch publish: %d", status)
	}
	sink.wait(t, "the batch's undelivered", func(r []upstream.Record) bool {
		return count(r, "undelivered", "bat") == 2 && count(r, "undelivered", "cow") == 1
	})
}

// A sink outage: every event of connections that came and went while the
// sink refused every write is delivered once it is back, none dropped.
func TestEventsSinkOutage(t *testing.T) {
	sink := newRecordSink()
	sink.setDown(true)
	n := startNodeWith(t, cluster.NewMemory(), allEvents, enable(t, sink))
	const conns = 50
	for i := range conns {
		c := n.connect(t, fmt.Sprintf("o%d", i), "")
		c.sendRaw(ws.OpClose, ws.NewCloseFrameBody(1000, ""))
		c.waitClosed(5 * time.Second)
	}
	eventually(t, 10*time.Second, "writes refused", func() bool { sink.mu.Lock(); defer sink.mu.Unlock(); return sink.refused >= 2 })
	sink.setDown(false)
	recs := sink.wait(t, "every record", func(r []upstream.Record) bool { return len(r) >= 4*conns })
	for _, typ := range []string{"connect", "online", "disconnect", "offline"} {
		if k := count(recs, typ, ""); k != conns {
			t.Fatalf("%d %s records, want %d", k, typ, conns)
		}
	}
	if d := counterValue(t, n, "wsgate_upstream_dropped_total", ""); d != 0 {
		t.Fatalf("dropped %v", d)
	}
}

// Shutdown reports the disconnect of every connection it ends, also of
// clients that never answer its close frame (cut after a second, by the
// teardown loop): every record is in the sink when Shutdown returns.
func TestEventsShutdownReportsEveryDisconnect(t *testing.T) {
	sink := newRecordSink()
	n := startNodeWith(t, cluster.NewMemory(), withEvents("connect", "disconnect", "online", "offline"), enable(t, sink))
	const conns = 100
	for i := range conns {
		// No reader: the close frame is never answered.
		n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, fmt.Sprint("mute", i), nil)}}, false)
	}
	sink.wait(t, "every connect", func(r []upstream.Record) bool { return count(r, "connect", "") == conns })
	n.stop()
	recs := sink.of("disconnect")
	if len(recs) != conns {
		t.Fatalf("%d disconnect records after Shutdown, want %d", len(recs), conns)
	}
	if off := len(sink.of("offline")); off != conns {
		t.Fatalf("%d offline records after Shutdown, want %d (one user per connection)", off, conns)
	}
	for _, r := range recs {
		if r.Code != 1001 && r.Code != closeAbnormal {
			t.Fatalf("disconnect record %+v: want the shutdown's 1001 (or abnormal, cut)", r)
		}
	}
}

package gateway

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// A room plain at an API join whose first reliable message reaches the
// member's node before the membership does (two nodes' bus messages keep
// no order between them): the message found no member there. The member
// still gets it, without a later message and without the safety net (off
// here): the node reads the room's seq once the membership is in place.
func TestFirstReliableMessageBeforeTheMembershipArrives(t *testing.T) {
	b := cluster.NewMemory()
	pubNode := startNodeWith(t, b, nil)
	member := startNodeWith(t, b, func(c *config.Gateway) { c.NodeID = "t2" })
	member.catchUpEvery.Store(0)
	c := dialRaw(t, member.addr, "early", "")
	eventually(t, 5*time.Second, "connected", func() bool { return member.hub.count() == 1 })
	ctx := context.Background()
	// The joining node's steps, its bus message held back: the membership
	// stored while the room is plain, the member's node declared interested.
	j, err := b.JoinRoom(ctx, "first", "early", 0)
	if err != nil || j.RoomSeq != 0 {
		t.Fatalf("join: %+v, %v", j, err)
	}
	if err := b.SetRoomInterest(ctx, "t2", []string{"first"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	reliableRoom(t, pubNode, "first", 1) // queued for t2 before the membership
	zero := int64(0)
	if err := b.Send(ctx, []string{"t2"}, encodeEnvelope(envelope{Kind: kindMembership, User: "early", Room: "first", Join: true, RoomSeq: &zero}, nil)); err != nil {
		t.Fatal(err)
	}
	var got []int64
	if code := c.readSeqs(&got, 1); code != 0 {
		t.Fatalf("the room's first reliable message never came (read ended with %d after %v)", code, got)
	}
	checkWhole(t, got, 1)
}

// A member that followed a room while it was plain has no stream for it;
// the room's first reliable message is lost on the bus and nothing follows
// it. The safety-net check (here every second) covers the members without
// a stream too: the message arrives.
func TestLostFirstReliableMessageOfAPlainRoomArrives(t *testing.T) {
	b := cluster.NewMemory()
	l := newLostCopy(t, b, b, 1, "plainer")
	l.conn.loseBus = func(seq int64) bool { return seq == 1 }
	join(t, l.pub, "turning", "plainer")
	eventually(t, 5*time.Second, "membership", func() bool { return len(l.conn.hub.roomConns("turning")) == 1 })
	reliableRoom(t, l.pub, "turning", 1) // its copy is lost
	var got []int64
	if code := l.c.readSeqs(&got, 1); code != 0 {
		t.Fatalf("the room's first reliable message never came (read ended with %d after %v)", code, got)
	}
	checkWhole(t, got, 1)
}

// An API join on one node whose bus message to the member's node is lost
// (the member's connection stays open there, the room has history): the
// room's next message finds no member on that node. When the node is told
// its bus subscription was lost (CLIENT KILL TYPE pubsub), it reads its
// users' rooms again and follows the one it missed from the join's seq:
// the member gets every message after the join (none before), without a
// reconnect and without the safety net (off here).
func TestMissedAPIJoinIsFollowedAfterALossNotice(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	apiNode := startNodeWith(t, redisBackend(t, srv.URL(), "missedjoin", 0), nil)
	member := startNodeWith(t, redisBackend(t, srv.URL(), "missedjoin", 0), func(c *config.Gateway) { c.NodeID = "t2" })
	member.catchUpEvery.Store(0)
	lost := make(chan struct{})
	member.loseMembership = func(user, room string) bool {
		if user == "absent" && room == "told" {
			close(lost)
			return true
		}
		return false
	}
	c := dialRaw(t, member.addr, "absent", "")
	eventually(t, 5*time.Second, "connected", func() bool { return member.hub.count() == 1 })
	reliableRoom(t, apiNode, "told", 1)
	reliableRoom(t, apiNode, "told", 2)
	join(t, apiNode, "told", "absent")
	<-lost
	reliableRoom(t, apiNode, "told", 3) // reaches t2, which has no member for it
	if n, err := srv.KillClients("pubsub"); err != nil || n == 0 {
		t.Fatalf("CLIENT KILL TYPE pubsub: %d, %v", n, err)
	}
	var got []int64
	if code := c.readSeqs(&got, 3); code != 0 {
		t.Fatalf("the room's messages after the join never came (read ended with %d after %v)", code, got)
	}
	reliableRoom(t, apiNode, "told", 4)
	if code := c.readSeqs(&got, 4); code != 0 || fmt.Sprint(got) != "[3 4]" {
		t.Fatalf("room seqs %v (read ended with %d), want [3 4]: every message after the join, none before", got, code)
	}
}

// heldRoomReads holds the room history reads made while armed until
// released (Redis hanging, as under SIGSTOP, for a catch-up's read).
type heldRoomReads struct {
	cluster.Backend
	armed   atomic.Bool
	entered chan struct{} // one per held read
	release chan struct{}
}

func (h *heldRoomReads) ReadRoom(ctx context.Context, room string, since int64, most int, opt cluster.InboxOptions) (cluster.InboxRead, error) {
	if h.armed.Load() {
		h.entered <- struct{}{}
		<-h.release
	}
	return h.Backend.ReadRoom(ctx, room, since, most, opt)
}

// framesUntilPong sends a ping and returns the frames that came before
// its pong.
func framesUntilPong(t *testing.T, c *wsClient) []map[string]any {
	t.Helper()
	c.send(`{"type":"ping"}`)
	var out []map[string]any
	for {
		f := c.next(5 * time.Second)
		if f["type"] == "pong" {
			return out
		}
		out = append(out, f)
	}
}

// A leave answered while the connection's stream of the room is catching
// up (its history read hangs): once the read comes back, no frame of the
// room reaches the connection; a new join with since=N replays from N.
func TestNoRoomFrameAfterTheLeaveOfACatchingUpStream(t *testing.T) {
	b := &heldRoomReads{Backend: cluster.NewMemory(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	pubNode := startNodeWith(t, b, nil)
	// Seq 3's bus copy is lost: seq 4 starts a catch-up.
	n := startNodeWith(t, b, func(c *config.Gateway) { c.NodeID = "t2" }, func(n *Node) {
		n.loseBus = func(seq int64) bool { return seq == 3 }
	})
	for i := 1; i <= 2; i++ {
		reliableRoom(t, pubNode, "exit", i)
	}
	c := n.connectTok(t, "leaver", anyRoom)
	c.send(map[string]any{"type": "join", "id": "j1", "room": "exit", "since": 0})
	if seqs, ev := roomSeqsOf(t, c, "exit", 2); fmt.Sprint(seqs) != "[1 2]" {
		t.Fatalf("join since 0: %v", ev)
	}
	if r := c.replyTo("j1", 5*time.Second); r["ok"] != true {
		t.Fatalf("join: %v", r)
	}
	b.armed.Store(true) // the catch-up's read hangs
	reliableRoom(t, pubNode, "exit", 3)
	reliableRoom(t, pubNode, "exit", 4)
	<-b.entered
	conn := n.hub.userConns("leaver")[0]
	conn.mu.Lock()
	s := conn.sess.Stream("exit")
	conn.mu.Unlock()
	c.send(map[string]any{"type": "leave", "id": "l1", "room": "exit"})
	if r := c.replyTo("l1", 5*time.Second); r["ok"] != true {
		t.Fatalf("leave: %v", r)
	}
	b.armed.Store(false)
	close(b.release)
	eventually(t, 5*time.Second, "the catch-up of the left room ends", func() bool {
		conn.mu.Lock()
		defer conn.mu.Unlock()
		return !conn.sess.CatchingUp(s)
	})
	if fs := framesUntilPong(t, c); len(fs) > 0 {
		t.Fatalf("frames after the leave was answered: %v", fs)
	}
	c.send(map[string]any{"type": "join", "id": "j2", "room": "exit", "since": 2})
	if seqs, ev := roomSeqsOf(t, c, "exit", 4); fmt.Sprint(seqs) != "[3 4]" {
		t.Fatalf("join since 2 after the leave: %v, want 3 and 4", ev)
	}
	if r := c.replyTo("j2", 5*time.Second); r["ok"] != true {
		t.Fatalf("join: %v", r)
	}
}

// A reliable room message whose delivery found the member just before
// the leave reaches the connection after it: nothing is queued (no
// stream started for a room the user left).
func TestDeliveryRacingALeaveQueuesNothing(t *testing.T) {
	n := startNode(t, nil)
	for i := 1; i <= 2; i++ {
		reliableRoom(t, n, "gone", i)
	}
	c := n.connectTok(t, "racer", anyRoom)
	c.send(map[string]any{"type": "join", "id": "j1", "room": "gone"})
	if r := c.replyTo("j1", 5*time.Second); r["ok"] != true {
		t.Fatalf("join: %v", r)
	}
	members := n.hub.roomConns("gone") // the delivery's snapshot
	c.send(map[string]any{"type": "leave", "id": "l1", "room": "gone"})
	if r := c.replyTo("l1", 5*time.Second); r["ok"] != true {
		t.Fatalf("leave: %v", r)
	}
	n.deliverAll(members, newRoomDelivery([]byte(`{"type":"message","id":"late","event":"e","data":3,"ts":1,"seq":3,"target":{"type":"room","id":"gone"}}`), classChat, "gone", 3, 1))
	if fs := framesUntilPong(t, c); len(fs) > 0 {
		t.Fatalf("frames after the leave was answered: %v", fs)
	}
}

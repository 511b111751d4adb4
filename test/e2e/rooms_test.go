package e2e

// Reliable rooms (contract 12) across node faults: members on every node,
// a steady reliable publisher to the rooms, a node SIGKILLed and
// restarted, another drained (its clients redirected) and replaced; the
// raw-frame checker then judges every room's seqs on every connection.
// The same run on standalone Redis, Redis Cluster and Sentinel.

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

func toReliableRoom(room, event string) publishBody {
	b := toRoom(room, event)
	b.Reliable = true
	return b
}

// roomRun is one run of reliable room traffic: the rooms, their members'
// raw clients and the publisher's ledger.
type roomRun struct {
	t       *testing.T
	c       *gwCluster
	rooms   []string
	users   []string
	clients []*rawClient
	rec     *recorder
	ledger  *ledger
	liveSet

	nextJob                  atomic.Int64
	answered, failed, gaveUp atomic.Int64
}

// newRoomRun makes users members of rooms (every user of the first room,
// every other user of the others) and starts two resuming raw clients per
// user, round robin over nodes.
func newRoomRun(t *testing.T, c *gwCluster, nodes []*gateway, rooms []string, users int) *roomRun {
	rr := &roomRun{t: t, c: c, rooms: rooms, rec: newRecorder()}
	rr.ledger = newLedger(rr.rec)
	rr.setLive(nodes...)
	// The rooms are reliable before anyone connects: a connection that
	// follows a room while it is still plain starts its position at the
	// first reliable message it receives (see reliability.md, "Reliable
	// rooms": the first messages of a room that becomes reliable).
	for _, room := range rooms {
		if a, _, err := nodes[0].publish(toReliableRoom(room, "open")); err != nil || a.Seq != 1 {
			t.Fatalf("making %s reliable: %+v %v", room, a, err)
		}
	}
	for i := range users {
		u := fmt.Sprintf("ru-%02d", i)
		rr.users = append(rr.users, u)
		for k, room := range rooms {
			if k == 0 || i%2 == 0 {
				nodes[0].mustCall(t, http.StatusNoContent, http.MethodPut, "/api/v1/rooms/"+room+"/members/"+u, nil)
			}
		}
		for j := range 2 {
			rr.clients = append(rr.clients, startRawClient(t, rr.rec, fmt.Sprintf("%s/%d", u, j), u, rawOptions{
				resume: true, pick: allocatorOf(rr.liveNodes), first: nodes[len(rr.clients)%len(nodes)].WS(),
			}))
		}
	}
	waitConnected(t, 30*time.Second, rr.clients)
	return rr
}

// publishRoomJob publishes job as one reliable message to room through
// via, retried on the next node for up to 20 s (without an idempotency
// key: a retry after a 503 may store it twice, which the checker allows
// for such jobs), and returns the answered seq (0: given up).
func publishRoomJob(l *ledger, via func() *gateway, job int, room, event string) (seq int64, failed int) {
	body := toReliableRoom(room, event)
	body.Data = map[string]int{"job": job}
	l.add(&jobRec{job: job, room: room, reliable: true})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if g := via(); g != nil {
			a, st, err := g.publish(body)
			l.attemptOn(job, g.ID, st, a.Seq)
			if err == nil && a.Seq > 0 {
				return a.Seq, failed
			}
			failed++
		}
		if time.Now().After(deadline) {
			return 0, failed
		}
		time.Sleep(50 * time.Millisecond) // pacing of the retry on the next node
	}
}

func (rr *roomRun) publishOne(room, event string) (job int, seq int64) {
	job = int(rr.nextJob.Add(1))
	seq, failed := publishRoomJob(rr.ledger, rr.node, job, room, event)
	rr.failed.Add(int64(failed))
	if seq == 0 {
		rr.gaveUp.Add(1)
	} else {
		rr.answered.Add(1)
	}
	return job, seq
}

// publish sends rate reliable room messages a second, round robin over the
// rooms, until ctx ends.
func (rr *roomRun) publish(ctx context.Context, rate int) {
	jobs := make(chan int, 64)
	wait := runWorkers(8, jobs, func(i int) { rr.publishOne(rr.rooms[i%len(rr.rooms)], "room") })
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			close(jobs)
			wait()
			return
		case <-tick.C:
		}
		select {
		case jobs <- i:
		default:
		}
	}
}

// roomFence publishes one last message to every room (jobs from
// firstJob) and waits until every member's current connection has it:
// then each has had the time to get everything before it. Members that do
// not get it within d fail the test (the checker then says what is
// missing where).
func roomFence(t *testing.T, pre string, l *ledger, via func() *gateway, firstJob int, rooms []string, clients []*rawClient, d time.Duration) {
	t.Helper()
	waitConnected(t, 30*time.Second, clients)
	last := map[string]int64{}
	for i, room := range rooms {
		seq, _ := publishRoomJob(l, via, firstJob+i, room, "fence")
		if seq == 0 {
			t.Fatalf("%sthe last message to room %s was not answered", pre, room)
		}
		last[room] = seq
	}
	start := time.Now()
	for {
		var behind []string
		for _, r := range clients {
			for room, want := range last {
				if got, follows := r.currentRoomSeq(room); follows && got < want {
					behind = append(behind, fmt.Sprintf("%s at %d of %d in %s", r.name, got, want, room))
				}
			}
		}
		if len(behind) == 0 {
			t.Logf("%severy member's connection got the last room message %s after it was published", pre, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > d {
			t.Errorf("%s%d members did not get the last room message within %s: %v", pre, len(behind), d, head(behind, 10))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check fences the rooms, stops the clients and runs the checker.
func (rr *roomRun) check(gapsAllowed bool) checkSummary {
	t := rr.t
	roomFence(t, "", rr.ledger, rr.node, 3_000_000, rr.rooms, rr.clients, 30*time.Second)
	var conns []*connRec
	for _, r := range rr.clients {
		r.stop()
		conns = append(conns, r.records()...)
	}
	t.Logf("room publishes answered %d, failed attempts (retried) %d, given up %d", rr.answered.Load(), rr.failed.Load(), rr.gaveUp.Load())
	s := assertRecords(t, "", rr.rec, rr.ledger, conns, checkOpts{gapsAllowed: gapsAllowed})
	if s.distinctReliable == 0 {
		t.Error("no reliable room message was delivered")
	}
	return s
}

// roomFaults runs the room traffic on a 3-node cluster over redisURL with
// a SIGKILL and restart of n2, then a drain of n3 with a replacement n4.
func roomFaults(t *testing.T, redisURL string, settings map[string]string) {
	c := newCluster(t, redisURL, settings)
	n := c.startNodes("n", 3, nil)
	rr := newRoomRun(t, c, n, []string{"hall", "ops"}, 8)
	ctx, stop := context.WithCancel(context.Background())
	published := make(chan struct{})
	go func() {
		defer close(published)
		rr.publish(ctx, 60)
	}()
	defer func() { stop(); <-published }()
	start := time.Now()
	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) } // pacing of the scenario

	at(3 * time.Second)
	t.Log("SIGKILL n2")
	rr.setLive(n[0], n[2])
	n[1].Kill()
	at(5 * time.Second)
	n[1].Restart(t)
	rr.setLive(n...)
	t.Log("n2 restarted")

	at(7 * time.Second)
	n4 := c.startNode("n4", nil)
	rr.setLive(n[0], n[1], n4)
	t.Log("n4 started; drain n3")
	n[0].mustCall(t, http.StatusAccepted, http.MethodPost, "/api/v1/nodes/n3/drain", nil)
	if !n[2].WaitExit(20 * time.Second) {
		t.Fatal("n3 did not exit within 20 s of the drain")
	}
	at(12 * time.Second)
	stop()
	<-published
	s := rr.check(false)
	t.Logf("checker: %s", s)
}

func TestReliableRoomsSurviveKillAndDrain(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t, redistest.Options{})
	roomFaults(t, srv.URL(), map[string]string{"WSGATE_ROOM_HISTORY_LIMIT": "10000", "WSGATE_DRAIN_RATE": "100"})
}

func TestReliableRoomsSurviveKillAndDrainOnRedisCluster(t *testing.T) {
	t.Parallel()
	roomFaults(t, redistest.Cluster(t).URL(), map[string]string{"WSGATE_ROOM_HISTORY_LIMIT": "10000", "WSGATE_DRAIN_RATE": "100"})
}

func TestReliableRoomsSurviveKillAndDrainOnSentinel(t *testing.T) {
	t.Parallel()
	set := redistest.Sentinel(t)
	roomFaults(t, set.URL(), map[string]string{"WSGATE_ROOM_HISTORY_LIMIT": "10000", "WSGATE_DRAIN_RATE": "100", "WSGATE_RELIABLE_REPLICAS": "1"})
}

// A room whose history was trimmed gives a member that resumes from an
// old seq exactly one gap, with the room's target, for what is gone, then
// the kept messages, in order.
func TestReliableRoomTrimmedHistoryGivesOneGap(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, srv.URL(), map[string]string{"WSGATE_ROOM_HISTORY_LIMIT": "5"})
	n := c.startNodes("n", 2, nil)
	n[0].mustCall(t, http.StatusNoContent, http.MethodPut, "/api/v1/rooms/trim/members/tu", nil)
	for i := 1; i <= 12; i++ {
		if a := n[i%2].mustPublish(t, toReliableRoom("trim", "e")); a.Seq != int64(i) {
			t.Fatalf("publish %d answered seq %d", i, a.Seq)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, w, err := client.Dial(ctx, n[1].WS(), client.DialOptions{Token: token(t, "tu", nil), RoomSince: map[string]int64{"trim": 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if w.Rooms["trim"] != 12 {
		t.Fatalf("welcome rooms %v, want trim:12", w.Rooms)
	}
	var got []string
	for len(got) < 6 {
		f, err := conn.ReadFrame()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		switch f.Type {
		case "gap":
			if f.Target == nil || f.Target.Type != "room" || f.Target.ID != "trim" {
				t.Fatalf("gap without the room's target: %+v", f)
			}
			got = append(got, fmt.Sprintf("gap %d-%d (%d)", f.From, f.To, f.Missed))
		case "message":
			got = append(got, fmt.Sprint(f.Seq))
		}
	}
	if fmt.Sprint(got) != "[gap 4-7 (4) 8 9 10 11 12]" {
		t.Fatalf("resume from 3 with 8..12 kept: %v, want one gap 4-7 then 8..12", got)
	}
}

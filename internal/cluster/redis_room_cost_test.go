package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// A reliable room publish is one round trip to Redis (seq, history, trim
// and the room's interested nodes in one script), and what Redis executes
// for it does not grow with the room's members: the script reads the
// interest hash (one field per node), never the member set. A batch of
// room appends is one round trip too.
func TestReliableRoomAppendIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	b := newRedis(t, s.URL(), func(o *cluster.RedisOptions) { o.Prefix = "roomcost" })
	hook := &roundTrips{}
	b.Client().AddHook(hook)
	ctx := ctxTimeout(t, time.Minute)
	admin := s.Client()
	opt := cluster.InboxOptions{Limit: 100, TTL: 24 * time.Hour}
	for _, room := range []string{"small", "big"} {
		if err := b.SetRoomInterest(ctx, "n1", []string{room}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := b.SetRoomInterest(ctx, "n2", []string{room}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.JoinRoom(ctx, "small", "u0", 0); err != nil {
		t.Fatal(err)
	}
	members := make([]any, 15000)
	for i := range members {
		members[i] = fmt.Sprintf("u%d", i)
	}
	if err := admin.SAdd(ctx, "{roomcost:r:big}:members", members...).Err(); err != nil {
		t.Fatal(err)
	}
	appendOne := func(room string) (trips int64, commands int64) {
		t.Helper()
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		before := hook.n.Load()
		o := b.AppendRooms(ctx, []cluster.RoomAppend{{Room: room, Payload: []byte(`{"event":"x"}`)}}, opt)[0]
		if o.Err != nil || len(o.Nodes) != 2 {
			t.Fatalf("append to %s: %+v", room, o)
		}
		trips = hook.n.Load() - before
		for _, n := range commandStats(t, admin) {
			commands += n
		}
		return trips, commands
	}
	appendOne("small") // the script loaded
	appendOne("big")
	smallTrips, smallCmds := appendOne("small")
	bigTrips, bigCmds := appendOne("big")
	t.Logf("reliable room append: 1 member %d round trips, %d commands; 15000 members %d round trips, %d commands", smallTrips, smallCmds, bigTrips, bigCmds)
	if smallTrips != 1 || bigTrips != 1 {
		t.Errorf("round trips: %d (1 member), %d (15000 members); want 1 each", smallTrips, bigTrips)
	}
	if bigCmds != smallCmds {
		t.Errorf("commands executed: %d for 15000 members, %d for 1: the cost grows with the members", bigCmds, smallCmds)
	}
	before := hook.n.Load()
	msgs := make([]cluster.RoomAppend, 50)
	for i := range msgs {
		msgs[i] = cluster.RoomAppend{Room: []string{"small", "big"}[i%2], Payload: []byte("x")}
	}
	for i, o := range b.AppendRooms(ctx, msgs, opt) {
		if o.Err != nil {
			t.Fatalf("batch message %d: %v", i, o.Err)
		}
	}
	if trips := hook.n.Load() - before; trips != 1 {
		t.Errorf("a batch of 50 room appends took %d round trips, want 1", trips)
	}
}

// A join is one round trip: the bound and the user's rooms, the routes the
// joining node needs, the room's members and its seq share one pipeline,
// also when the room has 15,000 members; concurrent joins share it too.
func TestJoinRoomIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	b := newRedis(t, s.URL(), func(o *cluster.RedisOptions) { o.Prefix = "joincost" })
	hook := &roundTrips{}
	b.Client().AddHook(hook)
	ctx := ctxTimeout(t, time.Minute)
	admin := s.Client()
	members := make([]any, 15000)
	for i := range members {
		members[i] = fmt.Sprintf("m%d", i)
	}
	if err := admin.SAdd(ctx, "{joincost:r:big}:members", members...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.AddRoutes(ctx, []cluster.Route{{User: "u1", ConnID: "c1", Node: "n1"}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JoinRoom(ctx, "warm", "u0", 0); err != nil { // the script loaded
		t.Fatal(err)
	}
	for _, bound := range []int{0, 5} {
		before := hook.n.Load()
		j, err := b.JoinRoom(ctx, "big", "u1", bound)
		if err != nil || len(j.Routes) != 1 {
			t.Fatalf("join (bound %d): %+v, %v", bound, j, err)
		}
		if trips := hook.n.Load() - before; trips != 1 {
			t.Errorf("a join with bound %d took %d round trips, want 1", bound, trips)
		}
	}
}

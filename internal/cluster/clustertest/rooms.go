package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/wsgate/wsgate/internal/cluster"
)

var roomTests = []subtest{
	{"JoinLeave", testRoomsJoinLeave},
	{"Limit", testRoomsLimit},
	{"JoinReads", testRoomsJoinReads},
	{"JoinSeqs", testRoomsJoinSeqs},
	{"Interest", testRoomsInterest},
	{"InterestExpires", testRoomsInterestExpires},
	{"RemoveNodeDropsInterest", testRoomsRemoveNode},
}

func members(t *testing.T, b cluster.Rooms, room string) []string {
	t.Helper()
	got, err := b.RoomMembers(ctxFor(t), room)
	must(t, err)
	return got
}

func userRooms(t *testing.T, b cluster.Rooms, user string) []string {
	t.Helper()
	got, err := b.UserRooms(ctxFor(t), user)
	must(t, err)
	return got
}

func roomNodes(t *testing.T, b cluster.Rooms, room string) []string {
	t.Helper()
	got, err := b.RoomNodes(ctxFor(t), room)
	must(t, err)
	return got
}

func testRoomsJoinLeave(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	checkStrings(t, "members of an unknown room", members(t, b, "lobby"))
	checkStrings(t, "rooms of an unknown user", userRooms(t, b, "alice"))
	must(t, join(b, ctx, "lobby", "alice", 0))
	must(t, join(b, ctx, "lobby", "bob", 0))
	must(t, join(b, ctx, "team-1", "alice", 0))
	must(t, join(b, ctx, "lobby", "alice", 0)) // twice: no duplicate
	checkStrings(t, "members(lobby)", members(t, b, "lobby"), "alice", "bob")
	checkStrings(t, "members(team-1)", members(t, b, "team-1"), "alice")
	checkStrings(t, "rooms(alice)", userRooms(t, b, "alice"), "lobby", "team-1")
	checkStrings(t, "rooms(bob)", userRooms(t, b, "bob"), "lobby")

	must(t, b.LeaveRoom(ctx, "lobby", "alice"))
	must(t, b.LeaveRoom(ctx, "lobby", "alice")) // twice
	must(t, b.LeaveRoom(ctx, "nowhere", "carol"))
	checkStrings(t, "members(lobby) after leave", members(t, b, "lobby"), "bob")
	checkStrings(t, "rooms(alice) after leave", userRooms(t, b, "alice"), "team-1")
	must(t, b.LeaveRoom(ctx, "lobby", "bob"))
	checkStrings(t, "members(lobby) when empty", members(t, b, "lobby"))
}

// testRoomsLimit: concurrent joins of one user never exceed the bound; a
// refused join stores nothing on either side; joining a room the user is a
// member of is never refused; a leave makes room; 0 is no limit.
func testRoomsLimit(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	const bound = 3
	var wg sync.WaitGroup
	var mu sync.Mutex
	var accepted []string
	refused := 0
	for i := range 12 {
		wg.Go(func() {
			room := fmt.Sprint("lim-", i)
			err := join(b, ctx, room, "lim", bound)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted = append(accepted, room)
			case errors.Is(err, cluster.ErrRoomLimit):
				refused++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if len(accepted) != bound || refused != 12-bound {
		t.Fatalf("%d accepted (%v), %d refused with a bound of %d", len(accepted), accepted, refused, bound)
	}
	slices.Sort(accepted)
	checkStrings(t, "rooms(lim)", userRooms(t, b, "lim"), accepted...)
	for i := range 12 {
		room := fmt.Sprint("lim-", i)
		if slices.Contains(accepted, room) {
			checkStrings(t, "members("+room+")", members(t, b, room), "lim")
		} else {
			checkStrings(t, "members of refused "+room, members(t, b, room))
		}
	}
	for _, room := range accepted {
		if err := join(b, ctx, room, "lim", bound); err != nil {
			t.Fatalf("join of %s, already a member, at the bound: %v", room, err)
		}
	}
	if err := join(b, ctx, "lim-other", "lim", bound); !errors.Is(err, cluster.ErrRoomLimit) {
		t.Fatalf("join beyond the bound: %v, want ErrRoomLimit", err)
	}
	must(t, join(b, ctx, "lim-0", "other", 1)) // another user's own count
	must(t, b.LeaveRoom(ctx, accepted[0], "lim"))
	must(t, join(b, ctx, "lim-other", "lim", bound))
	if err := join(b, ctx, accepted[0], "lim", bound); !errors.Is(err, cluster.ErrRoomLimit) {
		t.Fatalf("rejoin of a room left, at the bound: %v, want ErrRoomLimit", err)
	}
	must(t, join(b, ctx, accepted[0], "lim", 0)) // no limit
	if got := userRooms(t, b, "lim"); len(got) != bound+1 {
		t.Fatalf("rooms(lim) after a join without limit: %v", got)
	}
}

func testRoomsInterest(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	checkStrings(t, "nodes of an unknown room", roomNodes(t, b, "lobby"))
	must(t, b.SetRoomInterest(ctx, "n1", []string{"lobby", "team-1"}, longTTL))
	must(t, b.SetRoomInterest(ctx, "n2", []string{"lobby"}, longTTL))
	must(t, b.SetRoomInterest(ctx, "n2", []string{"lobby"}, longTTL)) // refresh
	must(t, b.SetRoomInterest(ctx, "n3", nil, longTTL))
	checkStrings(t, "RoomNodes(lobby)", roomNodes(t, b, "lobby"), "n1", "n2")
	checkStrings(t, "RoomNodes(team-1)", roomNodes(t, b, "team-1"), "n1")

	must(t, b.DropRoomInterest(ctx, "n1", []string{"lobby"}))
	must(t, b.DropRoomInterest(ctx, "n1", []string{"lobby", "unknown"})) // twice, and unknown
	must(t, b.DropRoomInterest(ctx, "n1", nil))
	checkStrings(t, "RoomNodes(lobby) after drop", roomNodes(t, b, "lobby"), "n2")
	checkStrings(t, "RoomNodes(team-1) after drop", roomNodes(t, b, "team-1"), "n1")
}

func testRoomsInterestExpires(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	must(t, b.SetRoomInterest(ctx, "n1", []string{"lobby"}, shortTTL))
	must(t, b.SetRoomInterest(ctx, "n2", []string{"lobby"}, longTTL))
	must(t, b.SetRoomInterest(ctx, "n3", []string{"quiet"}, shortTTL))
	eventually(t, "n1's interest in lobby expires", func() (bool, string) {
		got := roomNodes(t, b, "lobby")
		return equalStrings(got, []string{"n2"}), fmt.Sprint(got)
	})
	eventually(t, "n3's interest in quiet expires", func() (bool, string) {
		got := roomNodes(t, b, "quiet")
		return len(got) == 0, fmt.Sprint(got)
	})
	// Refreshing revives it.
	must(t, b.SetRoomInterest(ctx, "n1", []string{"lobby"}, longTTL))
	checkStrings(t, "RoomNodes(lobby) after refresh", roomNodes(t, b, "lobby"), "n1", "n2")
}

func testRoomsRemoveNode(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	must(t, b.RegisterNode(ctx, sampleNode("n1")))
	must(t, b.RegisterNode(ctx, sampleNode("n2")))
	must(t, b.SetRoomInterest(ctx, "n1", []string{"lobby", "team-1"}, longTTL))
	must(t, b.SetRoomInterest(ctx, "n2", []string{"lobby"}, longTTL))
	must(t, join(b, ctx, "lobby", "alice", 0))
	must(t, b.RemoveNode(ctx, "n1"))
	checkStrings(t, "RoomNodes(lobby)", roomNodes(t, b, "lobby"), "n2")
	checkStrings(t, "RoomNodes(team-1)", roomNodes(t, b, "team-1"))
	// Membership is by user and is not the node's to drop.
	checkStrings(t, "members(lobby)", members(t, b, "lobby"), "alice")
	// A node removed while it was never registered (crashed and expired)
	// still loses its interest.
	must(t, b.SetRoomInterest(ctx, "ghost", []string{"lobby"}, longTTL))
	must(t, b.RemoveNode(ctx, "ghost"))
	checkStrings(t, "RoomNodes(lobby) after removing ghost", roomNodes(t, b, "lobby"), "n2")
}

// join is JoinRoom for the cases that need only its error.
func join(b cluster.Backend, ctx context.Context, room, user string, bound int) error {
	_, err := b.JoinRoom(ctx, room, user, bound)
	return err
}

// testRoomsJoinReads: JoinRoom answers the user's live routes, stored
// before it, and the room's last seq, as UserRoutes and RoomSeqs read
// them; a refused join answers nothing.
func testRoomsJoinReads(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	got, err := b.JoinRoom(ctx, "jr", "ja", 0)
	must(t, err)
	if len(got.Routes) != 0 || got.RoomSeq != 0 {
		t.Fatalf("first join of a user with no route to a new room: %+v", got)
	}
	r1 := cluster.Route{User: "ja", ConnID: "c1", Node: "n1", ConnectedAt: 1}
	r2 := cluster.Route{User: "ja", ConnID: "c2", Node: "n2", ConnectedAt: 2, Device: "phone"}
	must(t, b.AddRoutes(ctx, []cluster.Route{r1, r2}, longTTL))
	must(t, b.AddRoutes(ctx, []cluster.Route{{User: "ja", ConnID: "old", Node: "n3", ConnectedAt: 3}}, shortTTL))
	must(t, b.AddRoutes(ctx, []cluster.Route{{User: "someone", ConnID: "c9", Node: "n1", ConnectedAt: 1}}, longTTL))
	for _, o := range b.AppendRooms(ctx, []cluster.RoomAppend{{Room: "jr", Payload: []byte("m1")}, {Room: "jr", Payload: []byte("m2")}}, inboxOpts) {
		must(t, o.Err)
	}
	eventually(t, "the short route expires", func() (bool, string) {
		routes, err := b.UserRoutes(ctx, "ja")
		must(t, err)
		return len(routes) == 2, fmt.Sprint(routes)
	})
	got, err = b.JoinRoom(ctx, "jr", "ja", 1) // a member already: at the bound, accepted
	must(t, err)
	checkRoutes(t, "routes answered by the join", got.Routes, r1, r2)
	if got.RoomSeq != 2 {
		t.Fatalf("room seq answered by the join: %d, want 2", got.RoomSeq)
	}
	got, err = b.JoinRoom(ctx, "jr-2", "ja", 1)
	if !errors.Is(err, cluster.ErrRoomLimit) || len(got.Routes) != 0 {
		t.Fatalf("refused join: %+v, %v", got, err)
	}
}

// testRoomsJoinSeqs: JoinSeqs answers the room's seq at the user's first
// join, kept by a repeated join, forgotten by a leave (and by a refused
// join, which stores nothing), -1 for a room the user is not in.
func testRoomsJoinSeqs(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	check := func(what string, rooms []string, want ...int64) {
		t.Helper()
		got, err := b.JoinSeqs(ctx, "js", rooms)
		must(t, err)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: join seqs %v, want %v", what, got, want)
		}
	}
	must(t, join(b, ctx, "js-a", "js", 0))
	check("a join while the room is plain", []string{"js-a", "js-none"}, 0, -1)
	appendTo := func(room string, n int) {
		for range n {
			for _, o := range b.AppendRooms(ctx, []cluster.RoomAppend{{Room: room, Payload: []byte("m")}}, inboxOpts) {
				must(t, o.Err)
			}
		}
	}
	appendTo("js-a", 2)
	appendTo("js-b", 3)
	must(t, join(b, ctx, "js-a", "js", 0))
	must(t, join(b, ctx, "js-b", "js", 0))
	check("a repeated join keeps the first", []string{"js-a", "js-b"}, 0, 3)
	must(t, b.LeaveRoom(ctx, "js-a", "js"))
	check("after a leave", []string{"js-a"}, -1)
	must(t, join(b, ctx, "js-a", "js", 0))
	check("a join after the leave", []string{"js-a"}, 2)
	if err := join(b, ctx, "js-c", "js", 2); !errors.Is(err, cluster.ErrRoomLimit) {
		t.Fatalf("join beyond the bound: %v", err)
	}
	check("a refused join", []string{"js-c"}, -1)
	if got, err := b.JoinSeqs(ctx, "js", nil); err != nil || len(got) != 0 {
		t.Fatalf("no rooms: %v, %v", got, err)
	}
}

package clustertest

import (
	"fmt"
	"testing"

	"github.com/wsgate/wsgate/internal/cluster"
)

var roomTests = []subtest{
	{"JoinLeave", testRoomsJoinLeave},
	{"Interest", testRoomsInterest},
	{"InterestExpires", testRoomsInterestExpires},
	{"RemoveNodeDropsInterest", testRoomsRemoveNode},
}

func members(t *testing.T, b cluster.Backend, room string) []string {
	t.Helper()
	got, err := b.RoomMembers(ctxFor(t), room)
	must(t, err)
	return got
}

func userRooms(t *testing.T, b cluster.Backend, user string) []string {
	t.Helper()
	got, err := b.UserRooms(ctxFor(t), user)
	must(t, err)
	return got
}

func roomNodes(t *testing.T, b cluster.Backend, room string) []string {
	t.Helper()
	got, err := b.RoomNodes(ctxFor(t), room)
	must(t, err)
	return got
}

func testRoomsJoinLeave(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	checkStrings(t, "members of an unknown room", members(t, b, "lobby"))
	checkStrings(t, "rooms of an unknown user", userRooms(t, b, "alice"))
	must(t, b.JoinRoom(ctx, "lobby", "alice"))
	must(t, b.JoinRoom(ctx, "lobby", "bob"))
	must(t, b.JoinRoom(ctx, "team-1", "alice"))
	must(t, b.JoinRoom(ctx, "lobby", "alice")) // twice: no duplicate
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
	must(t, b.JoinRoom(ctx, "lobby", "alice"))
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

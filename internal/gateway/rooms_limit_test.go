package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

// fillRooms makes user a member of rooms r0 .. r(count-1) in the backend
// directly (no bound): the state of a user who joined them over time.
func fillRooms(t *testing.T, n *testNode, user string, count int) {
	t.Helper()
	for i := range count {
		if _, err := n.backend.JoinRoom(context.Background(), fmt.Sprint("r", i), user, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// anyRoom is the claim that lets a token join every room.
var anyRoom = map[string]any{"rooms": []string{"*"}}

func roomCount(t *testing.T, n *testNode, user string) int {
	t.Helper()
	rooms, err := n.backend.UserRooms(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	return len(rooms)
}

// WSGATE_MAX_ROOMS_PER_USER (default 1000) over the server API: the
// 1000th room is accepted, the 1001st refused with 409 too_many_rooms
// and stored nowhere, a join of a room already held is accepted.
func TestAPIJoinBeyondMaxRooms(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n *testNode, tr apiTransport) {
		fillRooms(t, n, "many", 999)
		if e := tr.join("k", "r999", "many"); e != nil {
			t.Fatalf("join of the 1000th room: %+v", e)
		}
		wantErr(t, "join of a 1001st room", tr.join("k", "extra", "many"), 409, "too_many_rooms", "1000 rooms")
		if e := tr.join("k", "r5", "many"); e != nil {
			t.Fatalf("join of a room already held, at the limit: %+v", e)
		}
		if m, e := tr.members("k", "extra"); e != nil || len(m) != 0 {
			t.Fatalf("members of the refused room: %v %+v", m, e)
		}
		if got := roomCount(t, n, "many"); got != 1000 {
			t.Fatalf("rooms of the user: %d, want 1000", got)
		}
		if e := tr.join("k", "extra", "other"); e != nil {
			t.Fatalf("another user's join: %+v", e)
		}
	})
}

// A join frame beyond the limit gets reply ok:false forbidden; the
// connection keeps serving: a join of a room held is ok and a publish
// to it arrives.
func TestJoinFrameBeyondMaxRooms(t *testing.T) {
	n := startNode(t, nil)
	fillRooms(t, n, "ivy", 1000)
	c := n.connectTok(t, "ivy", anyRoom)
	c.send(map[string]any{"type": "join", "id": "j1", "room": "extra"})
	r := c.expect("reply")
	e, _ := r["error"].(map[string]any)
	if r["id"] != "j1" || r["ok"] != false || e["code"] != protocol.ErrForbidden || !strings.Contains(fmt.Sprint(e["message"]), "WSGATE_MAX_ROOMS_PER_USER") {
		t.Fatalf("join beyond the limit: %v, want ok:false %s naming the limit", r, protocol.ErrForbidden)
	}
	if got := roomCount(t, n, "ivy"); got != 1000 {
		t.Fatalf("rooms after the refused join: %d, want 1000", got)
	}
	c.send(map[string]any{"type": "join", "id": "j2", "room": "r7"})
	if r := c.expect("reply"); r["id"] != "j2" || r["ok"] != true {
		t.Fatalf("join of a room held, at the limit: %v, want ok", r)
	}
	pub(t, n, api.PublishRequest{Target: roomTarget("r7"), Event: "after", Data: raw("1")})
	if m := c.expect("message"); m["event"] != "after" {
		t.Fatalf("message after the refusal: %v", m)
	}
}

// A smaller WSGATE_MAX_ROOMS_PER_USER applies the same way.
func TestJoinFrameMaxRoomsSetting(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.MaxRoomsPerUser = 2 })
	c := n.connectTok(t, "joe", anyRoom)
	for i, want := range []bool{true, true, false} {
		c.send(map[string]any{"type": "join", "id": fmt.Sprint("j", i), "room": fmt.Sprint("s", i)})
		if r := c.expect("reply"); r["ok"] != want {
			t.Fatalf("join %d with a limit of 2: %v, want ok %v", i+1, r, want)
		}
	}
}

package gateway

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/config"
)

// roomsFile writes a rooms file and returns its path.
func roomsFile(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rooms.yml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const meetRooms = "rooms:\n  - pattern: \"meet:*\"\n    presence: true\n    join_leave: true\n"

func withRooms(body string) func(*testing.T) func(*config.Gateway) {
	return func(t *testing.T) func(*config.Gateway) {
		p := roomsFile(t, body)
		return func(c *config.Gateway) { c.RoomsFile = p }
	}
}

func joinRoom(t testing.TB, c *wsClient, id, room string) {
	t.Helper()
	c.send(map[string]any{"type": "join", "id": id, "room": room})
	for {
		f := c.next(5 * time.Second)
		if f["type"] == "reply" && f["id"] == id {
			if f["ok"] != true {
				t.Fatalf("join %s refused: %v", room, f)
			}
			return
		}
	}
}

// member connects user with a token allowing rooms meet:*.
func (n *testNode) member(t testing.TB, user string) *wsClient {
	t.Helper()
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, user, map[string]any{"rooms": []string{"meet:*"}})}}, true)
	if w := c.next(5 * time.Second); w["type"] != "welcome" {
		t.Fatalf("first frame %v", w)
	}
	return c
}

func TestRoomPresenceJoinedLeft(t *testing.T) {
	n := startNode(t, withRooms(meetRooms)(t))
	a := n.member(t, "a")
	b := n.member(t, "b")
	joinRoom(t, a, "1", "meet:x")
	joinRoom(t, b, "2", "meet:x")
	f := a.expect("joined")
	if f["user"] != "b" || f["room"] != "meet:x" {
		t.Fatalf("joined %v", f)
	}
}

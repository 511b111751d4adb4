package e2e

// Issue "Many nodes act as one": three gateway processes on each Redis
// deployment behave as one gateway for users, rooms, broadcast, presence,
// the disconnect API and the single device policy.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// redisDeployments start a Redis of each kind and return its URL for
// WSGATE_REDIS_URL.
var redisDeployments = []struct {
	name  string
	start func(t *testing.T) string
}{
	{"standalone", func(t *testing.T) string { return redistest.Standalone(t, redistest.Options{}).URL() }},
	{"cluster", func(t *testing.T) string { return redistest.Cluster(t).URL() }},
	{"sentinel", func(t *testing.T) string { return redistest.Sentinel(t).URL() }},
}

func TestManyNodesActAsOne(t *testing.T) {
	t.Parallel()
	for _, dep := range redisDeployments {
		t.Run(dep.name, func(t *testing.T) {
			t.Parallel()
			url := dep.start(t)
			c := newCluster(t, url, nil)
			n := c.startNodes("n", 3, nil)
			t.Run("users", func(t *testing.T) { usersAcrossNodes(t, n) })
			t.Run("rooms", func(t *testing.T) { roomsAcrossNodes(t, n) })
			t.Run("broadcast", func(t *testing.T) { broadcastAcrossNodes(t, n) })
			t.Run("presence and disconnect", func(t *testing.T) { presenceAndDisconnect(t, n) })
			t.Run("single device", func(t *testing.T) { singleDevice(t, url) })
		})
	}
}

// usersAcrossNodes: a user message published through any node's API
// reaches the user on whichever node it is connected; reliable ones get
// the user's next seq whatever node answers.
func usersAcrossNodes(t *testing.T, n []*gateway) {
	probes := []*probe{dial(t, n[0], "alice", nil), dial(t, n[1], "bob", nil), dial(t, n[2], "carol", nil)}
	for _, via := range n {
		for _, p := range probes {
			ev := fmt.Sprintf("to-%s-via-%s", p.user, via.ID)
			a := via.mustPublish(t, toUser(p.user, ev))
			if a.Online == nil || !*a.Online {
				t.Errorf("publish to %s (on %s) via %s: online = %v, want true", p.user, p.node, via.ID, a.Online)
			}
			p.expect(ev)
		}
	}
	for i, via := range n {
		b := toUser("alice", "reliable")
		b.Reliable = true
		b.Data = map[string]int{"i": i}
		a := via.mustPublish(t, b)
		if a.Seq != int64(i+1) {
			t.Errorf("reliable publish %d via %s: seq %d, want %d", i, via.ID, a.Seq, i+1)
		}
		if f := probes[0].expect("reliable"); f.Seq != a.Seq {
			t.Errorf("alice got seq %d, the API answered %d", f.Seq, a.Seq)
		}
	}
	off := n[1].mustPublish(t, toUser("nobody-here", "x"))
	if off.Online == nil || *off.Online {
		t.Errorf("publish to an offline user: online = %v, want false", off.Online)
	}
}

// roomsAcrossNodes: membership set through the API on one node, or by a
// client's join on another, reaches every connection of the member on
// every node; non-members get nothing.
func roomsAcrossNodes(t *testing.T, n []*gateway) {
	alice := dial(t, n[0], "ra-alice", nil)
	bob := dial(t, n[1], "ra-bob", nil)
	teamClaims := map[string]any{"rooms": []string{"team-*"}}
	carol := dial(t, n[2], "ra-carol", teamClaims)
	carol2 := dial(t, n[0], "ra-carol", teamClaims) // before the join: gets the room through the bus

	// Membership by the API, each call through another node than the member's.
	n[1].mustCall(t, http.StatusNoContent, http.MethodPut, "/api/v1/rooms/lobby/members/ra-alice", nil)
	n[2].mustCall(t, http.StatusNoContent, http.MethodPut, "/api/v1/rooms/lobby/members/ra-bob", nil)
	var members struct {
		Members []string `json:"members"`
	}
	if err := json.Unmarshal(n[0].mustCall(t, http.StatusOK, http.MethodGet, "/api/v1/rooms/lobby/members", nil), &members); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(members.Members, []string{"ra-alice", "ra-bob"}) {
		t.Errorf("lobby members = %v, want [ra-alice ra-bob]", members.Members)
	}
	for _, via := range n {
		ev := "lobby-via-" + via.ID
		via.mustPublish(t, toRoom("lobby", ev))
		alice.expect(ev)
		bob.expect(ev)
		// carol is no member: the next message of each of her connections
		// is a user message published after the room message through the
		// same node (one publisher's messages keep their order).
		bar := "barrier-" + ev
		via.mustPublish(t, toUser("ra-carol", bar))
		carol.expect(bar)
		carol2.expect(bar)
	}

	// Membership by the client's join, allowed by the token's rooms claim.
	if r := carol.request(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "team-red"}); !r.OK {
		t.Fatalf("join team-red refused: %+v", r.Error)
	}
	if r := carol.request(protocol.ClientFrame{Type: protocol.TypeJoin, Room: "lobby"}); r.OK || r.Error == nil || r.Error.Code != protocol.ErrForbidden {
		t.Errorf("join lobby (not in the rooms claim): ok=%v error=%+v, want forbidden", r.OK, r.Error)
	}
	carol3 := dial(t, n[1], "ra-carol", teamClaims) // after the join: loads the room at connect
	for _, via := range n {
		ev := "team-via-" + via.ID
		via.mustPublish(t, toRoom("team-red", ev))
		carol.expect(ev)
		carol2.expect(ev)
		carol3.expect(ev)
		bar := "barrier-" + ev
		via.mustPublish(t, toUser("ra-alice", bar))
		alice.expect(bar)
	}

	// Leaving (client) and removal (API) stop the messages everywhere.
	if r := carol2.request(protocol.ClientFrame{Type: protocol.TypeLeave, Room: "team-red"}); !r.OK {
		t.Fatalf("leave team-red refused: %+v", r.Error)
	}
	n[2].mustCall(t, http.StatusNoContent, http.MethodDelete, "/api/v1/rooms/lobby/members/ra-bob", nil)
	for _, via := range n {
		via.mustPublish(t, toRoom("team-red", "after-leave"))
		via.mustPublish(t, toRoom("lobby", "lobby-after-remove"))
		alice.expect("lobby-after-remove")
		bar := "barrier-after-leave-" + via.ID
		via.mustPublish(t, toUser("ra-carol", bar))
		via.mustPublish(t, toUser("ra-bob", bar))
		carol.expect(bar)
		carol2.expect(bar)
		carol3.expect(bar)
		bob.expect(bar)
	}
}

// broadcastAcrossNodes: a broadcast through any node reaches every
// connection on every node, once.
func broadcastAcrossNodes(t *testing.T, n []*gateway) {
	var probes []*probe
	for i, g := range n {
		probes = append(probes, dial(t, g, fmt.Sprintf("bc-%d", i), nil), dial(t, g, "bc-shared", nil))
	}
	for _, via := range n {
		ev := "all-via-" + via.ID
		via.mustPublish(t, toAll(ev))
		for _, p := range probes {
			p.expect(ev)
		}
	}
	// Exactly once: a user message through the last node is next.
	n[2].mustPublish(t, toUser("bc-shared", "after-broadcasts"))
	for _, p := range probes {
		if p.user == "bc-shared" {
			p.expect("after-broadcasts")
		}
	}
}

// presenceAndDisconnect: presence through any node lists the user's
// connections on every node; the disconnect API closes all of them with
// 4003, on whichever node they are.
func presenceAndDisconnect(t *testing.T, n []*gateway) {
	var dave []*probe
	want := map[string]string{} // conn id -> node
	for _, g := range n {
		p := dial(t, g, "dave", nil)
		dave = append(dave, p)
		want[p.w.ConnID] = g.ID
	}
	for _, via := range n {
		pr, err := via.presence("dave")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, c := range pr.Connections {
			got[c.ConnID] = c.Node
			if c.ConnectedAt <= 0 || c.ConnectedAt > time.Now().UnixMilli() {
				t.Errorf("presence via %s: connected_at %d is not a past Unix ms", via.ID, c.ConnectedAt)
			}
		}
		if !pr.Online || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("presence of dave via %s: online=%v %v, want %v", via.ID, pr.Online, got, want)
		}
	}

	b := n[0].mustCall(t, http.StatusOK, http.MethodPost, "/api/v1/users/dave/disconnect", map[string]string{"reason": "e2e"})
	var ans struct {
		Disconnected int `json:"disconnected"`
	}
	if err := json.Unmarshal(b, &ans); err != nil || ans.Disconnected != 3 {
		t.Errorf("disconnect answer %s (%v), want disconnected 3", b, err)
	}
	for _, p := range dave {
		if code := p.waitClosed(5 * time.Second); code != protocol.CloseDisconnected {
			t.Errorf("dave on %s closed with %d, want 4003", p.node, code)
		}
	}
	eventually(t, 5*time.Second, "dave offline after the disconnect", func() (bool, string) {
		pr, err := n[2].presence("dave")
		return err == nil && !pr.Online && len(pr.Connections) == 0, fmt.Sprint(pr, err)
	})
	b = n[1].mustCall(t, http.StatusOK, http.MethodPost, "/api/v1/users/dave/disconnect", nil)
	if err := json.Unmarshal(b, &ans); err != nil || ans.Disconnected != 0 {
		t.Errorf("second disconnect answer %s (%v), want disconnected 0", b, err)
	}
}

// singleDevice: with WSGATE_DEVICE_POLICY=single a new connection closes
// the user's older one on another node (and on its own) with 4009.
func singleDevice(t *testing.T, redisURL string) {
	c := newCluster(t, redisURL, map[string]string{"WSGATE_DEVICE_POLICY": "single"})
	s := c.startNodes("s", 2, nil)
	old := dial(t, s[0], "erin", nil)
	newer := dial(t, s[1], "erin", nil)
	if code := old.waitClosed(5 * time.Second); code != protocol.CloseReplaced {
		t.Errorf("older connection on %s closed with %d, want 4009", s[0].ID, code)
	}
	s[0].mustPublish(t, toUser("erin", "to-newer"))
	newer.expect("to-newer")
	eventually(t, 5*time.Second, "presence lists only the newer connection", func() (bool, string) {
		pr, err := s[0].presence("erin")
		return err == nil && len(pr.Connections) == 1 && pr.Connections[0].ConnID == newer.w.ConnID, fmt.Sprint(pr, err)
	})
	newest := dial(t, s[1], "erin", nil)
	if code := newer.waitClosed(5 * time.Second); code != protocol.CloseReplaced {
		t.Errorf("connection replaced on its own node closed with %d, want 4009", code)
	}
	s[0].mustPublish(t, toUser("erin", "to-newest"))
	newest.expect("to-newest")
}

// TestSingleDeviceConcurrentLogins: with WSGATE_DEVICE_POLICY=single, two
// logins of one user at the same moment on two nodes (while an older
// connection exists) must end with exactly one connection: the newer
// replaces the older. Rounds run 25 users at a time.
func TestSingleDeviceConcurrentLogins(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, srv.URL(), map[string]string{"WSGATE_DEVICE_POLICY": "single"})
	s := c.startNodes("s", 2, nil)
	var mu sync.Mutex
	outcome := map[int]int{} // connections left open -> rounds
	var bad []string
	for batch := range 8 {
		var wg sync.WaitGroup
		for i := range 25 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				user := fmt.Sprintf("twice-%d-%d", batch, i)
				old, err := dialErr(t, s[0], user, nil, nil)
				if err != nil {
					t.Error(err)
					return
				}
				// A login may be refused by the other one's kick before its
				// welcome: that is a close with 4009 too.
				var a, b *probe
				var errA, errB error
				var both sync.WaitGroup
				both.Add(2)
				go func() { defer both.Done(); a, errA = dialErr(t, s[0], user, nil, nil) }()
				go func() { defer both.Done(); b, errB = dialErr(t, s[1], user, nil, nil) }()
				both.Wait()
				for _, err := range []error{errA, errB} {
					var ce *client.CloseError
					if err != nil && !(errors.As(err, &ce) && ce.Code == protocol.CloseReplaced) {
						t.Error(err)
						return
					}
				}
				select {
				case <-old.done:
				case <-time.After(5 * time.Second):
					t.Errorf("%s: the older connection was not replaced", user)
				}
				isOpen := func(p *probe) bool { return p != nil && !p.isClosed() }
				// A kick travels in milliseconds: what is open after a
				// second stays open.
				open := 0
				deadline := time.Now().Add(time.Second)
				for {
					open = 0
					for _, p := range []*probe{a, b} {
						if isOpen(p) {
							open++
						}
					}
					if open == 0 || time.Now().After(deadline) {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				mu.Lock()
				outcome[open]++
				if open != 1 {
					bad = append(bad, fmt.Sprintf("%s: %d open", user, open))
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	t.Logf("connections left open after two concurrent logins -> rounds: %v", outcome)
	if len(bad) > 0 {
		t.Errorf("%d of 200 rounds did not end with exactly one connection, e.g. %v", len(bad), head(bad, 5))
	}
}

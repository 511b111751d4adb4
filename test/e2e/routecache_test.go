package e2e

// LESSONS "Cluster": a local route cache with a long TTL delivered
// messages to a node the user had left. A user who moves from one node to
// another is reached on the new node by the very next publish, through a
// third node that had just delivered to the old one.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

func TestRouteFollowsMovingUser(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, srv.URL(), nil)
	n := c.startNodes("n", 3, nil)
	via := n[1]
	cur := dial(t, n[0], "mover", nil)
	// Warm whatever n2 may cache about the user's place.
	for i := range 3 {
		ev := fmt.Sprintf("warm-%d", i)
		via.mustPublish(t, toUser("mover", ev))
		cur.expect(ev)
	}
	var seq int64
	for round := range 10 {
		to := n[0]
		if cur.node == n[0].ID {
			to = n[2]
		}
		overlap := round%2 == 1
		var next *probe
		if overlap {
			// The new connection opens before the old one closes: the old
			// one's late cleanup must not remove the new route.
			next = dial(t, to, "mover", nil)
			cur.Close()
		} else {
			cur.Close()
			next = dial(t, to, "mover", nil)
		}
		ev := fmt.Sprintf("moved-%d", round)
		p := toUser("mover", ev)
		p.Reliable = round%3 == 2
		a := via.mustPublish(t, p)
		if a.Online == nil || !*a.Online {
			t.Errorf("round %d: publish after the move says online=%v", round, a.Online)
		}
		f := next.expect(ev)
		if p.Reliable {
			seq++
			if f.Seq != a.Seq || a.Seq != seq {
				t.Errorf("round %d: reliable seq %d, answered %d, want %d", round, f.Seq, a.Seq, seq)
			}
			// Acknowledged, so that the next connection does not get it again.
			if r := next.request(protocol.ClientFrame{Type: protocol.TypeAck, Seq: f.Seq}); !r.OK {
				t.Fatalf("ack refused: %+v", r.Error)
			}
		}
		// And the publish after that, once the old connection's cleanup ran.
		ev2 := ev + "-again"
		via.mustPublish(t, toUser("mover", ev2))
		next.expect(ev2)
		cur = next
	}
}

// TestRoomInterestWithdrawnAfterJoinThenClose: LESSONS "a close event
// that arrives late must never delete state that belongs to a newer
// connection", and its mirror: state written late must not outlive the
// connection. A user online on n2 joins a room through n1's API (n1
// declares n2's interest in the room, and n2 declares it again when the
// membership envelope arrives, in a goroutine) while its connection
// closes (n2 withdraws the interest when the room's last local member
// leaves). Whatever the order, once no member is online on n2, n2 must not
// stay interested: every publish to the room would wake it for nothing
// until the entry expires (WSGATE_ROUTE_TTL, 90 s with the defaults).
func TestRoomInterestWithdrawnAfterJoinThenClose(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, srv.URL(), map[string]string{"WSGATE_ROUTE_TTL": "30s"})
	n := c.startNodes("n", 2, nil)
	const rounds, users = 3, 200
	var stale []string
	for round := range rounds {
		name := func(u int) string { return fmt.Sprintf("leaver-%d-%d", round, u) }
		var wg sync.WaitGroup
		for u := range users {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := dialErr(t, n[1], name(u), nil, nil)
				if err != nil {
					t.Error(err)
					return
				}
				// The join and the close at the same moment.
				joined := make(chan struct{})
				go func() {
					defer close(joined)
					if st, b, err := n[0].call(http.MethodPut, "/api/v1/rooms/room-of-"+name(u)+"/members/"+name(u), nil); err != nil || st != http.StatusNoContent {
						t.Errorf("join: %d %s %v", st, b, err)
					}
				}()
				p.Close()
				<-joined
			}()
		}
		wg.Wait()
		// The closes have been handled once presence lists nobody; the
		// interest withdrawals follow within moments.
		eventually(t, 10*time.Second, "every leaver offline", func() (bool, string) {
			for u := range users {
				pr, err := n[0].presence(name(u))
				if err != nil || pr.Online {
					return false, fmt.Sprint(name(u), pr, err)
				}
			}
			return true, ""
		})
		var left []string
		deadline := time.Now().Add(2 * time.Second)
		for {
			left = left[:0]
			for u := range users {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				v, err := srv.Client().HGet(ctx, "{"+c.prefix+":r:room-of-"+name(u)+"}:nodes", "n2").Result()
				cancel()
				if err == nil {
					left = append(left, fmt.Sprintf("room-of-%s (expires at %s)", name(u), v))
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		stale = append(stale, left...)
	}
	if len(stale) > 0 {
		t.Errorf("n2 is still interested in %d of %d rooms whose only member closed 2 s ago: %v", len(stale), rounds*users, head(stale, 5))
	}
}

package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// keyTrips counts the round trips to Redis that touch a key containing
// one of its markers (so a heartbeat or a sweep in the same window does
// not count).
type keyTrips struct {
	markers []string
	n       atomic.Int64
}

func (h *keyTrips) touches(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		for _, a := range c.Args() {
			s, _ := a.(string)
			for _, m := range h.markers {
				if strings.Contains(s, m) {
					return true
				}
			}
		}
	}
	return false
}

func (h *keyTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *keyTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.touches(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *keyTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.touches(cmds...) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func redisNode(t testing.TB, prefix string) (*testNode, *cluster.Redis) {
	t.Helper()
	srv := redistest.Standalone(t, redistest.Options{})
	b, err := cluster.NewRedis(context.Background(), cluster.RedisOptions{URL: srv.URL(), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return startNodeWith(t, b, nil), b
}

// A join frame to a room that already has a member on the node costs one
// round trip to Redis from the frame to its reply: the membership, the
// user's routes and the room's seq are read in one step, and the node's
// interest, declared by the first member, is not written again. The first
// member's join adds the interest and a seq read after it.
func TestJoinFrameIsOneRoundTrip(t *testing.T) {
	const firstJoinTrips = 5
	t.Parallel()
	n, b := redisNode(t, "jointrips")
	hook := &keyTrips{markers: []string{":r:lobby}", ":u:"}}
	b.Client().AddHook(hook)
	join := func(c *wsClient, id string) int64 {
		before := hook.n.Load()
		c.send(map[string]any{"type": "join", "id": id, "room": "lobby"})
		if r := c.expect("reply"); r["ok"] != true {
			t.Fatalf("join: %v", r)
		}
		return hook.n.Load() - before
	}
	first := n.connectTok(t, "u-first", anyRoom)
	// The first local member's join also declares the node's interest
	// and reads the seq after it: 5 round trips measured, the bound.
	if trips := join(first, "j0"); trips > firstJoinTrips {
		t.Errorf("join of the room's first local member: %d round trips to Redis, want at most %d", trips, firstJoinTrips)
	}
	for i := range 3 {
		c := n.connectTok(t, fmt.Sprint("u-", i), anyRoom)
		if trips := join(c, fmt.Sprint("j", i+1)); trips != 1 {
			t.Errorf("join of member %d: %d round trips to Redis, want 1", i+2, trips)
		}
	}
}

// stuckInterest holds SetRoomInterest of one room until released.
type stuckInterest struct {
	cluster.Backend
	room    string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *stuckInterest) SetRoomInterest(ctx context.Context, node string, rooms []string, ttl time.Duration) error {
	for _, r := range rooms {
		if r == s.room {
			s.once.Do(func() { close(s.entered) })
			<-s.release
		}
	}
	return s.Backend.SetRoomInterest(ctx, node, rooms, ttl)
}

// A room interest write that hangs (Redis slow for that key's shard) holds
// up joins of that room only: the first join of another room completes.
func TestInterestWriteOfOneRoomHoldsNoOther(t *testing.T) {
	t.Parallel()
	b := &stuckInterest{Backend: cluster.NewMemory(), room: "stuck", entered: make(chan struct{}), release: make(chan struct{})}
	n := startNodeWith(t, b, nil)
	a := n.connectTok(t, "a", anyRoom)
	a.send(map[string]any{"type": "join", "id": "ja", "room": "stuck"})
	select {
	case <-b.entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("the join of room stuck never wrote its interest; frames: %v", a.next(time.Second))
	}
	c := n.connectTok(t, "c", anyRoom)
	c.send(map[string]any{"type": "join", "id": "jc", "room": "free"})
	if r := c.expect("reply"); r["ok"] != true || r["id"] != "jc" {
		t.Fatalf("join of another room while one room's interest write hangs: %v", r)
	}
	close(b.release)
	if r := a.expect("reply"); r["ok"] != true {
		t.Fatalf("join of the room once released: %v", r)
	}
}

// Connections whose tokens grant alike share one connMeta; grants that
// differ (also where a naive joining of the patterns would make them
// look alike) never do, and each connection is judged by its own.
func TestGrantsSharedOnlyWhenEqual(t *testing.T) {
	n := startNode(t, nil)
	open := func(user string, rooms []string) *conn {
		n.connectTok(t, user, map[string]any{"rooms": rooms})
		var got *conn
		eventually(t, 5*time.Second, "connection of "+user, func() bool {
			if cs := n.hub.userConns(user); len(cs) == 1 {
				got = cs[0]
				return true
			}
			return false
		})
		return got
	}
	a1 := open("g1", []string{"a", "b"})
	a2 := open("g2", []string{"a", "b"})
	b := open("g3", []string{"a b"})
	c := open("g4", []string{"a\x00b"})
	if a1.meta != a2.meta {
		t.Errorf("equal grants: two connMeta")
	}
	if b.meta == a1.meta || c.meta == a1.meta || b.meta == c.meta {
		t.Errorf("different grants share a connMeta")
	}
	join := func(user string, rooms []string, room string) bool {
		cl := n.connectTok(t, user+"-j", map[string]any{"rooms": rooms})
		cl.send(map[string]any{"type": "join", "id": "j", "room": room})
		return cl.expect("reply")["ok"] == true
	}
	if join("g5", []string{"a b"}, "a") {
		t.Errorf(`rooms ["a b"] allowed a join of room a`)
	}
	if !join("g6", []string{"a", "b"}, "b") {
		t.Errorf(`rooms ["a","b"] refused a join of room b`)
	}
}

// User presence lists each connection's token info (contract 3, 22), on
// the embedded backend and on Redis; a connection without info has none.
func TestPresenceShowsTheTokensInfo(t *testing.T) {
	rn, _ := redisNode(t, "presinfo")
	for name, n := range map[string]*testNode{"memory": startNode(t, nil), "redis": rn} {
		t.Run(name, func(t *testing.T) {
			n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "ivy", map[string]any{"info": map[string]any{"name": "Ivy", "n": 1}})}}, true).expect("welcome")
			n.connect(t, "ivy", "")
			p, err := n.Presence(context.Background(), "ivy")
			if err != nil || len(p) != 2 {
				t.Fatalf("presence %+v, %v: want two connections", p, err)
			}
			var infos []string
			for _, c := range p {
				infos = append(infos, string(c.Info))
			}
			slices.Sort(infos)
			if fmt.Sprint(infos) != `[ {"n":1,"name":"Ivy"}]` && fmt.Sprint(infos) != `[ {"name":"Ivy","n":1}]` {
				t.Fatalf("infos in presence %q, want none and the token's", infos)
			}
		})
	}
}

package fleet

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// liveness is a Liveness over mem for node "self" whose background reads
// the test can wait for, and the routes it asked to remove.
type liveness struct {
	*Liveness
	wg      sync.WaitGroup
	mu      sync.Mutex
	removed []string // conn ids
}

func newLiveness(t *testing.T, mem *cluster.Memory, interval time.Duration) *liveness {
	l := &liveness{}
	l.Liveness = NewLiveness(mem, LivenessOptions{
		Self: "self", Interval: interval, RouteTTL: 10 * interval,
		Remove: func(r cluster.Route) {
			l.mu.Lock()
			l.removed = append(l.removed, r.ConnID)
			l.mu.Unlock()
		},
		Go: func(f func()) bool {
			l.wg.Go(f)
			return true
		},
		Ctx: t.Context(),
	})
	t.Cleanup(l.wg.Wait)
	return l
}

func (l *liveness) removedConns() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(slices.Values(l.removed))
}

func conns(routes []cluster.Route) []string {
	var out []string
	for _, r := range routes {
		out = append(out, r.ConnID)
	}
	slices.Sort(out)
	return out
}

// Routes of a dead node stop counting (heartbeat older than StaleAfter,
// or no record in a node list read after the route was made); those of a
// node gone for good (older than GoneAfter, or no record) are removed;
// a node only late keeps its routes; this node's own routes always
// count. Until a node list has been read nothing is judged dead: the
// first suspect starts a read, and counts meanwhile.
func TestLivenessLeavesOutDeadNodes(t *testing.T) {
	const interval = time.Second
	mem := cluster.NewMemory()
	ctx := context.Background()
	now := time.Now()
	old := now.Add(-time.Hour).UnixMilli()
	for _, n := range []cluster.NodeInfo{
		{ID: "dead", Heartbeat: now.Add(-2 * GoneAfter(interval, 10*interval)).UnixMilli()},
		{ID: "late", Heartbeat: now.Add(-5 * interval).UnixMilli()},
		{ID: "alive"},
	} {
		n.Status = cluster.StatusActive
		if err := mem.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := mem.AddRoutes(ctx, []cluster.Route{
		{User: "u", ConnID: "on-dead", Node: "dead", ConnectedAt: old},
		{User: "u", ConnID: "on-gone", Node: "gone", ConnectedAt: old}, // no record at all
		{User: "u", ConnID: "on-late", Node: "late", ConnectedAt: old},
		{User: "u", ConnID: "on-alive", Node: "alive", ConnectedAt: old},
		{User: "u", ConnID: "on-self", Node: "self", ConnectedAt: old}, // no record either
	}, time.Hour); err != nil {
		t.Fatal(err)
	}
	l := newLiveness(t, mem, interval)

	// No list read yet: everything counts, and a read starts.
	routes, err := l.UserRoutes(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if got := conns(routes); len(got) != 5 {
		t.Fatalf("before any node list: %v, want all 5", got)
	}
	l.wg.Wait() // the read the suspects started

	routes, _ = l.UserRoutes(ctx, "u")
	if got, want := conns(routes), []string{"on-alive", "on-self"}; !slices.Equal(got, want) {
		t.Fatalf("live routes %v, want %v", got, want)
	}
	if got, want := l.removedConns(), []string{"on-dead", "on-gone"}; !slices.Equal(got, want) {
		t.Fatalf("removed %v, want %v (the late node's route stays)", got, want)
	}
	all, _ := l.AllUserRoutes(ctx, "u")
	if len(all) != 5 {
		t.Fatalf("AllUserRoutes: %d routes, want the 5 unfiltered", len(all))
	}
	both, _ := l.UsersRoutes(ctx, []string{"u", "nobody"})
	if got := conns(both[0]); len(got) != 2 || len(both[1]) != 0 {
		t.Fatalf("UsersRoutes: %v", both)
	}

	// The connection limit does not count the routes of the nodes the
	// list shows dead (dead, late): with a limit of 4, the alive and self
	// routes and the one on "gone" (its removal is queued; this test's
	// Remove only records it) leave room for one more.
	lim := cluster.ConnLimit{Max: 4}
	if _, err := l.Connect(ctx, cluster.Route{User: "u", ConnID: "new", Node: "self", ConnectedAt: time.Now().UnixMilli()}, time.Hour, 0, cluster.InboxOptions{}, lim); err != nil {
		t.Fatalf("connect under the limit (dead nodes' routes counted?): %v", err)
	}
	if _, err := l.Connect(ctx, cluster.Route{User: "u", ConnID: "new2", Node: "self", ConnectedAt: time.Now().UnixMilli()}, time.Hour, 0, cluster.InboxOptions{}, lim); !errors.Is(err, cluster.ErrConnLimit) {
		t.Fatalf("connect over the limit: %v, want ErrConnLimit", err)
	}
}

// A verdict of "dead" from a node list older than one interval is not
// trusted: the route counts this time and the list is read again.
func TestLivenessDoesNotTrustAnOldList(t *testing.T) {
	const interval = 200 * time.Millisecond
	mem := cluster.NewMemory()
	ctx := context.Background()
	if err := mem.RegisterNode(ctx, cluster.NodeInfo{ID: "stopped", Status: cluster.StatusActive, Heartbeat: time.Now().Add(-5 * interval).UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if err := mem.AddRoutes(ctx, []cluster.Route{{User: "u", ConnID: "c", Node: "stopped", ConnectedAt: time.Now().UnixMilli()}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	l := newLiveness(t, mem, interval)
	if _, err := l.Nodes(ctx); err != nil {
		t.Fatal(err)
	}
	if routes, _ := l.UserRoutes(ctx, "u"); len(routes) != 0 {
		t.Fatalf("fresh list: the stopped node's route counts")
	}
	// The node comes back; the list read above says it is dead, but that
	// list is older than an interval by now.
	if err := mem.RegisterNode(ctx, cluster.NodeInfo{ID: "stopped", Status: cluster.StatusActive}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(interval) // the clock, not another goroutine, is what the rule waits for
	if routes, _ := l.UserRoutes(ctx, "u"); len(routes) != 1 {
		t.Fatalf("old list: the route does not count")
	}
	l.wg.Wait()
	if routes, _ := l.UserRoutes(ctx, "u"); len(routes) != 1 {
		t.Fatalf("after the new read the node is alive, its route must count")
	}
}

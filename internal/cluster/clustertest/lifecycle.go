package clustertest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

var lifecycleTests = []subtest{
	{"PresenceVersions", testPresenceVersions},
	{"PresenceRace", testPresenceRace},
	{"EndClaimedOnce", testEndClaimedOnce},
	{"DueClaimedOnce", testDueClaimedOnce},
}

func lifecycle(t *testing.T, b cluster.Backend) cluster.Lifecycle {
	t.Helper()
	l, ok := b.(cluster.Lifecycle)
	if !ok {
		t.Fatalf("%T does not implement cluster.Lifecycle", b)
	}
	return l
}

func testPresenceVersions(t *testing.T, b cluster.Backend) {
	l, ctx := lifecycle(t, b), ctxFor(t)
	a := cluster.Route{User: "u", ConnID: "a", Node: "n1", ConnectedAt: 1}
	c := cluster.Route{User: "u", ConnID: "c", Node: "n2", ConnectedAt: 2}
	if v := need[int64](t)(l.ConnUp(ctx, a)); v != 1 {
		t.Fatalf("first ConnUp: online %d, want 1", v)
	}
	if v := need[int64](t)(l.ConnUp(ctx, a)); v != 1 {
		t.Fatalf("ConnUp again: online %d, want the same 1", v)
	}
	if v := need[int64](t)(l.ConnUp(ctx, c)); v != 0 {
		t.Fatalf("second connection: online %d, want 0", v)
	}
	end := need[cluster.ConnEnd](t)(l.ConnDown(ctx, "u", "a", "n1"))
	if !end.Claimed || end.Offline != 0 || end.Route.Node != "n1" || end.Route.ConnectedAt != 1 {
		t.Fatalf("first end: %+v, want claimed, no offline, node n1, connected_at 1", end)
	}
	end = need[cluster.ConnEnd](t)(l.ConnDown(ctx, "u", "c", "n3"))
	if !end.Claimed || end.Offline != 2 {
		t.Fatalf("last end: %+v, want claimed with offline 2", end)
	}
	if again := need[cluster.ConnEnd](t)(l.ConnDown(ctx, "u", "c", "n3")); again != end {
		t.Fatalf("same claimer again: %+v, want %+v", again, end)
	}
	if other := need[cluster.ConnEnd](t)(l.ConnDown(ctx, "u", "c", "n1")); other.Claimed {
		t.Fatalf("another claimer: %+v, want not claimed", other)
	}
	if v := need[int64](t)(l.ConnUp(ctx, c)); v != 0 {
		t.Fatalf("ConnUp of an ended connection: online %d, want 0", v)
	}
	if v := need[int64](t)(l.ConnUp(ctx, cluster.Route{User: "u", ConnID: "d", Node: "n1"})); v != 3 {
		t.Fatalf("new first connection: online %d, want 3", v)
	}
	if rs := need[[]cluster.Route](t)(l.NodeConns(ctx, "n1")); len(rs) != 1 || rs[0].ConnID != "d" {
		t.Fatalf("NodeConns(n1) = %+v, want only d", rs)
	}
}

// Concurrent connects and disconnects of one user on several nodes: in the
// order of v, online and offline alternate, starting with online, and the
// last one tells whether a connection is left.
func testPresenceRace(t *testing.T, b cluster.Backend) {
	l, ctx := lifecycle(t, b), ctxFor(t)
	type ev struct {
		v      int64
		online bool
	}
	var mu sync.Mutex
	var evs []ev
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				id := fmt.Sprintf("w%d-%d", w, i)
				on, err := l.ConnUp(ctx, cluster.Route{User: "racer", ConnID: id, Node: fmt.Sprintf("n%d", w)})
				if err != nil {
					t.Error(err)
					return
				}
				end, err := l.ConnDown(ctx, "racer", id, "n")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if on > 0 {
					evs = append(evs, ev{on, true})
				}
				if end.Offline > 0 {
					evs = append(evs, ev{end.Offline, false})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(evs, func(a, b ev) int { return int(a.v - b.v) })
	for i, e := range evs {
		if e.v != int64(i+1) || e.online != (i%2 == 0) {
			t.Fatalf("event %d is %+v: want v %d, online %v (all: %v)", i, e, i+1, i%2 == 0, evs)
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].online {
		t.Fatalf("every connection ended, but the last event is not offline: %v", evs)
	}
}

// Several survivors claim the ends of a dead node's connections at once:
// each end goes to exactly one of them.
func testEndClaimedOnce(t *testing.T, b cluster.Backend) {
	l, ctx := lifecycle(t, b), ctxFor(t)
	for i := range 20 {
		need[int64](t)(l.ConnUp(ctx, cluster.Route{User: fmt.Sprintf("u%d", i%5), ConnID: fmt.Sprint(i), Node: "dead"}))
	}
	routes := need[[]cluster.Route](t)(l.NodeConns(ctx, "dead"))
	if len(routes) != 20 {
		t.Fatalf("NodeConns(dead): %d routes, want 20", len(routes))
	}
	if nodes := need[[]string](t)(l.LifecycleNodes(ctx)); !slices.Contains(nodes, "dead") {
		t.Fatalf("LifecycleNodes = %v, want dead among them", nodes)
	}
	var mu sync.Mutex
	claims := map[string]int{}
	offline := 0
	var wg sync.WaitGroup
	for s := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, rt := range routes {
				end, err := l.ConnDown(ctx, rt.User, rt.ConnID, fmt.Sprintf("survivor%d", s))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if end.Claimed {
					claims[rt.ConnID]++
				}
				if end.Offline > 0 {
					offline++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, rt := range routes {
		if claims[rt.ConnID] != 1 {
			t.Fatalf("end of %s claimed %d times, want once", rt.ConnID, claims[rt.ConnID])
		}
	}
	if offline != 5 {
		t.Fatalf("%d offline answers, want one per user (5)", offline)
	}
	if err := l.DropNodeConns(ctx, "dead"); err != nil {
		t.Fatal(err)
	}
	if nodes := need[[]string](t)(l.LifecycleNodes(ctx)); slices.Contains(nodes, "dead") {
		t.Fatalf("LifecycleNodes = %v after DropNodeConns(dead)", nodes)
	}
}

func testDueClaimedOnce(t *testing.T, b cluster.Backend) {
	l, ctx := lifecycle(t, b), ctxFor(t)
	now := time.Now()
	d1 := cluster.Due{User: "u", Seq: 1, MessageID: "m1", Event: "e", Due: now.Add(-time.Second).UnixMilli()}
	d2 := cluster.Due{User: "u", Seq: 2, MessageID: "m2", Event: "e", Due: now.Add(time.Hour).UnixMilli()}
	for _, d := range []cluster.Due{d1, d2} {
		if err := l.AddDue(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Acked(ctx, "u", 1); err != nil {
		t.Fatal(err)
	}
	got := need[[]cluster.Due](t)(l.ClaimDue(ctx, now, time.Hour, 10))
	if len(got) != 1 || got[0].MessageID != "m1" || got[0].Acked != 1 {
		t.Fatalf("ClaimDue = %+v, want m1 alone, with acked 1", got)
	}
	if again := need[[]cluster.Due](t)(l.ClaimDue(ctx, now, time.Hour, 10)); len(again) != 0 {
		t.Fatalf("ClaimDue again within the lease = %+v, want nothing", again)
	}
	// After the lease, a check nobody finished comes back; DoneDue ends it.
	later := need[[]cluster.Due](t)(l.ClaimDue(ctx, now.Add(2*time.Hour), time.Hour, 10))
	if len(later) != 2 {
		t.Fatalf("ClaimDue after the lease = %+v, want m1 again and m2", later)
	}
	for _, d := range later {
		if err := l.DoneDue(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if rest := need[[]cluster.Due](t)(l.ClaimDue(ctx, now.Add(5*time.Hour), time.Hour, 10)); len(rest) != 0 {
		t.Fatalf("ClaimDue after DoneDue = %+v, want nothing", rest)
	}
}

// need[T](t)(f()) fails t if f returned an error, and returns f's value.
func need[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

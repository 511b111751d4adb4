package clustertest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

func init() {
	routeTests = append(routeTests,
		subtest{"ConnectRegistersAndReads", testConnect},
		subtest{"ConnectConcurrentCallsBatch", testConnectConcurrent},
		subtest{"ConnectLimitIsAtomic", testConnectLimit},
	)
}

func testConnect(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	opt := cluster.InboxOptions{Limit: 3, TTL: time.Hour}
	must(t, join(b, ctx, "r1", "cu", 0))
	for i := 0; i < 5; i++ {
		if _, err := b.AppendInbox(ctx, "cu", []byte(fmt.Sprint(i)), opt); err != nil {
			t.Fatal(err)
		}
	}
	must(t, b.Ack(ctx, "cu", "", 1, inboxOpts))
	route := cluster.Route{User: "cu", ConnID: "c1", Node: "n1", ConnectedAt: 5}
	res, err := b.Connect(ctx, route, longTTL, 0, opt, cluster.ConnLimit{})
	must(t, err)
	checkStrings(t, "rooms", res.Rooms, "r1")
	in := res.Inbox
	if in.LastSeq != 5 || in.Acked != 1 || len(in.Messages) != 3 || in.Messages[0].Seq != 3 || in.GapFrom != 2 || in.GapTo != 2 {
		t.Fatalf("inbox %+v", in)
	}
	routes, err := b.UserRoutes(ctx, "cu")
	must(t, err)
	checkRoutes(t, "routes after connect", routes, route)
	res, err = b.Connect(ctx, cluster.Route{User: "cu", ConnID: "c2", Node: "n2", ConnectedAt: 6}, longTTL, 4, opt, cluster.ConnLimit{})
	must(t, err)
	if len(res.Inbox.Messages) != 1 || res.Inbox.Messages[0].Seq != 5 || res.Inbox.GapTo != 0 {
		t.Fatalf("since 4: %+v", res.Inbox)
	}
}

func testConnectConcurrent(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	var wg sync.WaitGroup
	errs := make(chan error, 300)
	for i := 0; i < 300; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := fmt.Sprintf("cc%d", i%30)
			_, err := b.Connect(ctx, cluster.Route{User: u, ConnID: fmt.Sprint("k", i), Node: "n1"}, longTTL, 0, cluster.InboxOptions{Limit: 10, TTL: time.Hour}, cluster.ConnLimit{})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	for u := 0; u < 30; u++ {
		routes, err := b.UserRoutes(ctx, fmt.Sprint("cc", u))
		must(t, err)
		if len(routes) != 10 {
			t.Fatalf("user cc%d has %d routes, want 10", u, len(routes))
		}
	}
}

func init() {
	routeTests = append(routeTests, subtest{"RemoveRoutesBatch", testRemoveRoutes})
}

func testRemoveRoutes(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	var all []cluster.Route
	for i := 0; i < 50; i++ {
		all = append(all, cluster.Route{User: fmt.Sprint("rr", i%5), ConnID: fmt.Sprint("c", i), Node: "n1"})
	}
	must(t, b.AddRoutes(ctx, all, longTTL))
	must(t, b.RemoveRoutes(ctx, all[:40]))
	left := 0
	for u := 0; u < 5; u++ {
		rs, err := b.UserRoutes(ctx, fmt.Sprint("rr", u))
		must(t, err)
		left += len(rs)
	}
	if left != 10 {
		t.Fatalf("%d routes left, want 10", left)
	}
}

// With a limit, concurrent connects of one user never store more routes
// than the limit; routes of ignored (dead) nodes, expired routes and the
// connection's own route do not count; a refused connect stores nothing.
func testConnectLimit(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	opt := cluster.InboxOptions{Limit: 10, TTL: time.Hour}
	must(t, b.AddRoutes(ctx, []cluster.Route{{User: "lim", ConnID: "dead1", Node: "dead|node", ConnectedAt: 1}}, longTTL))
	must(t, b.AddRoutes(ctx, []cluster.Route{{User: "lim", ConnID: "old", Node: "n9", ConnectedAt: 1}}, shortTTL))
	lim := cluster.ConnLimit{Max: 2, IgnoreNodes: []string{"dead|node"}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, refused := 0, 0
	for i := range 12 {
		wg.Go(func() {
			_, err := b.Connect(ctx, cluster.Route{User: "lim", ConnID: fmt.Sprint("c", i), Node: fmt.Sprint("n", i%3), ConnectedAt: 2}, longTTL, 0, opt, lim)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted++
			case errors.Is(err, cluster.ErrConnLimit):
				refused++
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	eventually(t, "the short route expires", func() (bool, string) {
		routes, err := b.UserRoutes(ctx, "lim")
		return err == nil && len(routes) == accepted+1, fmt.Sprint(routes)
	})
	// The expired route may have counted while it lived: at most the
	// limit, and at least limit-1, were accepted.
	if accepted > 2 || accepted < 1 || accepted+refused != 12 {
		t.Fatalf("%d accepted, %d refused with a limit of 2", accepted, refused)
	}
	// Now exactly the limit; a reconnect of an accepted id is not refused.
	for accepted < 2 {
		_, err := b.Connect(ctx, cluster.Route{User: "lim", ConnID: "late", Node: "n1", ConnectedAt: 3}, longTTL, 0, opt, lim)
		must(t, err)
		accepted++
	}
	if _, err := b.Connect(ctx, cluster.Route{User: "lim", ConnID: "more", Node: "n1", ConnectedAt: 4}, longTTL, 0, opt, lim); !errors.Is(err, cluster.ErrConnLimit) {
		t.Fatalf("connect beyond the limit: %v, want ErrConnLimit", err)
	}
	routes, err := b.UserRoutes(ctx, "lim")
	must(t, err)
	if _, err := b.Connect(ctx, routes[len(routes)-1], longTTL, 0, opt, lim); err != nil {
		t.Fatalf("the same connection again: %v", err)
	}
	if got, _ := b.UserRoutes(ctx, "lim"); len(got) != 3 {
		t.Fatalf("routes %v, want the 2 accepted and the dead node's", got)
	}
}

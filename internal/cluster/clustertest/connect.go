package clustertest

import (
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
	)
}

func testConnect(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	opt := cluster.InboxOptions{Limit: 3, TTL: time.Hour}
	must(t, b.JoinRoom(ctx, "r1", "cu"))
	for i := 0; i < 5; i++ {
		if _, err := b.AppendInbox(ctx, "cu", []byte(fmt.Sprint(i)), opt); err != nil {
			t.Fatal(err)
		}
	}
	must(t, b.Ack(ctx, "cu", 1))
	route := cluster.Route{User: "cu", ConnID: "c1", Node: "n1", ConnectedAt: 5}
	res, err := b.Connect(ctx, route, longTTL, 0, opt)
	must(t, err)
	checkStrings(t, "rooms", res.Rooms, "r1")
	in := res.Inbox
	if in.LastSeq != 5 || in.Acked != 1 || len(in.Messages) != 3 || in.Messages[0].Seq != 3 || in.GapFrom != 2 || in.GapTo != 2 {
		t.Fatalf("inbox %+v", in)
	}
	routes, err := b.UserRoutes(ctx, "cu")
	must(t, err)
	checkRoutes(t, "routes after connect", routes, route)
	res, err = b.Connect(ctx, cluster.Route{User: "cu", ConnID: "c2", Node: "n2", ConnectedAt: 6}, longTTL, 4, opt)
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
			_, err := b.Connect(ctx, cluster.Route{User: u, ConnID: fmt.Sprint("k", i), Node: "n1"}, longTTL, 0, cluster.InboxOptions{Limit: 10, TTL: time.Hour})
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

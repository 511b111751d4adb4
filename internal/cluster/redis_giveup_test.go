package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// Calls answered "unavailable" while Redis hangs (SIGSTOP) never take
// effect when it comes back: the one already written to the socket finds
// its deadline passed (the script compares it with Redis's clock), the
// ones still queued behind it are never sent.
func TestRedisCallsGivenUpDoNothingLater(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	b := newRedis(t, s.URL())
	ctx := ctxTimeout(t, time.Minute)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.Ping(ctx)) // scripts are loaded on first use: load them now
	_, err := b.Connect(ctx, cluster.Route{User: "warm", ConnID: "c", Node: "n1", ConnectedAt: 1}, time.Hour, 0, cluster.InboxOptions{}, cluster.ConnLimit{})
	must(err)
	_, err = b.AppendInbox(ctx, "warm", []byte("x"), cluster.InboxOptions{})
	must(err)
	_, err = b.ClaimKey(ctx, "warm", "fp", "id", time.Hour)
	must(err)

	// Idle pooled connections, so that the calls below are written to
	// Redis's sockets rather than wait for a new connection's handshake.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { b.Client().BLPop(ctx, 100*time.Millisecond, "nothing") })
	}
	wg.Wait()

	s.Pause()
	var mu sync.Mutex
	var succeeded []string
	calls := []func(ctx context.Context, u string) error{
		func(ctx context.Context, u string) error {
			_, err := b.Connect(ctx, cluster.Route{User: u, ConnID: "c", Node: "n1", ConnectedAt: 1}, time.Hour, 0, cluster.InboxOptions{}, cluster.ConnLimit{})
			return err
		},
		func(ctx context.Context, u string) error {
			_, err := b.AppendInbox(ctx, u, []byte("late"), cluster.InboxOptions{})
			return err
		},
		func(ctx context.Context, u string) error {
			_, err := b.ClaimKey(ctx, "k"+u, "fp", "id", time.Hour)
			return err
		},
	}
	for i := range 5 {
		for j, call := range calls {
			wg.Go(func() {
				short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				if err := call(short, fmt.Sprintf("u%d", i)); err == nil {
					mu.Lock()
					succeeded = append(succeeded, fmt.Sprintf("u%d call %d", i, j))
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	s.Resume()
	if len(succeeded) > 0 {
		t.Fatalf("calls succeeded while Redis was stopped: %v", succeeded)
	}
	// Two round trips after the resume: whatever sat in the sockets has
	// run by then (Redis reads every readable client in one loop).
	admin := s.Client()
	eventually(t, 10*time.Second, "redis answers", func() error { return admin.Ping(ctx).Err() })
	must(admin.Ping(ctx).Err())
	for i := range 5 {
		u := fmt.Sprintf("u%d", i)
		routes, err := b.UserRoutes(ctx, u)
		must(err)
		last, err := b.LastSeq(ctx, u)
		must(err)
		kc, err := b.ClaimKey(ctx, "k"+u, "fp2", "id2", time.Hour)
		must(err)
		if len(routes) > 0 || last != 0 || !kc.Claimed {
			t.Fatalf("%s after the calls answered unavailable: routes %v, last seq %d, key claimed again %v; want none, 0, true", u, routes, last, kc.Claimed)
		}
	}
}

package cluster_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// roundTrips counts what the client sends: one per command, one per
// pipeline (go-redis sends a standalone pipeline in one write).
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// commandStats reads INFO commandstats as command -> calls, without the
// INFO and CONFIG calls of the measurement itself.
func commandStats(t testing.TB, c *redis.Client) map[string]int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[name] = n
	}
	return out
}

// TestRedisCommandCost measures what the gateway's frequent operations
// cost on a standalone Redis: round trips from the client, and commands
// that Redis executed (INFO commandstats after CONFIG RESETSTAT; a script
// counts as its EVALSHA plus every command it runs). Run with -v to see
// the table; the figures are in the package documentation's reply.
func TestRedisCommandCost(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	b := newRedis(t, s.URL())
	hook := &roundTrips{}
	b.Client().AddHook(hook)
	ctx := ctxTimeout(t, time.Minute)
	admin := s.Client()
	opt := cluster.InboxOptions{Limit: 100, TTL: 24 * time.Hour}
	const perNode = 1000
	nodeRoutes := make([]cluster.Route, perNode)
	for i := range nodeRoutes {
		nodeRoutes[i] = cluster.Route{User: fmt.Sprintf("u%d", i), ConnID: fmt.Sprintf("c%d", i), Node: "n1", ConnectedAt: 1}
	}
	node := cluster.NodeInfo{ID: "n1", Status: cluster.StatusActive}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Steady state: the node exists, the rooms have interest, a subscriber
	// listens, the scripts are loaded.
	must(b.RegisterNode(ctx, node))
	must(b.SetRoomInterest(ctx, "n1", []string{"lobby"}, time.Minute))
	must(b.SetRoomInterest(ctx, "n2", []string{"lobby"}, time.Minute))
	must(b.SetRoomInterest(ctx, "n3", []string{"lobby"}, time.Minute))
	must(b.Subscribe(ctx, "n1", func([]byte) {}))
	_, err := b.JoinRoom(ctx, "lobby", "alice", 0)
	must(err)

	ops := []struct {
		name string
		run  func()
	}{
		{"connect (AddRoutes 1 + UserRooms + LastSeq)", func() {
			must(b.AddRoutes(ctx, []cluster.Route{{User: "alice", ConnID: "c1", Node: "n1"}}, 90*time.Second))
			_, err := b.UserRooms(ctx, "alice")
			must(err)
			_, err = b.LastSeq(ctx, "alice")
			must(err)
		}},
		{"disconnect (RemoveRoute)", func() { must(b.RemoveRoute(ctx, "alice", "c1")) }},
		{"reliable publish to a user (AppendInbox + Send 1 node)", func() {
			res, err := b.AppendInbox(ctx, "alice", []byte(`{"event":"x"}`), opt)
			must(err)
			_ = res
			must(b.Send(ctx, []string{"n1"}, []byte("x")))
		}},
		{"resume (ReadInbox)", func() {
			_, err := b.ReadInbox(ctx, "alice", 0, opt)
			must(err)
		}},
		{"ack (Ack)", func() { must(b.Ack(ctx, "alice", "", 1, cluster.InboxOptions{TTL: time.Hour})) }},
		{"room publish (RoomNodes + Send 3 nodes)", func() {
			nodes, err := b.RoomNodes(ctx, "lobby")
			must(err)
			must(b.Send(ctx, nodes, []byte("x")))
		}},
		{"broadcast (Broadcast)", func() { must(b.Broadcast(ctx, []byte("x"))) }},
		{fmt.Sprintf("heartbeat per node (Heartbeat + AddRoutes of %d)", perNode), func() {
			_, err := b.Heartbeat(ctx, node)
			must(err)
			must(b.AddRoutes(ctx, nodeRoutes, 90*time.Second))
		}},
		{"nodes list (Nodes, 1 node)", func() {
			_, err := b.Nodes(ctx)
			must(err)
		}},
	}
	// Warm up: every script loaded, every pooled connection dialled.
	for _, op := range ops {
		op.run()
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-62s %11s %9s  %s\n", "operation", "round trips", "commands", "executed by Redis")
	for _, op := range ops {
		must(admin.ConfigResetStat(ctx).Err())
		before := hook.n.Load()
		op.run()
		trips := hook.n.Load() - before
		stats := commandStats(t, admin)
		var total int64
		names := make([]string, 0, len(stats))
		for name, n := range stats {
			total += n
			names = append(names, fmt.Sprintf("%s×%d", strings.ToUpper(name), n))
		}
		sort.Strings(names)
		fmt.Fprintf(&table, "%-62s %11d %9d  %s\n", op.name, trips, total, strings.Join(names, " "))
	}
	t.Log(table.String())
}

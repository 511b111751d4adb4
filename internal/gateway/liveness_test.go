package gateway

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// tryDial opens a WebSocket of user and reports whether it was accepted.
func (n *testNode) tryDial(t *testing.T, user string) bool {
	t.Helper()
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer " + token(t, user, nil)}}), Timeout: 5 * time.Second}
	conn, _, _, err := d.Dial(context.Background(), "ws://"+n.addr+"/ws")
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// Routes of a dead node (heartbeat older than three intervals, or its
// record gone) count nowhere: presence, publish's online and the per-user
// limit leave them out; a survivor removes them once the node is gone for
// good (silent for goneAfter, or its record gone). A node only a few
// intervals late keeps its routes (every node is, just after a Redis
// restart). A live node's routes still count.
func TestDeadNodesRoutesDoNotCount(t *testing.T) {
	mem := cluster.NewMemory()
	n := startNodeWith(t, mem, func(c *config.Gateway) { c.MaxConnsPerUser = 1 })
	ctx := context.Background()
	old := time.Now().Add(-time.Hour).UnixMilli()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(mem.RegisterNode(ctx, cluster.NodeInfo{ID: "dead", Status: cluster.StatusActive, Heartbeat: time.Now().Add(-2 * n.goneAfter()).UnixMilli()}))
	// Late by a few intervals: dead for counting, not gone.
	must(mem.RegisterNode(ctx, cluster.NodeInfo{ID: "late", Status: cluster.StatusActive, Heartbeat: time.Now().Add(-5 * n.cfg.HeartbeatInterval).UnixMilli()}))
	// A live node: registered before it has a route (as a node registers
	// before it takes connections), its heartbeat kept fresh by the test.
	must(mem.RegisterNode(ctx, cluster.NodeInfo{ID: "alive", Status: cluster.StatusActive}))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			_ = mem.RegisterNode(ctx, cluster.NodeInfo{ID: "alive", Status: cluster.StatusActive})
			select {
			case <-stop:
				return
			case <-time.After(n.cfg.HeartbeatInterval / 4):
			}
		}
	})
	t.Cleanup(func() { close(stop); wg.Wait() })
	must(mem.AddRoutes(ctx, []cluster.Route{
		{User: "d1", ConnID: "x1", Node: "dead", ConnectedAt: old},
		{User: "d2", ConnID: "x2", Node: "gone", ConnectedAt: old}, // no record at all
		{User: "l1", ConnID: "x3", Node: "alive", ConnectedAt: time.Now().UnixMilli()},
		{User: "z1", ConnID: "x5", Node: "late", ConnectedAt: old},
	}, time.Hour))

	online := func(user string) bool {
		res := pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: user}, Event: "e"})
		return *res.Online
	}
	for _, u := range []string{"d1", "d2"} {
		eventually(t, 10*time.Second, u+" offline", func() bool {
			routes, err := n.backend.UserRoutes(ctx, u)
			return err == nil && len(routes) == 0 && !online(u)
		})
		eventually(t, 10*time.Second, u+" accepted with WSGATE_MAX_CONNS_PER_USER=1 while its only route is on a dead node", func() bool {
			return n.tryDial(t, u)
		})
		eventually(t, 10*time.Second, "the dead route of "+u+" removed", func() bool {
			routes, err := mem.UserRoutes(ctx, u)
			for _, r := range routes {
				if r.Node != n.cfg.NodeID {
					return false
				}
			}
			return err == nil
		})
	}
	// Reliable publishes read the routes from the append.
	must(mem.AddRoutes(ctx, []cluster.Route{{User: "d3", ConnID: "x4", Node: "dead", ConnectedAt: old}}, time.Hour))
	if res := pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "d3"}, Event: "e", Reliable: true}); *res.Online {
		t.Fatal("reliable publish online=true for a user whose only route is on a dead node")
	}
	eventually(t, 10*time.Second, "z1 (only on a late node) offline", func() bool { return !online("z1") })
	// Kept: the absence of a removal needs a window (a removal is queued
	// at once and takes a backend call).
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if routes, err := mem.UserRoutes(ctx, "z1"); err != nil || len(routes) != 1 {
			t.Fatalf("the route of a node a few heartbeats late: %v %v, want it kept", routes, err)
		}
	}
	if !online("l1") {
		t.Fatal("the route of a live node does not count")
	}
	if n.tryDial(t, "l1") {
		t.Fatal("l1 got a second connection with WSGATE_MAX_CONNS_PER_USER=1")
	}
}

// refreshBlocks is the embedded backend whose route refresh (AddRoutes)
// waits until released, as a slow pipeline does.
type refreshBlocks struct {
	cluster.Backend
	mu      sync.Mutex
	block   chan struct{}
	entered chan struct{}
}

func (b *refreshBlocks) AddRoutes(ctx context.Context, routes []cluster.Route, ttl time.Duration) error {
	b.mu.Lock()
	block, entered := b.block, b.entered
	b.mu.Unlock()
	if block != nil {
		close(entered)
		<-block
	}
	return b.Backend.AddRoutes(ctx, routes, ttl)
}

// A connection that closes while the periodic route refresh is under way
// keeps no route: the refresh does not bring back a removed route.
func TestRouteRefreshDoesNotRecreateClosedRoute(t *testing.T) {
	b := &refreshBlocks{Backend: cluster.NewMemory()}
	n := startNodeWith(t, b, nil)
	c := n.connect(t, "rr", "")
	ctx := context.Background()
	block, entered := make(chan struct{}), make(chan struct{})
	b.mu.Lock()
	b.block, b.entered = block, entered
	b.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- n.reRegister(ctx) }()
	<-entered
	b.mu.Lock()
	b.block = nil
	b.mu.Unlock()
	c.conn.Close()
	eventually(t, 10*time.Second, "route removed after the close", func() bool {
		routes, err := b.UserRoutes(ctx, "rr")
		return err == nil && len(routes) == 0 && len(n.hub.userConns("rr")) == 0
	})
	close(block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "no route after the refresh", func() bool {
		routes, err := b.UserRoutes(ctx, "rr")
		return err == nil && len(routes) == 0
	})
}

// WSGATE_MAX_CONNS_PER_USER holds under concurrent handshakes of one user
// on two nodes: the check and the route insert are one step.
func TestUserLimitHoldsUnderConcurrentHandshakes(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	limit := func(c *config.Gateway) { c.MaxConnsPerUser = 1 }
	nodes := []*testNode{
		startNodeWith(t, redisBackend(t, srv.URL(), "lim", 0), func(c *config.Gateway) { limit(c); c.NodeID = "a" }),
		startNodeWith(t, redisBackend(t, srv.URL(), "lim", 0), func(c *config.Gateway) { limit(c); c.NodeID = "b" }),
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for i := range 12 {
		wg.Go(func() {
			n := nodes[i%2]
			d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer " + token(t, "once", nil)}}), Timeout: 5 * time.Second}
			conn, br, _, err := d.Dial(context.Background(), "ws://"+n.addr+"/ws")
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
			// Accepted means the welcome came: a connection refused after
			// the upgrade is closed instead.
			var r io.Reader = conn
			if br != nil {
				r = io.MultiReader(br, conn)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, _, err := wsutil.ReadServerData(struct {
				io.Reader
				io.Writer
			}{r, conn}); err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
		})
	}
	wg.Wait()
	routes, err := nodes[0].backend.UserRoutes(context.Background(), "once")
	if err != nil {
		t.Fatal(err)
	}
	if accepted != 1 || len(routes) != 1 {
		t.Fatalf("%d of 12 concurrent handshakes accepted, %d routes; want 1 with WSGATE_MAX_CONNS_PER_USER=1", accepted, len(routes))
	}
}

// removalFails is the embedded backend whose next route removals fail, as
// while Redis is unreachable.
type removalFails struct {
	cluster.Backend
	fails atomic.Int32
}

func (b *removalFails) RemoveRoutes(ctx context.Context, routes []cluster.Route) error {
	if b.fails.Add(-1) >= 0 {
		return cluster.ErrUnavailable
	}
	return b.Backend.RemoveRoutes(ctx, routes)
}

// The route of a connection that ended while the backend could not take
// its removal is removed once the backend is back, not left to count
// until the route TTL.
func TestFailedRouteRemovalIsRetried(t *testing.T) {
	b := &removalFails{Backend: cluster.NewMemory()}
	n := startNodeWith(t, b, nil)
	c := n.connect(t, "rm", "")
	b.fails.Store(2)
	c.conn.Close()
	eventually(t, 10*time.Second, "route removed after failed removals", func() bool {
		routes, err := b.UserRoutes(context.Background(), "rm")
		return err == nil && len(routes) == 0
	})
	if b.fails.Load() >= 0 {
		t.Fatal("the removals did not fail as arranged")
	}
}

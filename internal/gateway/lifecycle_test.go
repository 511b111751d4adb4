package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"go.uber.org/goleak"

	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// A warming node accepts the clients the allocator sends it while /readyz
// stays 503; its weight rises in steps and the allocator gives it a share
// of new connections in proportion to that weight.
func TestWarmingNodeAcceptsAndRampsItsShare(t *testing.T) {
	mem := cluster.NewMemory()
	n := startNodeWith(t, mem, func(c *config.Gateway) { c.Warmup = 4 * time.Second })
	if s := n.Status(); s != cluster.StatusWarming {
		t.Fatalf("status %s at start, want warming", s)
	}
	n.connect(t, "early", "") // fails on a 503 refusal
	rnd := rand.New(rand.NewPCG(3, 3))
	var weights []int
	for {
		before := n.Status()
		status, _ := apiCall(t, n, "GET", "/readyz", "", "")
		if before == cluster.StatusWarming && n.Status() == cluster.StatusWarming && status != 503 {
			t.Fatalf("/readyz %d while warming, want 503", status)
		}
		rec := nodeRecord(t, mem, n.cfg.NodeID)
		if rec.Status == cluster.StatusActive {
			// The record is written from the node's status: active here.
			if status, _ = apiCall(t, n, "GET", "/readyz", "", ""); rec.Weight != 100 || status != 200 {
				t.Fatalf("after warm-up: weight %d, /readyz %d; want 100 and 200", rec.Weight, status)
			}
			break
		}
		if len(weights) == 0 || weights[len(weights)-1] != rec.Weight {
			weights = append(weights, rec.Weight)
			// The allocator's picks between this node (no connection
			// yet counted) and a loaded active one: admitted with
			// probability weight/100, then the least loaded.
			busy := cluster.NodeInfo{ID: "busy", URL: "ws://busy/ws", Status: cluster.StatusActive, Connections: 500, Weight: 100, Heartbeat: rec.Heartbeat}
			rec.Connections = 0
			picks := 0
			const calls = 4000
			for range calls {
				if got, _ := allocator.Choose([]cluster.NodeInfo{rec, busy}, time.UnixMilli(rec.Heartbeat), time.Minute, rnd); got.ID == rec.ID {
					picks++
				}
			}
			want := float64(rec.Weight) / 100
			if share := float64(picks) / calls; share < want*0.8 || share > want*1.2 {
				t.Fatalf("weight %d: %.3f of the picks, want about %.3f", rec.Weight, share, want)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !slices.IsSorted(weights) || len(weights) < 3 || weights[0] != 10 {
		t.Fatalf("weights seen while warming %v: want a rising ramp from 10 with at least 3 steps", weights)
	}
}

func nodeRecord(t *testing.T, b cluster.Backend, id string) cluster.NodeInfo {
	t.Helper()
	nodes, err := b.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range nodes {
		if x.ID == id {
			return x
		}
	}
	t.Fatalf("no record of node %s", id)
	return cluster.NodeInfo{}
}

// lossyBus loses (silently, as Pub/Sub may) the first drops envelopes of
// one kind that its node sends.
type lossyBus struct {
	cluster.Backend
	kind  string
	drops atomic.Int32
}

func loseFirst(b cluster.Backend, kind string, drops int32) *lossyBus {
	l := &lossyBus{Backend: b, kind: kind}
	l.drops.Store(drops)
	return l
}

func (b *lossyBus) Send(ctx context.Context, nodes []string, payload []byte) error {
	if bytes.HasPrefix(payload, []byte(`{"k":"`+b.kind+`"`)) && b.drops.Add(-1) >= 0 {
		return nil
	}
	return b.Backend.Send(ctx, nodes, payload)
}

// redisBackends connects k backends to one private Redis server.
func redisBackends(t *testing.T, k int) []cluster.Backend {
	t.Helper()
	srv := redistest.Standalone(t, redistest.Options{})
	var out []cluster.Backend
	for range k {
		out = append(out, redisBackend(t, srv.URL(), "t", 0))
	}
	return out
}

// The disconnect API closes the user's connections on every node, also
// when the request to a node is lost, and counts the confirmed closes.
func TestDisconnectIsConfirmedDespiteALostKick(t *testing.T) {
	b := redisBackends(t, 2)
	n1 := startNodeWith(t, b[0], nil)
	n2 := startNodeWith(t, loseFirst(b[1], kindKick, 1), func(c *config.Gateway) { c.NodeID = "t2" })
	far := n1.connect(t, "dora", "")
	near := n2.connect(t, "dora", "")
	status, m := apiCall(t, n2, "POST", "/api/v1/users/dora/disconnect", "k", `{"reason":"bye"}`)
	if status != 200 || m["disconnected"] != float64(2) {
		t.Fatalf("disconnect: %d %v, want 200 and 2", status, m)
	}
	for _, c := range []*wsClient{near, far} {
		if code := c.waitClosed(5 * time.Second); code != protocol.CloseDisconnected {
			t.Fatalf("closed with %d, want 4003", code)
		}
	}
}

// A node that does not confirm within the request's time is not counted,
// and is asked again afterwards until its connection is closed.
func TestDisconnectGoesOnAskingAfterTheAnswer(t *testing.T) {
	b := redisBackends(t, 2)
	n1 := startNodeWith(t, b[0], nil)
	// 9 lost kicks: 4.5 s of retries, longer than the request waits.
	n2 := startNodeWith(t, loseFirst(b[1], kindKick, 9), func(c *config.Gateway) { c.NodeID = "t2" })
	far := n1.connect(t, "dora", "")
	near := n2.connect(t, "dora", "")
	status, m := apiCall(t, n2, "POST", "/api/v1/users/dora/disconnect", "k", "")
	if status != 200 || m["disconnected"] != float64(1) {
		t.Fatalf("disconnect: %d %v, want 200 and 1 (the local connection only)", status, m)
	}
	if code := near.waitClosed(5 * time.Second); code != protocol.CloseDisconnected {
		t.Fatalf("local connection closed with %d, want 4003", code)
	}
	if code := far.waitClosed(10 * time.Second); code != protocol.CloseDisconnected {
		t.Fatalf("remote connection closed with %d, want 4003", code)
	}
}

// Under the single device policy a new login closes the older one on
// another node, also when the first kick is lost.
func TestSingleDeviceKickIsConfirmedDespiteALostKick(t *testing.T) {
	b := redisBackends(t, 2)
	single := func(id string) func(*config.Gateway) {
		return func(c *config.Gateway) { c.NodeID, c.DevicePolicy = id, config.DeviceSingle }
	}
	n1 := startNodeWith(t, b[0], single("t1"))
	n2 := startNodeWith(t, loseFirst(b[1], kindKick, 1), single("t2"))
	old := n1.connect(t, "solo", "")
	n2.connect(t, "solo", "")
	if code := old.waitClosed(5 * time.Second); code != protocol.CloseReplaced {
		t.Fatalf("old connection closed with %d, want 4009", code)
	}
	if k := len(n2.hub.userConns("solo")); k != 1 {
		t.Fatalf("%d connections of the new login, want 1", k)
	}
}

// A drain requested through another node's API reaches the node also when
// the first request is lost.
func TestRemoteDrainReachesTheNodeDespiteALostRequest(t *testing.T) {
	mem := cluster.NewMemory()
	n1 := startNodeWith(t, loseFirst(mem, kindDrain, 1), nil)
	n2 := startNodeWith(t, mem, func(c *config.Gateway) { c.NodeID = "t2" })
	if status, m := apiCall(t, n1, "POST", "/api/v1/nodes/t2/drain", "k", ""); status != 202 {
		t.Fatalf("drain: %d %v", status, m)
	}
	eventually(t, 5*time.Second, "t2 draining", func() bool { return n2.draining.Load() })
	select {
	case <-n2.Drained():
	case <-time.After(10 * time.Second):
		t.Fatal("t2 did not finish its drain")
	}
}

// slowConnect is a backend whose Connect waits for its context to end and
// takes a second more to return, as a call on a slow network does.
type slowConnect struct {
	cluster.Backend
	inside atomic.Int32
}

func (b *slowConnect) Connect(ctx context.Context, r cluster.Route, ttl time.Duration, since int64, opt cluster.InboxOptions, lim cluster.ConnLimit) (cluster.ConnectResult, error) {
	b.inside.Add(1)
	defer b.inside.Add(-1)
	<-ctx.Done()
	time.Sleep(time.Second)
	return cluster.ConnectResult{}, ctx.Err()
}

// Shutdown with handshakes in flight waits for them: when it returns, no
// handshake is still in its backend step, no connection is left and no
// goroutine of the node runs. On the own accept path each such handshake
// is refused with 503 (also over TLS 1.3); through net/http (a TLS 1.2
// client) the 101 has gone out, and the connection is closed.
func TestShutdownWaitsForHandshakesInFlight(t *testing.T) {
	t.Run("own accept path", func(t *testing.T) {
		shutdownWithHandshakesInFlight(t, nil, func(t *testing.T, n *testNode, user string) net.Conn {
			c, err := net.Dial("tcp", n.addr)
			if err != nil {
				t.Fatal(err)
			}
			req := "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
				"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer " + token(t, user, nil) + "\r\n\r\n"
			if _, err := c.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			return c
		}, func(t *testing.T, c net.Conn) {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b, _ := io.ReadAll(c)
			if !bytes.HasPrefix(b, []byte("HTTP/1.1 503")) || !bytes.Contains(b, []byte("shutting down")) {
				t.Fatalf("answer to a handshake in flight: %q, want a 503 (node shutting down)", b)
			}
		})
	})
	t.Run("own accept path, TLS 1.3", func(t *testing.T) {
		certFile, keyFile := selfSigned(t)
		tlsNode := func(c *config.Gateway) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile }
		shutdownWithHandshakesInFlight(t, tlsNode, func(t *testing.T, n *testNode, user string) net.Conn {
			c, err := tls.Dial("tcp", n.addr, &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				t.Fatal(err)
			}
			req := "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
				"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer " + token(t, user, nil) + "\r\n\r\n"
			if _, err := c.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			return c
		}, func(t *testing.T, c net.Conn) {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b, _ := io.ReadAll(c)
			if !bytes.HasPrefix(b, []byte("HTTP/1.1 503")) || !bytes.Contains(b, []byte("shutting down")) {
				t.Fatalf("answer to a handshake in flight: %q, want a 503 (node shutting down)", b)
			}
		})
	})
	t.Run("net/http (TLS 1.2)", func(t *testing.T) {
		certFile, keyFile := selfSigned(t)
		tlsNode := func(c *config.Gateway) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile }
		shutdownWithHandshakesInFlight(t, tlsNode, func(t *testing.T, n *testNode, user string) net.Conn {
			d := ws.Dialer{
				Header:    ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer " + token(t, user, nil)}}),
				TLSConfig: &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12},
				Timeout:   5 * time.Second,
			}
			c, _, _, err := d.Dial(context.Background(), "wss://"+n.addr+"/ws") // the 101 comes before the backend step
			if err != nil {
				t.Fatal(err)
			}
			return c
		}, func(t *testing.T, c net.Conn) {})
	})
}

func shutdownWithHandshakesInFlight(t *testing.T, mutate func(*config.Gateway), dial func(*testing.T, *testNode, string) net.Conn, check func(*testing.T, net.Conn)) {
	ignore := goleak.IgnoreCurrent()
	b := &slowConnect{Backend: cluster.NewMemory()}
	n := startNodeWith(t, b, mutate)
	const k = 3
	var clients []net.Conn
	for i := range k {
		c := dial(t, n, fmt.Sprint("u", i))
		defer c.Close()
		clients = append(clients, c)
	}
	eventually(t, 5*time.Second, "handshakes in their backend step", func() bool { return b.inside.Load() == k })
	n.stop()
	if in := b.inside.Load(); in != 0 {
		t.Fatalf("Shutdown returned with %d handshakes still in their backend step", in)
	}
	if c := n.hub.count(); c != 0 {
		t.Fatalf("%d connections left after Shutdown", c)
	}
	for _, c := range clients {
		check(t, c)
	}
	goleak.VerifyNone(t, ignore)
}

// A node silent for three heartbeat intervals is dead at once for the
// allocator and the node list, long before its record is cleaned up (the
// route TTL, 90 s by default).
func TestSilentNodeIsDeadAfterThreeHeartbeats(t *testing.T) {
	mem := cluster.NewMemory()
	n := startNodeWith(t, mem, nil) // heartbeat every 200 ms
	// Two records with no connection at all (the allocator's first
	// choices if alive), written again before each call: just now, and
	// four heartbeats ago.
	records := func() {
		now := time.Now()
		for id, age := range map[string]time.Duration{"fresh": 0, "silent": 4 * n.cfg.HeartbeatInterval} {
			rec := cluster.NodeInfo{ID: id, URL: "ws://" + id + "/ws", Status: cluster.StatusActive, Weight: 100, Heartbeat: now.Add(-age).UnixMilli()}
			if err := mem.RegisterNode(context.Background(), rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	records()
	_, m := apiCall(t, n, "GET", "/api/v1/nodes", "k", "")
	var listed []string
	for _, x := range m["nodes"].([]any) {
		listed = append(listed, x.(map[string]any)["id"].(string))
	}
	if !slices.Contains(listed, "fresh") || slices.Contains(listed, "silent") {
		t.Fatalf("nodes listed %v: want fresh, not silent", listed)
	}
	picks := map[string]int{}
	for range 50 {
		records()
		status, m := apiCall(t, n, "GET", "/v1/allocate", "", "")
		if status != 200 {
			t.Fatalf("allocate: %d %v", status, m)
		}
		picks[m["node"].(string)]++
	}
	if picks["silent"] != 0 || picks["fresh"] == 0 {
		t.Fatalf("allocator picks %v: want fresh, never silent", picks)
	}
}

package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// benchNode is a node with the given backend and no listener.
func benchNode(b *testing.B, backend cluster.Backend) *Node {
	cfg := new(config.Gateway)
	if err := config.NewGatewaySet(cfg).Load(nil, func(string) (string, bool) { return "", false }); err != nil {
		b.Fatal(err)
	}
	cfg.NodeID, cfg.JWTSecret, cfg.AdvertiseURL = "bench", testSecret, "ws://127.0.0.1:1/ws"
	cfg.SendQueue = 4096
	n, err := New(*cfg, backend, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n
}

// attach adds k open connections over socket pairs whose far ends are
// drained by one goroutine each, as clients would.
func attach(b *testing.B, n *Node, k int) {
	for i := 0; i < k; i++ {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
		c := &conn{n: n, fd: fds[0], idSeq: n.idSeq.Add(1), user: fmt.Sprint("u", i), state: stOpen, lastRead: time.Now().Unix(), nextPing: time.Now().Add(time.Hour).Unix()}
		n.hub.add(c)
		tok, err := n.poller.Register(c.fd, c)
		if err != nil {
			b.Fatal(err)
		}
		c.token = tok
		unix.SetNonblock(fds[1], false)
		f := os.NewFile(uintptr(fds[1]), "client")
		go io.Copy(io.Discard, f)
		b.Cleanup(func() { f.Close() })
	}
}

// BenchmarkFanOut measures one broadcast delivered to N local connections:
// encode once, queue on each, writev by the writer pool. ns/op is per
// broadcast; delivered/s and ns/delivery are reported.
func BenchmarkFanOut(b *testing.B) {
	for _, k := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprint(k), func(b *testing.B) {
			n := benchNode(b, cluster.NewMemory())
			attach(b, n, k)
			msg := &protocol.Message{ID: "m", Event: "tick", Data: []byte(`{"p":101.25,"s":"ACME","pad":"` + string(make([]byte, 40)) + `"}`), Target: protocol.Target{Type: "broadcast"}}
			body := protocol.AppendMessageJSON(nil, msg)
			for i := range body {
				if body[i] == 0 {
					body[i] = 'x'
				}
			}
			conns := n.hub.all()
			drained := func() { waitDrained(conns) }
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				n.deliverLocal(msg.Target, newDelivery(body, classChat, 0, 0))
				if i%4 == 3 {
					drained() // at most 4 broadcasts in flight
				}
			}
			drained()
			b.StopTimer()
			el := time.Since(start)
			b.ReportMetric(float64(el.Nanoseconds())/float64(b.N*k), "ns/delivery")
		})
	}
}

// BenchmarkPublish measures an API publish to a user with no connection
// (so the backend's cost alone), on the embedded backend and on a real
// Redis, reliable and not.
func BenchmarkPublish(b *testing.B) {
	backends := map[string]func(b *testing.B) cluster.Backend{
		"memory": func(b *testing.B) cluster.Backend { return cluster.NewMemory() },
		"redis": func(b *testing.B) cluster.Backend {
			srv := redistest.Standalone(b, redistest.Options{})
			r, err := cluster.NewRedis(context.Background(), cluster.RedisOptions{URL: srv.URL(), Prefix: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			return r
		},
	}
	for _, name := range []string{"memory", "redis"} {
		for _, reliable := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/reliable=%v", name, reliable), func(b *testing.B) {
				n := benchNode(b, backends[name](b))
				req := api.PublishRequest{Target: protocol.Target{Type: "user", ID: "nobody"}, Event: "e", Data: []byte(`{"x":1}`), Reliable: reliable}
				ctx := context.Background()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := n.Publish(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkHandshakeChecks is the user-space part of a handshake on the
// accept path before the backend step: parse the request in place, then
// every check of contract §3 including the JWT (HS256).
func BenchmarkHandshakeChecks(b *testing.B) {
	n := benchNode(b, cluster.NewMemory())
	req := []byte("GET /ws?format=json HTTP/1.1\r\nHost: gw.example:8080\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://gw.example:8080\r\n" +
		"Authorization: Bearer " + token(b, "bench-user-1", nil) + "\r\n\r\n")
	buf := make([]byte, len(req))
	b.ReportAllocs()
	for b.Loop() {
		copy(buf, req) // the upgrader canonicalizes header names in place
		r, _, err := parseUpgrade(buf)
		if err != nil {
			b.Fatal(err)
		}
		r.IP = "127.0.0.1"
		a, f := n.admit(&r)
		if f != nil {
			b.Fatal(f.Msg)
		}
		n.gate.Release(&a)
	}
}

// attachSinks adds k open connections whose writes go to /dev/null (one
// descriptor each, not polled: a write there never blocks), for fan-outs
// larger than socket pairs allow under the descriptor limit.
func attachSinks(b *testing.B, n *Node, k int) {
	null, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(null)
	for i := 0; i < k; i++ {
		fd, err := unix.Dup(null)
		if err != nil {
			b.Fatal(err)
		}
		n.hub.add(&conn{n: n, fd: fd, idSeq: n.idSeq.Add(1), user: fmt.Sprint("u", i), state: stOpen, lastRead: time.Now().Unix(), nextPing: time.Now().Add(time.Hour).Unix()})
	}
}

// BenchmarkRoomPublish measures an API publish to a room of 15,000 members
// connected to this node (their writes go to /dev/null: the descriptor
// limit allows no 15,000 socket pairs), on a real Redis, reliable and
// not: the cost of the whole publish, the backend step and the
// encode-once fan-out to every member with its writes. At most 4
// publishes are in flight. The ratio of the two is what
// docs/performance.md reports.
func BenchmarkRoomPublish(b *testing.B) {
	const members = 15000
	for _, reliable := range []bool{false, true} {
		b.Run(fmt.Sprintf("members=%d/reliable=%v", members, reliable), func(b *testing.B) {
			srv := redistest.Standalone(b, redistest.Options{})
			r, err := cluster.NewRedis(context.Background(), cluster.RedisOptions{URL: srv.URL(), Prefix: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			n := benchNode(b, r)
			attachSinks(b, n, members)
			for i := range members {
				n.hub.join(fmt.Sprint("u", i), "big")
			}
			n.declareInterest([]string{"big"})
			conns := n.hub.roomConns("big")
			if len(conns) != members {
				b.Fatalf("%d members connected, want %d", len(conns), members)
			}
			drained := func() { waitDrained(conns) }
			req := api.PublishRequest{Target: protocol.Target{Type: "room", ID: "big"}, Event: "e", Data: []byte(`{"p":101.25,"s":"ACME"}`), Reliable: reliable}
			ctx := context.Background()
			if _, err := n.Publish(ctx, req); err != nil { // warm: script loaded, streams started
				b.Fatal(err)
			}
			drained()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := n.Publish(ctx, req); err != nil {
					b.Fatal(err)
				}
				if i%4 == 3 {
					drained()
				}
			}
			drained()
		})
	}
}

// BenchmarkConnectJoin is a client's whole arrival on a node with Redis:
// the handshake (token, route, inbox), a join frame and its reply, then
// the close; one connection at a time, over loopback. rtt/op are the
// round trips to Redis that touch the user's or the room's keys: 1 for
// the connect, 1 for the join, 1 for the close's route removal.
func BenchmarkConnectJoin(b *testing.B) {
	n, r := redisNode(b, "benchjoin")
	hook := &keyTrips{markers: []string{":r:lobby}", ":u:"}}
	r.Client().AddHook(hook)
	toks := make([]string, 1000)
	for i := range toks {
		toks[i] = token(b, fmt.Sprint("bj", i), anyRoom)
	}
	join := func(tok string) rawClient {
		c := dialRawFD(b, n.addr, tok)
		c.frame(b, `{"type":"join","id":"j","room":"lobby"}`)
		c.readUntil(b, `"type":"reply"`)
		return c
	}
	// The room's first member stays: the node's interest is declared.
	first := join(token(b, "bj-first", anyRoom))
	defer unix.Close(int(first))
	arrive := func(i int) { unix.Close(int(join(toks[i%len(toks)]))) }
	before := hook.n.Load()
	i := 0
	for b.Loop() {
		arrive(i)
		i++
	}
	b.ReportMetric(float64(hook.n.Load()-before)/float64(i), "rtt/op")
}

// waitDrained waits until every connection of conns has written all it
// had queued (benchmarks bound the fan-outs in flight with it).
func waitDrained(conns []*conn) {
	for _, c := range conns {
		for {
			c.mu.Lock()
			idle := len(c.outq) == 0 && len(c.wbuf) == 0 && !c.writing
			c.mu.Unlock()
			if idle {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}

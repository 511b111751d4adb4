package gateway

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/rooms"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// BenchmarkRoomJoinLeave: one op = a connection's join frame and leave
// frame, each answered, on a node on a real Redis, for a room without
// presence, with presence, and with presence and joined/left (the room
// empty but for this connection). Reported per op: the node's CPU
// (getrusage of the test process, the client's share included) and
// Redis's (INFO used_cpu), measured after the presence changes the ops
// queued have all been made.
//
//	go test -run XXX -bench RoomJoinLeave -benchtime 3000x ./internal/gateway/
func BenchmarkRoomJoinLeave(b *testing.B) {
	for _, mode := range []string{"plain", "presence", "join_leave"} {
		b.Run(mode, func(b *testing.B) {
			srv := redistest.Standalone(b, redistest.Options{})
			backend, err := cluster.NewRedis(context.Background(), cluster.RedisOptions{URL: srv.URL(), Prefix: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			body := "rooms:\n  - pattern: \"r:*\"\n"
			switch mode {
			case "presence":
				body += "    presence: true\n"
			case "join_leave":
				body += "    presence: true\n    join_leave: true\n"
			}
			rf := roomsFile(b, body)
			n := startNodeWith(b, backend, func(c *config.Gateway) { c.RoomsFile = rf })
			c := n.dial(b, "", http.Header{"Authorization": {"Bearer " + token(b, "u", map[string]any{"rooms": []string{"r:*"}})}}, true)
			c.expect("welcome")
			ctx := context.Background()
			settle := func() {
				if mode == "plain" {
					return
				}
				for {
					p, err := n.ReadRoomPresence(ctx, "r:1", "", 0)
					if err == nil && p.Connections == 0 {
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
			cpu0, rcpu0 := processCPU(), redisCPU(b, srv)
			b.ResetTimer()
			for i := range b.N {
				frameReq(b, c, map[string]any{"type": "join", "id": "j" + strconv.Itoa(i), "room": "r:1"})
				frameReq(b, c, map[string]any{"type": "leave", "id": "l" + strconv.Itoa(i), "room": "r:1"})
			}
			settle()
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "node-cpu-us/op")
			b.ReportMetric(float64((redisCPU(b, srv)-rcpu0).Microseconds())/float64(b.N), "redis-cpu-us/op")
		})
	}
}

// BenchmarkPresenceFanOut: one op = a joined and a left told to every
// member of a room of 10,000 connections on this node (joined/left
// rooms; the members' writes go to /dev/null): the node's cost of the
// fan-out of one connection coming and going.
//
//	go test -run XXX -bench PresenceFanOut -benchtime 50x ./internal/gateway/
func BenchmarkPresenceFanOut(b *testing.B) {
	const members = 10_000
	rf := roomsFile(b, "rooms:\n  - pattern: \"r:*\"\n    presence: true\n    join_leave: true\n")
	n := benchNode(b, cluster.NewMemory())
	n.SetRooms(mustRooms(b, rf))
	attachSinks(b, n, members)
	for _, c := range n.hub.all() {
		n.hub.joinConn(c, "r:1")
		c.mu.Lock()
		c.extra().pres = map[string]*connPres{"r:1": {ready: true, view: map[string]string{}}}
		c.mu.Unlock()
	}
	b.ResetTimer()
	for i := range b.N {
		id := "x" + strconv.Itoa(i)
		n.tellPresence(presEvent{room: "r:1", user: "x", conn: id, join: true, seq: int64(i + 1)})
		n.tellPresence(presEvent{room: "r:1", user: "x", conn: id, seq: int64(i + 1)})
		for _, c := range n.hub.all() {
			c.mu.Lock()
			c.outq = c.outq[:0]
			c.mu.Unlock()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*members), "ns/frame")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func redisCPU(b *testing.B, srv *redistest.Server) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := srv.Client().Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

func mustRooms(b *testing.B, path string) *rooms.Set {
	s, err := rooms.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

package e2e

// What each gateway operation costs Redis, measured through real gateway
// processes with INFO commandstats (after CONFIG RESETSTAT). A script
// counts as its EVALSHA plus every command it runs. Run
//
//	go test -v -run TestRedisCommandsPerOperation ./test/e2e/
//
// for the table. Only counts and ratios are asserted, never times.

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// notCounted are the measurement's own commands (INFO, CONFIG, HLEN), the
// bus subscription's keep-alive PING and what go-redis sends on a new
// connection.
func notCounted(cmd string) bool {
	switch {
	case cmd == "info", cmd == "ping", cmd == "hello", cmd == "select", cmd == "hlen",
		strings.HasPrefix(cmd, "config|"), strings.HasPrefix(cmd, "client|"):
		return true
	}
	return false
}

// commandStats reads INFO commandstats as command -> calls.
func commandStats(t testing.TB, c *redis.Client) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "commandstats").Result()
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
		if notCounted(name) {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[name] = n
	}
	return out
}

func resetStats(t testing.TB, c *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

// costRow is one operation's commands per operation.
type costRow struct {
	name  string
	ops   int
	calls map[string]int64
}

func (r costRow) per(cmd string) float64 { return float64(r.calls[cmd]) / float64(r.ops) }

func (r costRow) total() float64 {
	var n int64
	for _, v := range r.calls {
		n += v
	}
	return float64(n) / float64(r.ops)
}

func (r costRow) breakdown() string {
	names := make([]string, 0, len(r.calls))
	for k := range r.calls {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		v := strings.TrimRight(strings.TrimRight(strconv.FormatFloat(r.per(k), 'f', 2, 64), "0"), ".")
		fmt.Fprintf(&b, " %s %s", k, v)
	}
	return strings.TrimSpace(b.String())
}

func TestRedisCommandsPerOperation(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t, redistest.Options{})
	admin := srv.Client()
	var rows []costRow
	// Operations: heartbeats every hour, so nothing runs in the background
	// but the nodes' safety-net catch-up checks (a GET per local user, at
	// the Unix seconds that are multiples of 30).
	c := newCluster(t, srv.URL(), map[string]string{"WSGATE_HEARTBEAT_INTERVAL": "1h", "WSGATE_ROUTE_TTL": "3h"})
	n := c.startNodes("a", 3, nil)
	catchUps := func() float64 {
		var sum float64
		for _, g := range n {
			m, err := g.metrics()
			if err != nil {
				t.Fatal(err)
			}
			sum += m[`wsgate_backend_latency_seconds_count{op="last_seqs"}`]
		}
		return sum
	}
	measure := func(name string, ops int, action func()) costRow {
		t.Helper()
		// A window that could reach the next catch-up check starts after
		// it (checked below: counts with one in them would not be the
		// operation's; a loaded machine once put 87 GETs in a broadcast's).
		if left := 30 - time.Now().Unix()%30; left < 12 {
			time.Sleep(time.Duration(left+2) * time.Second) // to a known schedule: no event to await
		}
		l0 := catchUps()
		resetStats(t, admin)
		action()
		r := costRow{name: name, ops: ops, calls: commandStats(t, admin)}
		if l1 := catchUps(); l1 != l0 {
			t.Fatalf("%s: %v safety-net catch-up checks ran in the measured window (it took over 16 s): its counts are not the operation's", name, l1-l0)
		}
		rows = append(rows, r)
		return r
	}
	pub, holder, other := n[0], n[1], n[2]
	const k = 20
	users := func(prefix string, m int) []string {
		var out []string
		for i := range m {
			out = append(out, fmt.Sprintf("%s-%d", prefix, i))
		}
		return out
	}
	dialAll := func(g *gateway, us []string) []*probe {
		var out []*probe
		for _, u := range us {
			out = append(out, dial(t, g, u, nil))
		}
		return out
	}
	// The nodes finish some work after the call that caused it (room
	// interest after a membership envelope, route and interest removal
	// after a close). With heartbeats off, Redis hears nothing else from
	// them: their work is done once Redis executed no counted command for
	// 300 ms, and once what it had to delete is gone (checked with HLEN,
	// a command the gateway does not use and the count leaves out).
	quiet := func() {
		t.Helper()
		sum := func() (n int64) {
			for _, v := range commandStats(t, admin) {
				n += v
			}
			return n
		}
		last, since := sum(), time.Now()
		eventually(t, 10*time.Second, "Redis quiet for 300 ms", func() (bool, string) {
			if cur := sum(); cur != last {
				last, since = cur, time.Now()
			}
			return time.Since(since) >= 300*time.Millisecond, fmt.Sprint(last)
		})
	}
	routesGone := func(ps []*probe) {
		t.Helper()
		eventually(t, 10*time.Second, "routes removed", func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for _, p := range ps {
				if n, err := admin.HLen(ctx, "{"+c.prefix+":u:"+p.user+"}:routes").Result(); err != nil || n > 0 {
					return false, fmt.Sprint(p.user, n, err)
				}
			}
			return true, ""
		})
		quiet()
	}

	// Warm up: scripts loaded, pools filled.
	warm := dialAll(holder, users("warm", 3))
	for i, p := range warm {
		pub.mustPublish(t, toUser(p.user, "w"))
		a := pub.mustPublish(t, reliable(p.user, "w"))
		p.expect("w")
		p.expect("w")
		p.request(protocol.ClientFrame{Type: protocol.TypeAck, Seq: a.Seq})
		pub.mustCall(t, http.StatusNoContent, http.MethodPut, fmt.Sprintf("/api/v1/rooms/warm-%d/members/%s", i, p.user), nil)
		pub.mustPublish(t, toRoom(fmt.Sprintf("warm-%d", i), "w"))
		p.expect("w")
	}
	warm[0].Close()
	routesGone(warm[:1])

	join := func(room, user string) {
		pub.mustCall(t, http.StatusNoContent, http.MethodPut, "/api/v1/rooms/"+room+"/members/"+user, nil)
	}
	var conns []*probe
	connect := measure("connect (user in no room)", k, func() { conns = dialAll(holder, users("plain", k)) })

	// Users each in 2 rooms of their own: every connect declares interest.
	solo := users("solo", k)
	for _, u := range solo {
		join("a-"+u, u)
		join("b-"+u, u)
	}
	var soloConns []*probe
	connectSolo := measure("connect (user in 2 rooms, first local member of both)", k, func() { soloConns = dialAll(holder, solo) })

	// Users in 2 shared rooms, red and green, already declared on the node.
	shared := users("shared", k+1)
	for _, u := range shared {
		join("red", u)
		join("green", u)
	}
	sharedConns := dialAll(holder, shared[:1])
	sharedConns = append(sharedConns, dialAll(other, shared[1:2])...)
	measure("connect (user in 2 rooms the node has declared already)", k-1, func() {
		sharedConns = append(sharedConns, dialAll(other, shared[2:])...)
	})

	userPub := measure("publish to a user on another node", k, func() {
		for _, p := range conns {
			pub.mustPublish(t, toUser(p.user, "u"))
			p.expect("u")
		}
	})
	var seqs []int64
	relPub := measure("publish reliable to a user on another node", k, func() {
		for _, p := range conns {
			a := pub.mustPublish(t, reliable(p.user, "r"))
			p.expect("r")
			seqs = append(seqs, a.Seq)
		}
	})
	measure("ack (client frame)", k, func() {
		for i, p := range conns {
			p.request(protocol.ClientFrame{Type: protocol.TypeAck, Seq: seqs[i]})
		}
	})
	measure("publish reliable to an offline user", k, func() {
		for i := range k {
			pub.mustPublish(t, reliable(fmt.Sprintf("offline-%d", i), "r"))
		}
	})
	roomPub := measure("publish to a room (members on 2 other nodes)", k, func() {
		for range k {
			pub.mustPublish(t, toRoom("red", "red"))
			for _, p := range sharedConns {
				p.expect("red")
			}
		}
	})
	everyone := append(append(append(append([]*probe(nil), conns...), soloConns...), sharedConns...), warm[1:]...)
	broadcast := measure("broadcast (3 nodes)", k, func() {
		for range k {
			pub.mustPublish(t, toAll("all"))
			for _, p := range everyone {
				p.expect("all")
			}
		}
	})
	// The member's node declares its interest in the room itself too,
	// after the membership envelope.
	joined := conns[:k/2]
	measure("join (API) of a user online on another node", len(joined), func() {
		for _, p := range joined {
			join("blue-"+p.user, p.user)
		}
		quiet()
	})
	disconnect := func(name string, ps []*probe) costRow {
		t.Helper()
		return measure(name, len(ps), func() {
			for _, p := range ps {
				p.Close()
			}
			routesGone(ps)
		})
	}
	plainGone := disconnect("disconnect (user in no room)", conns[k/2:])
	disconnect("disconnect (user in 2 rooms of its own: interest dropped)", soloConns)
	disconnect("disconnect (user in 2 shared rooms, other members stay)", sharedConns[2:])

	// Heartbeats: one node every 250 ms, routes refreshed every 500 ms
	// (route TTL / 3), with N connections.
	for _, g := range n {
		g.Kill()
	}
	hb := newCluster(t, srv.URL(), map[string]string{"WSGATE_HEARTBEAT_INTERVAL": "250ms", "WSGATE_ROUTE_TTL": "1500ms"})
	b1 := hb.startNode("b1", nil)
	window := func(conns int) (h, r float64, cmds map[string]int64) {
		t.Helper()
		// read gives the node's counts of heartbeats, route refreshes and
		// safety-net catch-up checks (one GET per local user, every 30 s:
		// a window with one in it is measured again).
		read := func() (float64, float64, float64) {
			m, err := b1.metrics()
			if err != nil {
				t.Fatal(err)
			}
			return m[`wsgate_backend_latency_seconds_count{op="heartbeat"}`], m[`wsgate_backend_latency_seconds_count{op="route"}`],
				m[`wsgate_backend_latency_seconds_count{op="last_seqs"}`]
		}
		for attempt := 0; ; attempt++ {
			h0, r0, l0 := read()
			resetStats(t, admin)
			if h, r, l := read(); h != h0 || r != r0 || l != l0 {
				continue // a heartbeat ran across the reset
			}
			var h1, r1, l1 float64
			eventually(t, 10*time.Second, "12 heartbeats", func() (bool, string) {
				h1, r1, l1 = read()
				return h1 >= h0+12, fmt.Sprint(h1 - h0)
			})
			cmds = commandStats(t, admin)
			if h2, r2, l2 := read(); h2 != h1 || r2 != r1 || l2 != l1 || l1 != l0 {
				if attempt < 5 {
					continue // one ran across the end, or a catch-up check in the window
				}
			}
			rows = append(rows, costRow{name: fmt.Sprintf("heartbeat period, %d connections", conns), ops: int(h1 - h0), calls: cmds})
			return h1 - h0, r1 - r0, cmds
		}
	}
	sum := func(m map[string]int64) float64 {
		var s int64
		for _, v := range m {
			s += v
		}
		return float64(s)
	}
	h0, _, idle := window(0)
	perHeartbeat := sum(idle) / h0
	var connCount int
	for _, add := range []int{100, 200} {
		for i := range add {
			dial(t, b1, fmt.Sprintf("hb-%d-%d", connCount, i), nil)
		}
		connCount += add
		h, r, cmds := window(connCount)
		// What the connections added to the window, per connection.
		perConn := (sum(cmds) - h*perHeartbeat) / float64(connCount)
		// If each refresh costs HSET + PEXPIRE per connection, this is a
		// whole number of refreshes (the node's own count of refreshes may
		// be off by one at the window's edges).
		implied := perConn / 2
		t.Logf("%d connections: %.0f heartbeats, %.0f route refreshes counted by the node, %.2f commands per connection "+
			"= %.2f refreshes x 2; %.2f per connection per heartbeat", connCount, h, r, perConn, implied, perConn/h)
		if frac := implied - float64(int(implied+0.5)); frac > 0.1 || frac < -0.1 || int(implied+0.5) < int(r)-1 || int(implied+0.5) > int(r)+1 {
			t.Errorf("%d connections: %.2f commands per connection in %.0f route refreshes, want 2 per refresh (HSET + PEXPIRE)", connCount, perConn, r)
		}
		if perConn/h > 1.5 {
			t.Errorf("%d connections: %.2f commands per connection per heartbeat: routes are written every heartbeat, not every route TTL / 3", connCount, perConn/h)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "Redis commands per operation (INFO commandstats; a script = EVALSHA + the commands it runs):\n")
	fmt.Fprintf(&b, "%-62s %5s %8s  %s\n", "operation", "ops", "cmds/op", "per command")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-62s %5d %8.2f  %s\n", r.name, r.ops, r.total(), r.breakdown())
	}
	t.Log("\n" + b.String())

	// Counts and ratios.
	expect := func(what string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %v per operation, want %v", what, got, want)
		}
	}
	expect("connect: route and device written (HSET)", connect.per("hset"), 2)
	expect("connect: inbox read (EVALSHA)", connect.per("evalsha"), 1)
	expect("connect declaring 2 rooms: room interest (HSET)", connectSolo.per("hset")-connect.per("hset"), 2)
	expect("disconnect: route removed (HDEL)", plainGone.per("hdel"), 1)
	if connect.total() > 15 {
		t.Errorf("connect costs %.1f commands, want at most 15", connect.total())
	}
	expect("user publish: PUBLISH", userPub.per("publish"), 1)
	expect("user publish: route read (HGETALL)", userPub.per("hgetall"), 1)
	if userPub.total() != 2 {
		t.Errorf("user publish costs %.1f commands, want 2 (HGETALL + PUBLISH)", userPub.total())
	}
	expect("reliable publish: PUBLISH", relPub.per("publish"), 1)
	expect("reliable publish: one script (EVALSHA)", relPub.per("evalsha"), 1)
	expect("room publish: one room read (HGETALL)", roomPub.per("hgetall"), 1)
	expect("room publish: one PUBLISH per node with members", roomPub.per("publish"), 2)
	expect("broadcast: PUBLISH", broadcast.per("publish"), 1)
	if broadcast.total() != 1 {
		t.Errorf("broadcast costs %.1f commands, want 1 PUBLISH whatever the node count", broadcast.total())
	}
	// The heartbeat (record write and lost-data check) and the node list
	// read that watches for dead nodes (their routes stop counting, and
	// local connections catch up when one dies).
	if perHeartbeat > 9 {
		t.Errorf("an idle node costs %.1f commands per heartbeat, want at most 9", perHeartbeat)
	}
}

package e2e

// Issue "Many nodes act as one", targeted bus: a message wakes only the
// nodes that hold its target, proven by each node's count of bus message
// envelopes (wsgate_bus_received_total{kind="message"}).

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// busCounter measures the bus envelopes each node receives during an
// action.
type busCounter struct {
	t        *testing.T
	nodes    []*gateway
	watchers []*probe // one per node
	probes   []*probe // every connection: each gets the barrier broadcasts
	round    int
	cluster  *gwCluster
	redis    *redistest.Server
}

func (b *busCounter) counts() []int {
	out := make([]int, len(b.nodes))
	for i, g := range b.nodes {
		out[i] = int(g.metric(b.t, busMessages))
	}
	return out
}

// measure runs action (publishes through nodes[via]) and returns how many
// bus message envelopes each node received because of it. The end is a
// broadcast through the same node: Redis keeps one publisher's messages in
// order, so once a node delivered the broadcast it has received every
// envelope the action sent it. The publishing node never sends itself an
// envelope for a targeted message; its count is read once its own
// broadcast came back.
func (b *busCounter) measure(via int, action func()) []int {
	b.t.Helper()
	before := b.counts()
	action()
	b.round++
	ev := fmt.Sprintf("bus-barrier-%d", b.round)
	b.nodes[via].mustPublish(b.t, toAll(ev))
	for _, p := range b.probes {
		if !p.isClosed() {
			p.expect(ev)
		}
	}
	eventually(b.t, 5*time.Second, "the publishing node receives its broadcast", func() (bool, string) {
		c := b.counts()
		return c[via] > before[via], fmt.Sprint(c)
	})
	after := b.counts()
	d := make([]int, len(after))
	for i := range after {
		d[i] = after[i] - before[i] - 1 // the barrier reached every node
	}
	return d
}

// startCounted starts four nodes on their own Redis, each with a watcher
// connection (user <prefix>watcher-N) that receives the barriers.
func startCounted(t *testing.T, prefix string) ([]*gateway, *busCounter) {
	srv := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, srv.URL(), nil)
	n := c.startNodes("n", 4, nil)
	b := &busCounter{t: t, nodes: n, cluster: c, redis: srv}
	for i, g := range n {
		b.watchers = append(b.watchers, dial(t, g, fmt.Sprintf("%swatcher-%d", prefix, i+1), nil))
	}
	b.probes = append(b.probes, b.watchers...)
	return n, b
}

// conn opens a probe for user on g, checked by every measure.
func (b *busCounter) conn(g *gateway, user string) *probe {
	p := dial(b.t, g, user, nil)
	b.probes = append(b.probes, p)
	return p
}

func TestTargetedBus(t *testing.T) {
	t.Parallel()
	n, b := startCounted(t, "")
	c, srv, conn := b.cluster, b.redis, b.conn
	check := func(what string, got, want []int) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: bus message envelopes received per node n1..n4 = %v, want %v", what, got, want)
		} else {
			t.Logf("%s: envelopes per node n1..n4 = %v", what, got)
		}
	}

	// A user connected only on n2.
	u2 := conn(n[1], "only-on-n2")
	check("5 user publishes via n1 to a user on n2", b.measure(0, func() {
		for i := range 5 {
			ev := fmt.Sprintf("u2-%d", i)
			n[0].mustPublish(t, toUser("only-on-n2", ev))
			u2.expect(ev)
		}
	}), []int{0, 5, 0, 0})
	check("reliable publish via n4 to a user on n2", b.measure(3, func() {
		p := toUser("only-on-n2", "u2-reliable")
		p.Reliable = true
		n[3].mustPublish(t, p)
		u2.expect("u2-reliable")
	}), []int{0, 1, 0, 0})
	check("publish via n2 to its own user", b.measure(1, func() {
		n[1].mustPublish(t, toUser("only-on-n2", "u2-local"))
		u2.expect("u2-local")
	}), []int{0, 0, 0, 0})
	check("publish via n1 to an offline user", b.measure(0, func() {
		n[0].mustPublish(t, toUser("offline-user", "nobody"))
	}), []int{0, 0, 0, 0})

	// A user on n2 and n3.
	u23a, u23b := conn(n[1], "on-n2-n3"), conn(n[2], "on-n2-n3")
	check("publish via n1 to a user on n2 and n3", b.measure(0, func() {
		n[0].mustPublish(t, toUser("on-n2-n3", "u23"))
		u23a.expect("u23")
		u23b.expect("u23")
	}), []int{0, 1, 1, 0})

	// A room with members online on n2 and n3, one offline member and one
	// whose only connection (on n4) closed.
	m2, m3 := conn(n[1], "member-n2"), conn(n[2], "member-n3")
	gone := conn(n[3], "member-gone")
	for _, u := range []string{"member-n2", "member-n3", "member-offline", "member-gone"} {
		n[0].mustCall(t, http.StatusNoContent, http.MethodPut, "/api/v1/rooms/blue/members/"+u, nil)
	}
	// n4 declared interest in the room when member-gone joined; its close
	// must withdraw it. Read the room's interest hash directly: an entry
	// is gone when deleted or expired (readers skip expired entries).
	gone.Close()
	interest := "{" + c.prefix + ":r:blue}:nodes"
	closed := time.Now()
	expired := false
	eventually(t, 5*time.Second, "n4 withdraws its interest in room blue", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		h, err := srv.Client().HGetAll(ctx, interest).Result()
		v, has := h["n4"]
		exp, _ := strconv.ParseInt(v, 10, 64)
		expired = has && exp <= time.Now().UnixMilli()
		return err == nil && (!has || expired), fmt.Sprint(h, err)
	})
	if expired {
		// The join's membership envelope made n4 declare its interest
		// after the close had withdrawn it (see TestRoomsSurviveQuickReconnect
		// for the same race the other way round).
		t.Logf("n4's interest in room blue was not withdrawn; it expired %s after the member's close", time.Since(closed).Round(time.Millisecond))
	}
	check("room publish via n1 (members on n2, n3)", b.measure(0, func() {
		n[0].mustPublish(t, toRoom("blue", "blue-1"))
		m2.expect("blue-1")
		m3.expect("blue-1")
	}), []int{0, 1, 1, 0})
	check("room publish via n3 (members on n2 and n3 itself)", b.measure(2, func() {
		n[2].mustPublish(t, toRoom("blue", "blue-2"))
		m2.expect("blue-2")
		m3.expect("blue-2")
	}), []int{0, 1, 0, 0})
	check("room publish via n1 to a room without members online", b.measure(0, func() {
		n[0].mustCall(t, http.StatusNoContent, http.MethodPut, "/api/v1/rooms/empty/members/member-offline", nil)
		n[0].mustPublish(t, toRoom("empty", "nobody"))
	}), []int{0, 0, 0, 0})

	// A broadcast wakes every node (the publishing one through its own
	// subscription, which it then ignores).
	check("2 broadcasts via n2", b.measure(1, func() {
		n[1].mustPublish(t, toAll("all-1"))
		n[1].mustPublish(t, toAll("all-2"))
		for _, p := range b.probes {
			if p.isClosed() {
				continue
			}
			p.expect("all-1")
			p.expect("all-2")
		}
	}), []int{2, 2, 2, 2})
}

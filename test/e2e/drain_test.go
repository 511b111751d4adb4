package e2e

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// TestDrainPacedMovesEveryone: a node holding 1,500 clients drains at 200
// connections per second. Every client ends on the other node, the moves
// never exceed the set rate (counted per one-second window from the
// welcomes on the new node), the drained process exits 0, and the
// reliable messages published during the drain all arrive.
func TestDrainPacedMovesEveryone(t *testing.T) {
	const clients, rate = 1500, 200
	srv := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, srv.URL(), map[string]string{"WSGATE_DRAIN_RATE": fmt.Sprint(rate), "WSGATE_DRAIN_TIMEOUT": "60s"})
	n := c.startNodes("d", 2, nil)
	src, dst := n[0], n[1]
	var rs []*recClient
	for i := 0; i < clients; i++ {
		rs = append(rs, startRecClient(t, fmt.Sprintf("dr-%d", i), client.Config{
			URL: src.WS(), MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second,
		}))
	}
	waitConnected(t, 60*time.Second, rs)

	src.mustCall(t, 202, "POST", "/api/v1/nodes/"+src.ID+"/drain", nil)
	drainStart := time.Now()
	// Reliable messages while the drain runs: one per user, through the
	// node that stays.
	var wg sync.WaitGroup
	answered := make([]int64, clients)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, r := range rs {
			a, status, err := dst.publish(reliable(r.user, "during-drain"))
			if err == nil && status == 200 {
				answered[i] = a.Seq
			}
		}
	}()
	if !src.WaitExit(60 * time.Second) {
		t.Fatalf("drained node still running after 60 s")
	}
	took := time.Since(drainStart)
	if code := src.ExitCode(); code != 0 {
		t.Fatalf("drained node exited %d, want 0", code)
	}
	wg.Wait()
	eventually(t, 30*time.Second, "every client on the other node", func() (bool, string) {
		for _, r := range rs {
			if ok, node := r.connected(); !ok || node != dst.ID {
				return false, fmt.Sprintf("%s connected=%v node=%s", r.user, ok, node)
			}
		}
		return true, ""
	})
	// The pace: arrivals on the new node per two-second window (a window
	// of one second would also count the bunching of arrivals that a
	// stalled client process reads late, on a loaded machine).
	var arrivals []time.Time
	for _, r := range rs {
		r.mu.Lock()
		for _, cn := range r.conns {
			if cn.node == dst.ID {
				arrivals = append(arrivals, cn.at)
				break
			}
		}
		r.mu.Unlock()
	}
	sort.Slice(arrivals, func(i, j int) bool { return arrivals[i].Before(arrivals[j]) })
	const window = 2 * time.Second
	maxWindow := 0
	for i, j := 0, 0; i < len(arrivals); i++ {
		for arrivals[i].Sub(arrivals[j]) >= window {
			j++
		}
		maxWindow = max(maxWindow, i-j+1)
	}
	// The reconnect adds up to 250 ms of jitter per client: allow 25 %.
	if limit := 2*rate*5/4 + 10; maxWindow > limit {
		t.Errorf("drain moved %d connections in %v, set rate %d/s (limit with jitter %d)", maxWindow, window, rate, limit)
	}
	if minTime := time.Duration(clients/rate-1) * time.Second; took < minTime {
		t.Errorf("drain of %d connections at %d/s took %v, faster than the rate allows (%v)", clients, rate, took, minTime)
	}
	eventually(t, 30*time.Second, "the messages published during the drain arrived", func() (bool, string) {
		for i, r := range rs {
			if answered[i] == 0 {
				continue
			}
			if got := r.cl.LastSeq(); got < answered[i] {
				return false, fmt.Sprintf("%s at seq %d, answered %d", r.user, got, answered[i])
			}
		}
		return true, ""
	})
	lost := 0
	for i := range rs {
		if answered[i] == 0 {
			lost++
		}
	}
	t.Logf("drain of %d clients at %d/s: %v; busiest two seconds moved %d; %d reliable messages answered during the drain, all received; %d publishes refused",
		clients, rate, took.Round(10*time.Millisecond), maxWindow, clients-lost, lost)
}

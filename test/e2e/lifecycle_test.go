package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// A gateway started with WSGATE_WARMUP serves the clients sent to it while
// it warms up (its /readyz is 503 meanwhile), with a weight that rises,
// and is active with weight 100 at the end.
func TestWarmingGatewayServesClients(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, srv.URL(), nil)
	c.startNode("a1", nil)
	ready := make(chan *gateway, 1)
	go func() { ready <- c.startNodeNoFatal("w1", map[string]string{"WSGATE_WARMUP": "6s"}) }() // returns once ready
	var w *gateway
	eventually(t, 15*time.Second, "w1 started", func() (bool, string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, g := range c.nodes {
			if g.ID == "w1" {
				w = g
			}
		}
		return w != nil, ""
	})
	entry := func() nodeEntry {
		ns, err := w.nodes()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ns {
			if x.ID == "w1" {
				return x
			}
		}
		return nodeEntry{}
	}
	eventually(t, 15*time.Second, "w1 listed", func() (bool, string) { e := entry(); return e.ID != "", e.Status })
	if e := entry(); e.Status != "warming" {
		t.Fatalf("w1 %+v at start, want warming", e)
	}
	p := dial(t, w, "early", nil) // refused with 503 before the fix
	if p.node != "w1" {
		t.Fatalf("welcome from %s", p.node)
	}
	if st := w.readyStatus(); st != http.StatusServiceUnavailable && entry().Status == "warming" {
		t.Fatalf("/readyz %d while warming, want 503", st)
	}
	w.mustPublish(t, toUser("early", "hello"))
	if f := p.expect("hello"); f == nil {
		t.Fatal("no message on the connection opened while warming")
	}
	var weights []int
	for e := entry(); e.Status == "warming"; e = entry() {
		if len(weights) == 0 || weights[len(weights)-1] != e.Weight {
			weights = append(weights, e.Weight)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case g := <-ready:
		if g == nil {
			t.Fatal("w1 did not become ready")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("w1 not ready after its warm-up")
	}
	if e := entry(); e.Status != "active" || e.Weight != 100 {
		t.Fatalf("w1 %+v after warm-up, want active with weight 100", e)
	}
	for i := 1; i < len(weights); i++ {
		if weights[i] < weights[i-1] {
			t.Fatalf("weights while warming %v: not rising", weights)
		}
	}
	if len(weights) < 2 {
		t.Fatalf("weights while warming %v: want a ramp", weights)
	}
	if p.isClosed() {
		t.Fatal("the connection opened while warming was closed")
	}
}

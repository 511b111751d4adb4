package downstream

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeGateway is the handler of the tests: a gateway that stores each
// idempotency key's message once (as the real one does) and records, per
// target, the jobs in the order it published them.
type fakeGateway struct {
	mu      sync.Mutex
	stored  map[string]int   // key -> job stored under it
	tries   map[string]int   // key -> handler calls
	order   map[string][]int // target id -> jobs in publish order
	by      map[string]int   // node -> records it published
	held    int              // calls in progress
	maxHeld int

	// unavailable answers 503 for a record while it returns true.
	unavailable func(r Record) bool
	// afterStore runs once the message is stored, before the answer
	// (a test blocks it to stand for a crash between publish and ack).
	afterStore func(ctx context.Context, node string, r Record)
	calls      atomic.Int64
	changed    chan struct{} // a message was stored
}

func newFakeGateway() *fakeGateway {
	return &fakeGateway{stored: map[string]int{}, tries: map[string]int{}, order: map[string][]int{}, by: map[string]int{}, changed: make(chan struct{}, 1)}
}

// body is a publish body with data.job.
func body(user string, job int) []byte {
	b, _ := json.Marshal(map[string]any{"target": map[string]string{"type": "user", "id": user}, "event": "ds", "data": map[string]int{"job": job}, "reliable": true})
	return b
}

func (g *fakeGateway) handler(node string) Handler {
	return func(ctx context.Context, r Record) Outcome {
		g.calls.Add(1)
		var v struct {
			Target struct{ Type, ID string }
			Data   struct{ Job *int }
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || v.Target.Type != "user" || v.Data.Job == nil {
			return Outcome{Dead: []DeadLetter{{Error: ErrorBody{Code: "bad_request", Message: "not a test publish"}, Record: r.Value, ID: r.ID}}}
		}
		if g.unavailable != nil && g.unavailable(r) {
			return Outcome{Retry: true, Err: "backend unavailable (test)"}
		}
		g.mu.Lock()
		g.tries[r.Key]++
		g.held++
		g.maxHeld = max(g.maxHeld, g.held)
		if _, ok := g.stored[r.Key]; !ok {
			g.stored[r.Key] = *v.Data.Job
			g.order[v.Target.ID] = append(g.order[v.Target.ID], *v.Data.Job)
			g.by[node]++
		}
		g.mu.Unlock()
		select {
		case g.changed <- struct{}{}:
		default:
		}
		if g.afterStore != nil {
			g.afterStore(ctx, node, r)
		}
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
		if ctx.Err() != nil {
			return Outcome{Retry: true, Err: "ended"}
		}
		return Outcome{}
	}
}

// storedCount is how many distinct messages were stored.
func (g *fakeGateway) storedCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.stored)
}

// await waits until cond holds, re-checking each time a message is
// stored and at least every 50 ms (conditions on the source itself, such
// as its pending list, change without a store).
func await(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (%s)", what, d, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkOrder fails unless every target's jobs were published in the order
// produced (increasing) and want jobs were stored once each.
func (g *fakeGateway) checkOrder(t *testing.T, want int) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[int]bool{}
	for user, jobs := range g.order {
		for i, j := range jobs {
			if seen[j] {
				t.Errorf("job %d published twice", j)
			}
			seen[j] = true
			if i > 0 && jobs[i-1] > j {
				t.Errorf("target %s: job %d published after job %d (source order broken): %v", user, j, jobs[i-1], jobs[max(0, i-5):min(len(jobs), i+5)])
				return
			}
		}
	}
	if len(seen) != want {
		t.Errorf("%d jobs published, want %d", len(seen), want)
	}
}

func (g *fakeGateway) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprintf("stored %d, per node %v", len(g.stored), g.by)
}

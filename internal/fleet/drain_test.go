package fleet

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// fakeNode holds connections 0..n-1; a redirected or closed one is gone
// at once. Every Redirect and Targets call is recorded with the step
// (the tick, 0 before the first) it came in.
type fakeNode struct {
	mu         sync.Mutex
	open       []int
	step       int
	redirects  map[int]int // step -> redirects in it
	targetsAt  []int       // steps at which the targets were read
	closedRest []int
	clock      time.Time
	started    bool
}

func newFakeNode(n int) *fakeNode {
	f := &fakeNode{redirects: map[int]int{}, clock: time.Unix(1000, 0)}
	for i := range n {
		f.open = append(f.open, i)
	}
	return f
}

func (f *fakeNode) Open() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started {
		f.step++
		f.clock = f.clock.Add(drainTick)
	}
	f.started = true
	return slices.Clone(f.open)
}
func (f *fakeNode) Held() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.open) }
func (f *fakeNode) Targets() []cluster.NodeInfo {
	f.targetsAt = append(f.targetsAt, f.step)
	return []cluster.NodeInfo{{ID: "other"}}
}

func (f *fakeNode) Redirect(c int, targets []cluster.NodeInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(targets) != 1 {
		panic("no targets")
	}
	f.redirects[f.step]++
	f.open = slices.DeleteFunc(f.open, func(x int) bool { return x == c })
}

func (f *fakeNode) CloseRest(conns []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closedRest = conns
	f.open = nil
}

func (f *fakeNode) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.clock }

// run drains f. Its ticks are always there (a closed channel): each
// step of the drain's loop starts with Open, which moves the fake's
// clock by a tick (after the first) and its step by one.
func (f *fakeNode) run(t *testing.T, o DrainOptions) (int, bool) {
	t.Helper()
	ticks := make(chan time.Time)
	close(ticks)
	o.Ticks, o.Now, o.Log = ticks, f.now, slog.New(slog.DiscardHandler)
	return Drain[int](context.Background(), f, o)
}

// At 100 connections a second a drain hands out 5 a tick, from the
// first step on; unused budget does not pile up.
func TestDrainPacesTheRedirects(t *testing.T) {
	f := newFakeNode(23)
	n, ok := f.run(t, DrainOptions{Rate: 100, Timeout: time.Minute})
	if !ok || n != 23 {
		t.Fatalf("Drain = %d, %v; want 23, true", n, ok)
	}
	want := map[int]int{0: 5, 1: 5, 2: 5, 3: 5, 4: 3}
	if !maps(f.redirects, want) {
		t.Fatalf("redirects per tick %v, want %v", f.redirects, want)
	}
	if f.closedRest != nil {
		t.Fatalf("closed at the timeout: %v", f.closedRest)
	}
}

// Below one a tick the budget builds up: at 2 a second, one every 10
// ticks (500 ms).
func TestDrainSlowRate(t *testing.T) {
	f := newFakeNode(3)
	if n, ok := f.run(t, DrainOptions{Rate: 2, Timeout: time.Minute}); !ok || n != 3 {
		t.Fatalf("Drain = %d, %v", n, ok)
	}
	var steps []int
	for s := range f.redirects {
		steps = append(steps, s)
	}
	slices.Sort(steps)
	// Budget 0.1 a tick, capped at 1: it first reaches 1 after 10 ticks
	// (float sums may take one more).
	if len(steps) != 3 || steps[1]-steps[0] < 9 || steps[1]-steps[0] > 11 || steps[2]-steps[1] < 9 || steps[2]-steps[1] > 11 {
		t.Fatalf("redirects at steps %v, want one about every 10 ticks", steps)
	}
	// Targets are read again once a second has passed, not every tick.
	if len(f.targetsAt) < 2 || len(f.targetsAt) > 3 {
		t.Fatalf("targets read at steps %v over %d steps: want about once a second", f.targetsAt, f.step)
	}
}

// Rate 0: everything at once. At the timeout the rest are closed.
func TestDrainAllAtOnceAndTimeout(t *testing.T) {
	f := newFakeNode(50)
	if n, ok := f.run(t, DrainOptions{Rate: 0, Timeout: time.Minute}); !ok || n != 50 || f.redirects[0] != 50 {
		t.Fatalf("rate 0: Drain = %d, %v, redirects %v", n, ok, f.redirects)
	}
	f = newFakeNode(10)
	n, ok := f.run(t, DrainOptions{Rate: 20, Timeout: 200 * time.Millisecond}) // one a tick, 4 ticks
	if !ok || n >= 10 || len(f.closedRest) != 10-n || n < 4 || n > 5 {
		t.Fatalf("timeout: %d redirected, rest closed %v", n, f.closedRest)
	}
}

// A node shutting down (its context ends) stops the drain.
func TestDrainStopsWithTheContext(t *testing.T) {
	f := newFakeNode(10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n, ok := Drain[int](ctx, f, DrainOptions{Rate: 100, Timeout: time.Minute, Log: slog.New(slog.DiscardHandler), Ticks: make(chan time.Time), Now: f.now})
	if ok || n != 5 {
		t.Fatalf("Drain with its context ended = %d, %v; want 5 (the first step's), false", n, ok)
	}
}

func maps(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

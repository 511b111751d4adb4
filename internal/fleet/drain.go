package fleet

import (
	"context"
	"log/slog"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// Drainee is what a drain moves: a node's connections (of type C).
type Drainee[C any] interface {
	// Open lists the connections not yet closing.
	Open() []C
	// Held counts the connections the node still holds, closing ones
	// included: the drain ends when none is left.
	Held() int
	// Targets lists the nodes that may take the connections (read again
	// at most once a second).
	Targets() []cluster.NodeInfo
	// Redirect sends c to one of targets (or closes it when none may
	// take it).
	Redirect(c C, targets []cluster.NodeInfo)
	// CloseRest closes what is left at the drain's timeout, and waits a
	// moment for it to go.
	CloseRest(conns []C)
}

// DrainOptions pace a drain (contract §7).
type DrainOptions struct {
	Rate    float64       // connections redirected per second; <= 0: all at once
	Timeout time.Duration // then the rest are closed
	Log     *slog.Logger
	// Remaining reports the connections left (a gauge), nil for none.
	Remaining func(int)

	// For tests: the ticks that pace the drain (nil: every 50 ms) and
	// the clock (nil: time.Now).
	Ticks <-chan time.Time
	Now   func() time.Time
}

// drainTick is how often a drain hands out its budget.
const drainTick = 50 * time.Millisecond

// Drain redirects d's connections at o.Rate per second until none is
// left, and closes the rest at o.Timeout. It returns how many it
// redirected, and false if ctx ended first.
func Drain[C any](ctx context.Context, d Drainee[C], o DrainOptions) (redirected int, done bool) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	ticks := o.Ticks
	if ticks == nil {
		t := time.NewTicker(drainTick)
		defer t.Stop()
		ticks = t.C
	}
	remaining := o.Remaining
	if remaining == nil {
		remaining = func(int) {}
	}
	deadline := now().Add(o.Timeout)
	perTick := o.Rate * drainTick.Seconds()
	budget := 0.0
	var targets []cluster.NodeInfo
	var lastTargets time.Time
	for {
		conns := d.Open()
		held := d.Held()
		remaining(held)
		if len(conns) == 0 && held == 0 {
			break
		}
		if now().After(deadline) {
			o.Log.Warn("drain timeout: closing the remaining connections", "remaining", len(conns))
			d.CloseRest(conns)
			break
		}
		if lastTargets.IsZero() || now().Sub(lastTargets) > time.Second {
			targets = d.Targets()
			lastTargets = now()
		}
		if o.Rate <= 0 {
			budget = float64(len(conns))
		} else {
			// What was not used does not pile up: a burst is at most
			// one tick's worth (or one connection).
			budget = min(budget+perTick, max(perTick, 1))
		}
		for len(conns) > 0 && budget >= 1 {
			d.Redirect(conns[0], targets)
			conns = conns[1:]
			budget--
			redirected++
		}
		select {
		case <-ticks:
		case <-ctx.Done():
			return redirected, false
		}
	}
	remaining(0)
	return redirected, true
}

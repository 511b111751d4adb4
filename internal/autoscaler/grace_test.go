package autoscaler_test

import (
	"context"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/autoscaler"
	"github.com/wsgate/wsgate/internal/cluster"
)

// A controller that starts on an idle 3-node cluster drains nothing
// during --startup-grace (counted from its first decision), decides
// every tick meanwhile, still scales out, and scales in at the first
// tick after the grace.
func TestStartupGraceHoldsScaleIn(t *testing.T) {
	clock := t0
	src := &fakeNodes{}
	act := &fakeActuator{}
	p := basePolicy()
	p.MinNodes, p.MaxNodes = 1, 4
	p.StartupGrace = 5 * time.Minute
	ctl, err := autoscaler.NewController(autoscaler.Options{
		Policy: p, Interval: 15 * time.Second, Nodes: src, Actuator: act,
		Now: func() time.Time { return clock },
	})
	if err != nil {
		t.Fatal(err)
	}
	fresh := func(n cluster.NodeInfo) cluster.NodeInfo { n.Heartbeat = clock.UnixMilli(); return n }
	idle := func() {
		src.set(nil, fresh(active("a", 1, 0.05)), fresh(active("b", 0, 0.05)), fresh(active("c", 2, 0.05)))
	}
	ctx := context.Background()

	reasons := map[string]int{}
	tick := func() autoscaler.Decision {
		d := ctl.Step(ctx)
		reasons[d.Reason]++
		clock = clock.Add(15 * time.Second)
		return d
	}
	// Ticks at 0, 15 s, ..., 4m45s: 20 decisions, all inside the grace.
	for range 20 {
		idle()
		if d := tick(); d.Action != autoscaler.ActionNone {
			t.Fatalf("at %s after the start: %s (%v), want no action during the grace", d.Time.Sub(t0), d.Action, d.Reasons)
		}
	}
	if reasons[autoscaler.ReasonStartupGrace] != 20 || len(act.took()) != 0 {
		t.Fatalf("decisions by reason %v, want 20 startup_grace and no actuator call", reasons)
	}
	// A scale-out is not held back by the grace.
	src.set(nil, fresh(active("a", 90, 0.1)), fresh(active("b", 90, 0.1)), fresh(active("c", 90, 0.1)))
	if d := ctl.Step(ctx); d.Action != autoscaler.ActionScaleOut {
		t.Fatalf("high load inside the grace: %+v, want a scale-out", d)
	}
	if c := act.took(); len(c) != 1 || c[0] != "out 4" {
		t.Fatalf("calls %q", c)
	}
}

// After the grace (and with no action in it) the first idle tick drains.
func TestStartupGraceEndsOnTime(t *testing.T) {
	clock := t0
	src := &fakeNodes{}
	act := &fakeActuator{}
	p := basePolicy()
	p.StartupGrace = time.Minute
	ctl, err := autoscaler.NewController(autoscaler.Options{
		Policy: p, Interval: 15 * time.Second, Nodes: src, Actuator: act,
		Now: func() time.Time { return clock },
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range 6 { // 0, 15, 30, 45, 60, 75 s
		src.set(nil, withBeat(active("a", 1, 0.05), clock), withBeat(active("b", 0, 0.05), clock), withBeat(active("c", 2, 0.05), clock))
		d := ctl.Step(context.Background())
		got = append(got, string(d.Action)+"/"+d.Reason)
		if i < 4 && d.Reason != autoscaler.ReasonStartupGrace {
			t.Errorf("tick %d (%s): %s, want startup_grace", i, clock.Sub(t0), got[i])
		}
		clock = clock.Add(15 * time.Second)
	}
	if got[4] != "scale_in/connections_low" {
		t.Fatalf("decisions %q: want the scale-in at the tick at 60 s, the grace's end", got)
	}
	if c := act.took(); len(c) != 1 || c[0] != "in b 2" {
		t.Fatalf("calls %q, want one drain of b (the least loaded)", c)
	}
}

func withBeat(n cluster.NodeInfo, at time.Time) cluster.NodeInfo {
	n.Heartbeat = at.UnixMilli()
	return n
}

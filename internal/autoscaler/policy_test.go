package autoscaler_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/autoscaler"
	"github.com/wsgate/wsgate/internal/cluster"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// basePolicy: capacity 100 per node, band [0.35, 0.75], CPU band
// [0.30, 0.80], 1 to 4 nodes, cooldown 1m.
func basePolicy() autoscaler.Policy {
	return autoscaler.Policy{
		MaxConnsPerNode: 100, ScaleOutAt: 0.75, ScaleInAt: 0.35, CPUOutAt: 0.80, CPUInAt: 0.30,
		MinNodes: 1, MaxNodes: 4, Cooldown: time.Minute, StaleAfter: 6 * time.Second, DrainWait: time.Minute,
	}
}

// nd is a node record with a fresh heartbeat (1 s old).
func nd(id string, st cluster.NodeStatus, conns int, cpu float64) cluster.NodeInfo {
	return cluster.NodeInfo{ID: id, URL: "ws://" + id + "/ws", APIURL: "http://" + id, Status: st,
		Weight: 100, Connections: conns, Load: cpu, Heartbeat: t0.Add(-time.Second).UnixMilli()}
}

func active(id string, conns int, cpu float64) cluster.NodeInfo {
	return nd(id, cluster.StatusActive, conns, cpu)
}

func stale(n cluster.NodeInfo) cluster.NodeInfo {
	n.Heartbeat = t0.Add(-7 * time.Second).UnixMilli()
	return n
}

func TestDecide(t *testing.T) {
	const (
		none = autoscaler.ActionNone
		out  = autoscaler.ActionScaleOut
		in   = autoscaler.ActionScaleIn
	)
	tests := []struct {
		name    string
		edit    func(p *autoscaler.Policy)
		nodes   []cluster.NodeInfo
		lastOut time.Duration // ago; 0 = never
		lastIn  time.Duration
		drain   *autoscaler.PendingDrain

		action  autoscaler.Action
		reason  string
		current int
		desired int
		drainID string
		ratio   float64
		text    string // a reason text must contain this
	}{
		{name: "empty cluster: start min nodes", nodes: nil,
			action: out, reason: autoscaler.ReasonBelowMin, current: 0, desired: 1, text: "fewer nodes than --min-nodes 1"},
		{name: "below min", edit: func(p *autoscaler.Policy) { p.MinNodes = 3 }, nodes: []cluster.NodeInfo{active("a", 10, 0.1)},
			action: out, reason: autoscaler.ReasonBelowMin, current: 1, desired: 3, ratio: 0.1},
		{name: "below min with load: enough for the load", edit: func(p *autoscaler.Policy) { p.MinNodes, p.MaxNodes = 2, 10 },
			nodes:  []cluster.NodeInfo{active("a", 150, 0.1)},
			action: out, reason: autoscaler.ReasonBelowMin, current: 1, desired: 3, ratio: 1.5},
		{name: "below min waits for the cooldown", edit: func(p *autoscaler.Policy) { p.MinNodes = 2 }, nodes: []cluster.NodeInfo{active("a", 10, 0.1)},
			lastOut: 10 * time.Second,
			action:  none, reason: autoscaler.ReasonCooldown, current: 1, desired: 2, text: "50s left"},
		{name: "within band", nodes: []cluster.NodeInfo{active("a", 50, 0.1), active("b", 50, 0.1)},
			action: none, reason: autoscaler.ReasonWithinBand, current: 2, desired: 2, ratio: 0.5, text: "no change"},
		{name: "exactly at scale-out-at is not above", nodes: []cluster.NodeInfo{active("a", 75, 0.1)},
			action: none, reason: autoscaler.ReasonWithinBand, current: 1, desired: 1, ratio: 0.75},
		{name: "connections high: one more node", nodes: []cluster.NodeInfo{active("a", 80, 0.1)},
			action: out, reason: autoscaler.ReasonConnsHigh, current: 1, desired: 2, ratio: 0.8, text: "above --scale-out-at 0.75"},
		{name: "connections high: enough nodes for the middle of the band", nodes: []cluster.NodeInfo{active("a", 100, 0.1), active("b", 100, 0.1)},
			action: out, reason: autoscaler.ReasonConnsHigh, current: 2, desired: 4, ratio: 1.0},
		{name: "scale-out clamped to max", edit: func(p *autoscaler.Policy) { p.MaxNodes = 3 },
			nodes:  []cluster.NodeInfo{active("a", 100, 0.1), active("b", 100, 0.1)},
			action: out, reason: autoscaler.ReasonConnsHigh, current: 2, desired: 3, text: "clamped to --max-nodes 3"},
		{name: "at max: no scale-out", nodes: []cluster.NodeInfo{active("a", 90, 0.1), active("b", 90, 0.1), active("c", 90, 0.1), active("d", 90, 0.1)},
			action: none, reason: autoscaler.ReasonAtMax, current: 4, desired: 4, ratio: 0.9, text: "already at --max-nodes 4"},
		{name: "cooldown after scale-out blocks scale-out", nodes: []cluster.NodeInfo{active("a", 90, 0.1)}, lastOut: 30 * time.Second,
			action: none, reason: autoscaler.ReasonCooldown, current: 1, desired: 2, text: "cooldown"},
		{name: "cooldown over", nodes: []cluster.NodeInfo{active("a", 90, 0.1)}, lastOut: 61 * time.Second,
			action: out, reason: autoscaler.ReasonConnsHigh, current: 1, desired: 2},
		{name: "a recent scale-in does not block a scale-out", nodes: []cluster.NodeInfo{active("a", 90, 0.1)}, lastIn: 10 * time.Second,
			action: out, reason: autoscaler.ReasonConnsHigh, current: 1, desired: 2},
		{name: "cpu high", nodes: []cluster.NodeInfo{active("a", 10, 0.9), active("b", 10, 0.9)},
			action: out, reason: autoscaler.ReasonCPUHigh, current: 2, desired: 4, text: "mean CPU 0.90 above --cpu-out-at 0.80"},
		{name: "cpu at the threshold is not above", nodes: []cluster.NodeInfo{active("a", 50, 0.8)},
			action: none, reason: autoscaler.ReasonWithinBand, current: 1, desired: 1},
		{name: "connections and cpu high: connections named", nodes: []cluster.NodeInfo{active("a", 90, 0.9)},
			action: out, reason: autoscaler.ReasonConnsHigh, current: 1, desired: 2, text: "mean CPU 0.90"},
		{name: "scale in: the least loaded active node", nodes: []cluster.NodeInfo{active("a", 10, 0.1), active("b", 5, 0.1), active("c", 20, 0.1)},
			action: in, reason: autoscaler.ReasonConnsLow, current: 3, desired: 2, drainID: "b", text: "least loaded"},
		{name: "scale in: ties broken by CPU then id", nodes: []cluster.NodeInfo{active("c", 5, 0.1), active("b", 5, 0.2), active("a", 5, 0.2)},
			action: in, reason: autoscaler.ReasonConnsLow, current: 3, desired: 2, drainID: "c"},
		{name: "scale in: ties broken by id", nodes: []cluster.NodeInfo{active("c", 5, 0.1), active("b", 5, 0.1)},
			action: in, reason: autoscaler.ReasonConnsLow, current: 2, desired: 1, drainID: "b"},
		{name: "scale in: warming nodes are not drained", nodes: []cluster.NodeInfo{nd("w", cluster.StatusWarming, 0, 0), active("a", 20, 0.1)},
			action: in, reason: autoscaler.ReasonConnsLow, current: 2, desired: 1, drainID: "a"},
		{name: "scale in: only warming nodes", nodes: []cluster.NodeInfo{nd("w", cluster.StatusWarming, 0, 0), nd("x", cluster.StatusWarming, 0, 0)},
			action: none, reason: autoscaler.ReasonNoDrainCandidate, current: 2, desired: 1},
		{name: "connections low but cpu not low", nodes: []cluster.NodeInfo{active("a", 10, 0.5), active("b", 10, 0.5)},
			action: none, reason: autoscaler.ReasonCPUNotLow, current: 2, desired: 2, text: "not below --cpu-in-at 0.30"},
		{name: "connections low at min nodes", nodes: []cluster.NodeInfo{active("a", 10, 0.1)},
			action: none, reason: autoscaler.ReasonAtMin, current: 1, desired: 1},
		{name: "scale in would overload the rest", edit: func(p *autoscaler.Policy) { p.ScaleInAt = 0.6 },
			nodes:  []cluster.NodeInfo{active("a", 50, 0.1), active("b", 50, 0.1)},
			action: none, reason: autoscaler.ReasonWouldOverload, current: 2, desired: 2, text: "would carry load 1.00"},
		{name: "scale in would overload the CPU of the rest", nodes: []cluster.NodeInfo{active("a", 10, 0.29), active("b", 10, 0.29), active("c", 10, 0.29), active("d", 10, 0.29)},
			edit:   func(p *autoscaler.Policy) { p.CPUOutAt = 0.35 },
			action: none, reason: autoscaler.ReasonWouldOverload, current: 4, desired: 4},
		{name: "scale in waits for the cooldown after a scale-out", nodes: []cluster.NodeInfo{active("a", 5, 0.1), active("b", 5, 0.1)}, lastOut: 30 * time.Second,
			action: none, reason: autoscaler.ReasonCooldown, current: 2, desired: 1},
		{name: "scale in waits for the cooldown after a scale-in", nodes: []cluster.NodeInfo{active("a", 5, 0.1), active("b", 5, 0.1)}, lastIn: 30 * time.Second,
			action: none, reason: autoscaler.ReasonCooldown, current: 2, desired: 1},
		{name: "one at a time: a draining node blocks the next scale-in",
			nodes:  []cluster.NodeInfo{active("a", 5, 0.1), active("b", 5, 0.1), nd("c", cluster.StatusDraining, 3, 0.1)},
			action: none, reason: autoscaler.ReasonDrainInProgress, current: 2, desired: 1, text: "one node at a time"},
		{name: "one at a time: a requested drain that has not started blocks",
			nodes: []cluster.NodeInfo{active("a", 5, 0.1), active("b", 5, 0.1), active("c", 0, 0.1)},
			drain: &autoscaler.PendingDrain{Node: "c", Since: t0.Add(-5 * time.Second)}, lastIn: 5 * time.Minute,
			action: none, reason: autoscaler.ReasonDrainInProgress, current: 3, desired: 2, text: "not draining yet"},
		{name: "one at a time: the drained node is gone, next scale-in",
			nodes: []cluster.NodeInfo{active("a", 5, 0.1), active("b", 6, 0.1)},
			drain: &autoscaler.PendingDrain{Node: "c", Since: t0.Add(-2 * time.Minute)}, lastIn: 2 * time.Minute,
			action: in, reason: autoscaler.ReasonConnsLow, current: 2, desired: 1, drainID: "a", text: "has left the cluster"},
		{name: "a drained node that went stale is gone",
			nodes: []cluster.NodeInfo{active("a", 5, 0.1), active("b", 6, 0.1), stale(nd("c", cluster.StatusDraining, 0, 0))},
			drain: &autoscaler.PendingDrain{Node: "c", Since: t0.Add(-2 * time.Minute)}, lastIn: 2 * time.Minute,
			action: in, reason: autoscaler.ReasonConnsLow, current: 2, desired: 1, drainID: "a"},
		{name: "a drain request that never took effect is given up",
			nodes: []cluster.NodeInfo{active("a", 5, 0.1), active("b", 6, 0.1)},
			drain: &autoscaler.PendingDrain{Node: "a", Since: t0.Add(-2 * time.Minute)}, lastIn: 2 * time.Minute,
			action: in, reason: autoscaler.ReasonConnsLow, current: 2, desired: 1, drainID: "a", text: "considered lost"},
		{name: "draining nodes are not capacity but their connections count",
			nodes:  []cluster.NodeInfo{active("a", 30, 0.1), nd("b", cluster.StatusDraining, 50, 0.1)},
			action: out, reason: autoscaler.ReasonConnsHigh, current: 1, desired: 2, ratio: 0.8, text: "draining (50 connections left)"},
		{name: "stale nodes are ignored",
			nodes:  []cluster.NodeInfo{active("a", 40, 0.1), active("b", 40, 0.1), stale(active("c", 500, 0.9))},
			action: none, reason: autoscaler.ReasonWithinBand, current: 2, desired: 2, ratio: 0.4, text: "node c not counted"},
		{name: "only stale nodes: start new ones", nodes: []cluster.NodeInfo{stale(active("a", 50, 0.1))},
			action: out, reason: autoscaler.ReasonBelowMin, current: 0, desired: 1},
		{name: "unknown status ignored", nodes: []cluster.NodeInfo{active("a", 50, 0.1), nd("z", "zombie", 90, 0.9)},
			action: none, reason: autoscaler.ReasonWithinBand, current: 1, desired: 1, ratio: 0.5, text: `unknown status "zombie"`},
		{name: "above max: scale in regardless of load", edit: func(p *autoscaler.Policy) { p.MaxNodes = 2 },
			nodes:  []cluster.NodeInfo{active("a", 90, 0.9), active("b", 80, 0.9), active("c", 95, 0.9)},
			action: in, reason: autoscaler.ReasonAboveMax, current: 3, desired: 2, drainID: "b"},
		{name: "above max still one at a time", edit: func(p *autoscaler.Policy) { p.MaxNodes = 1 },
			nodes:  []cluster.NodeInfo{active("a", 9, 0.1), active("b", 8, 0.1), nd("c", cluster.StatusDraining, 1, 0.1)},
			action: none, reason: autoscaler.ReasonDrainInProgress, current: 2, desired: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := basePolicy()
			if tt.edit != nil {
				tt.edit(&p)
			}
			s := autoscaler.State{Now: t0, Policy: p, Nodes: tt.nodes, Drain: tt.drain}
			if tt.lastOut > 0 {
				s.LastScaleOut = t0.Add(-tt.lastOut)
			}
			if tt.lastIn > 0 {
				s.LastScaleIn = t0.Add(-tt.lastIn)
			}
			d := autoscaler.Decide(s)
			text := strings.Join(d.Reasons, "\n")
			if d.Action != tt.action || d.Reason != tt.reason || d.Current != tt.current || d.Desired != tt.desired || d.Drain != tt.drainID {
				t.Fatalf("got action=%s reason=%s current=%d desired=%d drain=%q, want %s %s %d %d %q\nreasons:\n%s",
					d.Action, d.Reason, d.Current, d.Desired, d.Drain, tt.action, tt.reason, tt.current, tt.desired, tt.drainID, text)
			}
			if tt.ratio != 0 && (d.LoadRatio < tt.ratio-1e-9 || d.LoadRatio > tt.ratio+1e-9) {
				t.Errorf("load ratio %g, want %g", d.LoadRatio, tt.ratio)
			}
			if len(d.Reasons) < 2 {
				t.Errorf("want the counting line and at least one reason, got %q", d.Reasons)
			}
			if tt.text != "" && !strings.Contains(text, tt.text) {
				t.Errorf("reasons do not mention %q:\n%s", tt.text, text)
			}
			if (d.Action == autoscaler.ActionScaleIn) != (d.DrainNode != nil) {
				t.Errorf("DrainNode %v for action %s", d.DrainNode, d.Action)
			}
			if d.Desired < p.MinNodes && d.Reason != autoscaler.ReasonWithinBand && d.Action != none {
				t.Errorf("desired %d below min %d", d.Desired, p.MinNodes)
			}
			if d.Desired > p.MaxNodes && d.Action == out {
				t.Errorf("desired %d above max %d", d.Desired, p.MaxNodes)
			}
		})
	}
}

// TestDecideWalk walks the policy over a rising and
// falling load with a simulated fleet and checks the invariants: never
// outside [min, max], scale-ins one at a time with the previous node gone,
// and no two actions closer than the cooldown (scale-out after scale-out,
// anything before a scale-in).
func TestDecideWalk(t *testing.T) {
	p := basePolicy()
	p.MaxNodes = 5
	type node struct {
		id       string
		conns    int
		draining bool
	}
	fleet := []*node{{id: "n0"}}
	next := 1
	var lastOut, lastIn time.Time
	var pending *autoscaler.PendingDrain
	load := []int{10, 80, 150, 260, 390, 450, 450, 300, 120, 40, 10, 10, 10, 10, 10}
	now := t0
	outs, ins := 0, 0
	for step := range 300 {
		now = now.Add(10 * time.Second)
		want := load[min(step/20, len(load)-1)]
		// Spread the load over the serving nodes; draining nodes empty at once.
		var serving []*node
		for _, n := range fleet {
			if !n.draining {
				serving = append(serving, n)
			}
		}
		var kept []*node
		for _, n := range fleet {
			if !n.draining {
				n.conns = want / len(serving)
				kept = append(kept, n)
			}
		}
		fleet = kept
		var recs []cluster.NodeInfo
		for _, n := range fleet {
			r := active(n.id, n.conns, 0.1)
			r.Heartbeat = now.UnixMilli()
			recs = append(recs, r)
		}
		d := autoscaler.Decide(autoscaler.State{Now: now, Policy: p, Nodes: recs, LastScaleOut: lastOut, LastScaleIn: lastIn, Drain: pending})
		if d.DrainGone || d.DrainLost {
			pending = nil
		}
		switch d.Action {
		case autoscaler.ActionScaleOut:
			if !lastOut.IsZero() && now.Sub(lastOut) < p.Cooldown {
				t.Fatalf("step %d: scale-out %s after the last one", step, now.Sub(lastOut))
			}
			if d.Desired > p.MaxNodes {
				t.Fatalf("step %d: desired %d", step, d.Desired)
			}
			for len(fleet) < d.Desired {
				fleet = append(fleet, &node{id: "n" + strconv.Itoa(next)})
				next++
			}
			lastOut = now
			outs++
		case autoscaler.ActionScaleIn:
			if pending != nil {
				t.Fatalf("step %d: scale-in while %s drains", step, pending.Node)
			}
			last := lastOut
			if lastIn.After(last) {
				last = lastIn
			}
			if now.Sub(last) < p.Cooldown {
				t.Fatalf("step %d: scale-in %s after the last action", step, now.Sub(last))
			}
			if len(fleet) <= p.MinNodes {
				t.Fatalf("step %d: scale-in at %d nodes", step, len(fleet))
			}
			for _, n := range fleet {
				if n.id == d.Drain {
					n.draining = true
				}
			}
			pending = &autoscaler.PendingDrain{Node: d.Drain, Since: now}
			lastIn = now
			ins++
		}
	}
	if outs == 0 || ins == 0 {
		t.Fatalf("the walk should scale both ways: %d out, %d in", outs, ins)
	}
	if len(fleet) != p.MinNodes {
		t.Fatalf("the walk should end at %d node(s), has %d", p.MinNodes, len(fleet))
	}
}

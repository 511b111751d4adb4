package autoscaler

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/cluster"
)

// Policy holds the thresholds of the scaling decision (the autoscaler's
// settings, docs/autoscaler.md).
type Policy struct {
	MaxConnsPerNode int     // capacity of one node
	ScaleOutAt      float64 // load ratio above which a node is added
	ScaleInAt       float64 // load ratio below which a node may be removed
	CPUOutAt        float64 // mean node CPU (cores) above which a node is added
	CPUInAt         float64 // mean node CPU (cores) a removal needs to be below
	MinNodes        int
	MaxNodes        int
	// Cooldown is the least time after a scale-out before the next
	// scale-out, and after any action before a scale-in.
	Cooldown time.Duration
	// StartupGrace is the least time after the controller's start (its
	// first decision) before a scale-in: it remembers no earlier action,
	// and a node just started may not have reported its load yet.
	// Scale-outs are not held back.
	StartupGrace time.Duration
	// StaleAfter: a node whose heartbeat is older is not counted at all.
	StaleAfter time.Duration
	// DrainWait bounds how long a requested drain may take to show up in
	// the cluster (the node turning draining or leaving); after it the
	// request is considered lost and a scale-in may be decided again.
	DrainWait time.Duration
}

// Action is what a decision does.
type Action string

// Actions.
const (
	ActionNone     Action = "none"
	ActionScaleOut Action = "scale_out"
	ActionScaleIn  Action = "scale_in"
)

// Reason codes: the main reason of a decision, the `reason` label of
// wsgate_autoscaler_decisions_total. Decision.Reasons has the full text.
const (
	ReasonBelowMin         = "below_min_nodes"     // fewer nodes than --min-nodes
	ReasonAboveMax         = "above_max_nodes"     // more nodes than --max-nodes
	ReasonConnsHigh        = "connections_high"    // load ratio above --scale-out-at
	ReasonCPUHigh          = "cpu_high"            // mean CPU above --cpu-out-at
	ReasonConnsLow         = "connections_low"     // load ratio below --scale-in-at and CPU below --cpu-in-at
	ReasonWithinBand       = "within_band"         // nothing to do
	ReasonAtMax            = "at_max_nodes"        // would scale out, already at --max-nodes
	ReasonAtMin            = "at_min_nodes"        // would scale in, already at --min-nodes
	ReasonCPUNotLow        = "cpu_not_low"         // connections low, CPU not below --cpu-in-at
	ReasonCooldown         = "cooldown"            // would act, cooldown not over
	ReasonStartupGrace     = "startup_grace"       // would scale in, --startup-grace since the start not over
	ReasonDrainInProgress  = "drain_in_progress"   // would scale in, a node is still draining
	ReasonWouldOverload    = "scale_in_overload"   // removing a node would put the rest above the scale-out thresholds
	ReasonNoDrainCandidate = "no_drain_candidate"  // would scale in, no active node to drain
	ReasonBackendDown      = "backend_unavailable" // the node list could not be read
)

// PendingDrain is a scale-in this controller started: the node asked to
// drain, and when. It is pending until the node is gone from the cluster.
type PendingDrain struct {
	Node  string    `json:"node"`
	Since time.Time `json:"since"`
}

// State is everything Decide looks at.
type State struct {
	Now    time.Time
	Policy Policy
	Nodes  []cluster.NodeInfo // the cluster's node records, as read
	// Started is when the controller made its first decision (zero: now).
	Started time.Time
	// LastScaleOut and LastScaleIn are the times of the last successful
	// actions (zero: none yet).
	LastScaleOut time.Time
	LastScaleIn  time.Time
	// Drain is the drain this controller requested and still waits for.
	Drain *PendingDrain
}

// Decision is the outcome of Decide: what to do and why.
type Decision struct {
	Time    time.Time `json:"time"`
	Action  Action    `json:"action"`
	Reason  string    `json:"reason"`  // main reason code (metric label)
	Reasons []string  `json:"reasons"` // every consideration, as text
	// Current is the number of nodes counted as capacity (fresh active and
	// warming nodes); Desired the count the policy wants.
	Current int `json:"current_nodes"`
	Desired int `json:"desired_nodes"`
	// Drain is the node to drain for a scale-in.
	Drain     string             `json:"drain,omitempty"`
	DrainNode *cluster.NodeInfo  `json:"-"`
	Counted   []cluster.NodeInfo `json:"-"` // the fresh nodes (active, warming, draining)

	Connections int     `json:"connections"` // on fresh nodes, draining ones included
	Capacity    int     `json:"capacity"`    // Current x MaxConnsPerNode
	LoadRatio   float64 `json:"load_ratio"`  // Connections / Capacity
	CPU         float64 `json:"cpu"`         // mean CPU (cores) of the capacity nodes
	Active      int     `json:"active"`
	Warming     int     `json:"warming"`
	Draining    int     `json:"draining"`
	Stale       int     `json:"stale"`
	// DrainLost is set when the pending drain was given up (see
	// Policy.DrainWait); the controller then forgets it.
	DrainLost bool `json:"drain_lost,omitempty"`
	// DrainGone is set when the pending drain's node has left the cluster.
	DrainGone bool `json:"drain_gone,omitempty"`
}

// Decide is the scaling policy: a pure function of the cluster's node
// records, the settings, the times of the last actions and the pending
// drain. See docs/autoscaler.md for the rules in prose.
func Decide(s State) Decision {
	p := s.Policy
	d := Decision{Time: s.Now, Action: ActionNone}
	say := func(format string, a ...any) { d.Reasons = append(d.Reasons, fmt.Sprintf(format, a...)) }

	// Count: stale nodes are ignored; draining nodes are not capacity but
	// their connections are (they are moving to the others).
	var cpuSum float64
	pendingSeen := false
	for _, n := range s.Nodes {
		if allocator.Stale(n, s.Now, p.StaleAfter) {
			d.Stale++
			say("node %s not counted: heartbeat %s old (stale after %s)", n.ID, age(s.Now, n.Heartbeat), p.StaleAfter)
			continue
		}
		if s.Drain != nil && n.ID == s.Drain.Node {
			pendingSeen = true
		}
		switch n.Status {
		case cluster.StatusActive:
			d.Active++
		case cluster.StatusWarming:
			d.Warming++
		case cluster.StatusDraining:
			d.Draining++
			d.Connections += n.Connections
			d.Counted = append(d.Counted, n)
			say("node %s draining (%d connections left): not counted as capacity", n.ID, n.Connections)
			continue
		default:
			say("node %s has unknown status %q: not counted", n.ID, n.Status)
			continue
		}
		d.Connections += n.Connections
		cpuSum += n.Load
		d.Counted = append(d.Counted, n)
	}
	d.Current = d.Active + d.Warming
	d.Capacity = d.Current * p.MaxConnsPerNode
	if d.Current > 0 {
		d.LoadRatio = float64(d.Connections) / float64(d.Capacity)
		d.CPU = cpuSum / float64(d.Current)
	} else {
		// No capacity at all: the ratio as if there were one node, so that
		// it stays finite.
		d.LoadRatio = float64(d.Connections) / float64(p.MaxConnsPerNode)
	}
	d.Desired = d.Current
	say("%s counted (%d active, %d warming), %d draining, %d stale; %d connections of capacity %d (load %.2f), mean CPU %.2f",
		nodes(d.Current), d.Active, d.Warming, d.Draining, d.Stale, d.Connections, d.Capacity, d.LoadRatio, d.CPU)

	// The drain this controller asked for: done when the node is gone.
	drainBusy := d.Draining > 0
	if s.Drain != nil {
		switch {
		case !pendingSeen:
			d.DrainGone = true
			say("node %s, drained since %s, has left the cluster", s.Drain.Node, s.Drain.Since.Format(time.RFC3339))
		case isDraining(s.Nodes, s.Drain.Node):
			drainBusy = true
		case p.DrainWait > 0 && s.Now.Sub(s.Drain.Since) >= p.DrainWait:
			d.DrainLost = true
			say("node %s was asked to drain %s ago and is not draining: the request is considered lost",
				s.Drain.Node, s.Now.Sub(s.Drain.Since).Round(time.Second))
		default:
			drainBusy = true
			say("node %s was asked to drain %s ago and is not draining yet", s.Drain.Node, s.Now.Sub(s.Drain.Since).Round(time.Second))
		}
	}

	outWait := cooldownLeft(s.Now, p.Cooldown, s.LastScaleOut)
	inWait := max(outWait, cooldownLeft(s.Now, p.Cooldown, s.LastScaleIn))
	started := s.Started
	if started.IsZero() {
		started = s.Now
	}
	graceLeft := max(0, started.Add(p.StartupGrace).Sub(s.Now))

	// Nodes needed to bring the load to the middle of the band, so that
	// one scale-out does not land right under the next trigger.
	connsMid := float64(p.MaxConnsPerNode) * (p.ScaleOutAt + p.ScaleInAt) / 2
	cpuMid := (p.CPUOutAt + p.CPUInAt) / 2
	needConns := int(math.Ceil(float64(d.Connections) / connsMid))
	needCPU := 0
	if cpuMid > 0 {
		needCPU = int(math.Ceil(float64(d.Current) * d.CPU / cpuMid))
	}
	connsHigh := d.Current > 0 && d.LoadRatio > p.ScaleOutAt
	cpuHigh := d.Current > 0 && d.CPU > p.CPUOutAt

	scaleOut := func(reason string, want int) Decision {
		raw := max(want, d.Current+1, p.MinNodes)
		d.Desired = min(raw, p.MaxNodes)
		if raw > d.Desired {
			say("%s wanted, clamped to --max-nodes %d", nodes(raw), p.MaxNodes)
		}
		d.Reason = reason
		if outWait > 0 {
			d.Reason = ReasonCooldown
			say("scale-out to %d (%s) waits for the cooldown: %s left", d.Desired, reason, outWait.Round(time.Millisecond))
			return d
		}
		d.Action = ActionScaleOut
		say("scale out from %d to %s", d.Current, nodes(d.Desired))
		return d
	}
	scaleIn := func(reason string) Decision {
		d.Desired = d.Current - 1
		d.Reason = reason
		switch {
		case drainBusy:
			d.Reason = ReasonDrainInProgress
			say("scale-in (%s) waits: one node at a time, a drain is still in progress", reason)
			return d
		case graceLeft > 0:
			d.Reason = ReasonStartupGrace
			say("scale-in (%s) waits for the start-up grace (--startup-grace %s): %s left", reason, p.StartupGrace, graceLeft.Round(time.Millisecond))
			return d
		case inWait > 0:
			d.Reason = ReasonCooldown
			say("scale-in (%s) waits for the cooldown: %s left", reason, inWait.Round(time.Millisecond))
			return d
		}
		victim, ok := leastLoaded(s.Nodes, s.Now, p.StaleAfter)
		if !ok {
			d.Reason = ReasonNoDrainCandidate
			say("scale-in (%s) impossible: no active node to drain (warming nodes are not drained)", reason)
			return d
		}
		d.Action = ActionScaleIn
		d.Drain = victim.ID
		d.DrainNode = &victim
		conns := "connections"
		if victim.Connections == 1 {
			conns = "connection"
		}
		say("scale in from %d to %s: drain %s, the least loaded active node (%d %s)",
			d.Current, nodes(d.Desired), victim.ID, victim.Connections, conns)
		return d
	}

	switch {
	case d.Current < p.MinNodes:
		say("fewer nodes than --min-nodes %d", p.MinNodes)
		return scaleOut(ReasonBelowMin, max(p.MinNodes, needConns, needCPU))
	case d.Current > p.MaxNodes:
		say("more nodes than --max-nodes %d", p.MaxNodes)
		return scaleIn(ReasonAboveMax)
	case connsHigh || cpuHigh:
		reason := ReasonConnsHigh
		if connsHigh {
			say("load %.2f above --scale-out-at %.2f: %s would bring it to %.2f", d.LoadRatio, p.ScaleOutAt,
				nodes(max(needConns, 1)), float64(d.Connections)/float64(max(needConns, 1)*p.MaxConnsPerNode))
		}
		if cpuHigh {
			say("mean CPU %.2f above --cpu-out-at %.2f", d.CPU, p.CPUOutAt)
			if !connsHigh {
				reason = ReasonCPUHigh
			}
		}
		if d.Current >= p.MaxNodes {
			d.Reason = ReasonAtMax
			say("already at --max-nodes %d: no scale-out", p.MaxNodes)
			return d
		}
		want := d.Current + 1
		if connsHigh {
			want = max(want, needConns)
		}
		if cpuHigh {
			want = max(want, needCPU)
		}
		return scaleOut(reason, want)
	case d.LoadRatio < p.ScaleInAt:
		if d.CPU >= p.CPUInAt {
			d.Reason = ReasonCPUNotLow
			say("load %.2f below --scale-in-at %.2f but mean CPU %.2f not below --cpu-in-at %.2f: no scale-in",
				d.LoadRatio, p.ScaleInAt, d.CPU, p.CPUInAt)
			return d
		}
		if d.Current <= p.MinNodes {
			d.Reason = ReasonAtMin
			say("load %.2f below --scale-in-at %.2f, already at --min-nodes %d", d.LoadRatio, p.ScaleInAt, p.MinNodes)
			return d
		}
		after := float64(d.Connections) / float64((d.Current-1)*p.MaxConnsPerNode)
		cpuAfter := d.CPU * float64(d.Current) / float64(d.Current-1)
		if after > p.ScaleOutAt || cpuAfter > p.CPUOutAt {
			d.Reason = ReasonWouldOverload
			say("load %.2f below --scale-in-at %.2f, but %s would carry load %.2f / CPU %.2f, above the scale-out thresholds",
				d.LoadRatio, p.ScaleInAt, nodes(d.Current-1), after, cpuAfter)
			return d
		}
		say("load %.2f below --scale-in-at %.2f and mean CPU %.2f below --cpu-in-at %.2f; %s would carry load %.2f",
			d.LoadRatio, p.ScaleInAt, d.CPU, p.CPUInAt, nodes(d.Current-1), after)
		return scaleIn(ReasonConnsLow)
	}
	d.Reason = ReasonWithinBand
	say("load %.2f within [%.2f, %.2f], CPU %.2f below %.2f: no change", d.LoadRatio, p.ScaleInAt, p.ScaleOutAt, d.CPU, p.CPUOutAt)
	return d
}

// leastLoaded returns the fresh active node with the fewest connections
// (then the lowest CPU, then the lowest id, so that the choice is stable).
func leastLoaded(nodes []cluster.NodeInfo, now time.Time, staleAfter time.Duration) (cluster.NodeInfo, bool) {
	var cands []cluster.NodeInfo
	for _, n := range nodes {
		if n.Status == cluster.StatusActive && !allocator.Stale(n, now, staleAfter) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return cluster.NodeInfo{}, false
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.Connections != b.Connections {
			return a.Connections < b.Connections
		}
		if a.Load != b.Load {
			return a.Load < b.Load
		}
		return a.ID < b.ID
	})
	return cands[0], true
}

func isDraining(nodes []cluster.NodeInfo, id string) bool {
	for _, n := range nodes {
		if n.ID == id {
			return n.Status == cluster.StatusDraining
		}
	}
	return false
}

// cooldownLeft is how much of the cooldown after an action at last is
// left at now (0 when there was no action).
func cooldownLeft(now time.Time, cooldown time.Duration, last time.Time) time.Duration {
	if last.IsZero() {
		return 0
	}
	return max(0, last.Add(cooldown).Sub(now))
}

func age(now time.Time, unixMS int64) time.Duration {
	return (time.Duration(now.UnixMilli()-unixMS) * time.Millisecond).Round(100 * time.Millisecond)
}

// nodes is "1 node", "3 nodes".
func nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

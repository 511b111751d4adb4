package autoscaler

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// NodeSource reads the cluster's node records; cluster.Backend is one.
type NodeSource interface {
	Nodes(ctx context.Context) ([]cluster.NodeInfo, error)
}

// Actuator carries out decisions. Implementations: Exec, Kubernetes, Local.
// Calls come from the controller's loop, one at a time.
type Actuator interface {
	// Name is the actuator's name as in WSGATE_ACTUATOR.
	Name() string
	// ScaleOut brings the fleet to desired nodes. nodes are the fresh
	// node records the decision counted (active, warming, draining).
	ScaleOut(ctx context.Context, desired int, nodes []cluster.NodeInfo) error
	// ScaleIn removes node, draining it first; desired is the count after.
	ScaleIn(ctx context.Context, node cluster.NodeInfo, desired int) error
	// Close releases the actuator; Local drains and stops its processes.
	Close(ctx context.Context) error
}

// Options configure a Controller.
type Options struct {
	Policy   Policy
	Interval time.Duration // decision period
	// ActionTimeout bounds one actuator call (default 5m).
	ActionTimeout time.Duration
	Nodes         NodeSource
	Actuator      Actuator
	Metrics       *Metrics     // nil: a new one
	Logger        *slog.Logger // nil: discard
	Now           func() time.Time
}

// Controller runs the decision loop: every Interval it reads the node
// records, decides, logs the decision with its reasons (one JSON line),
// updates the metrics and calls the actuator.
type Controller struct {
	opt Options
	log *slog.Logger
	m   *Metrics

	mu       sync.Mutex
	started  time.Time // the first Step's time (Policy.StartupGrace)
	status   *Status
	ready    bool
	lastOut  time.Time
	lastIn   time.Time
	drain    *PendingDrain
	stepLock sync.Mutex // one Step at a time
}

// Status is the answer of GET /v1/status: the last decision and what
// came of it.
type Status struct {
	Decision     Decision      `json:"decision"`
	Actuator     string        `json:"actuator"`
	ActionError  string        `json:"action_error,omitempty"`
	PendingDrain *PendingDrain `json:"pending_drain,omitempty"`
	LastScaleOut *time.Time    `json:"last_scale_out,omitempty"`
	LastScaleIn  *time.Time    `json:"last_scale_in,omitempty"`
	Policy       policyJSON    `json:"policy"`
}

type policyJSON struct {
	MaxConnsPerNode int     `json:"max_conns_per_node"`
	ScaleOutAt      float64 `json:"scale_out_at"`
	ScaleInAt       float64 `json:"scale_in_at"`
	CPUOutAt        float64 `json:"cpu_out_at"`
	CPUInAt         float64 `json:"cpu_in_at"`
	MinNodes        int     `json:"min_nodes"`
	MaxNodes        int     `json:"max_nodes"`
	Cooldown        string  `json:"cooldown"`
	StartupGrace    string  `json:"startup_grace"`
	Interval        string  `json:"interval"`
}

// NewController checks opt and fills its defaults.
func NewController(opt Options) (*Controller, error) {
	switch {
	case opt.Nodes == nil:
		return nil, errors.New("autoscaler: Options.Nodes is required")
	case opt.Actuator == nil:
		return nil, errors.New("autoscaler: Options.Actuator is required")
	case opt.Interval <= 0:
		return nil, errors.New("autoscaler: Options.Interval must be positive")
	case opt.Policy.MaxConnsPerNode < 1 || opt.Policy.MinNodes < 1 || opt.Policy.MaxNodes < opt.Policy.MinNodes:
		return nil, errors.New("autoscaler: Policy needs MaxConnsPerNode >= 1 and 1 <= MinNodes <= MaxNodes")
	}
	if opt.ActionTimeout <= 0 {
		opt.ActionTimeout = 5 * time.Minute
	}
	if opt.Metrics == nil {
		opt.Metrics = NewMetrics()
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Policy.DrainWait <= 0 {
		opt.Policy.DrainWait = max(time.Minute, 5*opt.Interval)
	}
	return &Controller{opt: opt, log: opt.Logger, m: opt.Metrics}, nil
}

// Metrics returns the controller's collectors.
func (c *Controller) Metrics() *Metrics { return c.m }

// Run decides at once and then every Interval until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(c.opt.Interval)
	defer t.Stop()
	for {
		c.Step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Step makes one decision and carries it out.
func (c *Controller) Step(ctx context.Context) Decision {
	c.stepLock.Lock()
	defer c.stepLock.Unlock()
	now := c.opt.Now()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	nodes, err := c.opt.Nodes.Nodes(rctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return Decision{Time: now, Action: ActionNone} // stopping: no decision
	}
	if err != nil {
		d := Decision{Time: now, Action: ActionNone, Reason: ReasonBackendDown,
			Reasons: []string{"cannot read the node records: " + err.Error()}}
		c.mu.Lock()
		c.ready = false
		c.mu.Unlock()
		c.m.observe(d)
		c.log.Warn("decision", "action", d.Action, "reason", d.Reason, "reasons", d.Reasons)
		c.record(d, nil)
		return d
	}

	c.mu.Lock()
	c.ready = true
	if c.started.IsZero() {
		c.started = now
	}
	st := State{Now: now, Policy: c.opt.Policy, Nodes: nodes, Started: c.started, LastScaleOut: c.lastOut, LastScaleIn: c.lastIn, Drain: c.drain}
	c.mu.Unlock()
	d := Decide(st)
	if d.DrainGone || d.DrainLost {
		c.mu.Lock()
		c.drain = nil
		c.mu.Unlock()
		if d.DrainLost {
			c.m.ActuatorErrors.Inc()
		}
	}
	c.m.observe(d)
	c.log.Info("decision", "action", d.Action, "reason", d.Reason, "current", d.Current, "desired", d.Desired,
		"connections", d.Connections, "capacity", d.Capacity, "load_ratio", round2(d.LoadRatio), "cpu", round2(d.CPU),
		"active", d.Active, "warming", d.Warming, "draining", d.Draining, "stale", d.Stale,
		"drain", d.Drain, "reasons", d.Reasons)

	var actErr error
	if d.Action != ActionNone {
		actx, cancel := context.WithTimeout(ctx, c.opt.ActionTimeout)
		start := c.opt.Now()
		switch d.Action {
		case ActionScaleOut:
			actErr = c.opt.Actuator.ScaleOut(actx, d.Desired, d.Counted)
		case ActionScaleIn:
			actErr = c.opt.Actuator.ScaleIn(actx, *d.DrainNode, d.Desired)
		}
		cancel()
		done := c.opt.Now()
		if actErr != nil {
			c.m.ActuatorErrors.Inc()
			c.log.Error("scaling action failed", "action", d.Action, "actuator", c.opt.Actuator.Name(), "desired", d.Desired,
				"drain", d.Drain, "err", actErr.Error(), "took_ms", done.Sub(start).Milliseconds())
		} else {
			c.mu.Lock()
			switch d.Action {
			case ActionScaleOut:
				c.lastOut = done
			case ActionScaleIn:
				c.lastIn = done
				c.drain = &PendingDrain{Node: d.Drain, Since: start}
			}
			c.mu.Unlock()
			c.log.Info("scaling action done", "action", d.Action, "actuator", c.opt.Actuator.Name(), "desired", d.Desired,
				"drain", d.Drain, "took_ms", done.Sub(start).Milliseconds())
		}
	}
	c.record(d, actErr)
	return d
}

func (c *Controller) record(d Decision, actErr error) {
	p := c.opt.Policy
	s := &Status{
		Decision: d,
		Actuator: c.opt.Actuator.Name(),
		Policy: policyJSON{MaxConnsPerNode: p.MaxConnsPerNode, ScaleOutAt: p.ScaleOutAt, ScaleInAt: p.ScaleInAt,
			CPUOutAt: p.CPUOutAt, CPUInAt: p.CPUInAt, MinNodes: p.MinNodes, MaxNodes: p.MaxNodes,
			Cooldown: p.Cooldown.String(), StartupGrace: p.StartupGrace.String(), Interval: c.opt.Interval.String()},
	}
	if s.Decision.Reasons == nil {
		s.Decision.Reasons = []string{}
	}
	if actErr != nil {
		s.ActionError = actErr.Error()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.drain != nil {
		pd := *c.drain
		s.PendingDrain = &pd
	}
	if !c.lastOut.IsZero() {
		t := c.lastOut
		s.LastScaleOut = &t
	}
	if !c.lastIn.IsZero() {
		t := c.lastIn
		s.LastScaleIn = &t
	}
	c.status = s
}

// Status returns the last decision (nil before the first).
func (c *Controller) Status() *Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Handler serves GET /healthz, /readyz (503 until the node records were
// read, and while they cannot be), /metrics and /v1/status.
func (c *Controller) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		ready := c.ready
		c.mu.Unlock()
		if !ready {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]string{
				"code": "unavailable", "message": "the cluster's node records could not be read"}})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.Handle("GET /metrics", c.m.Handler())
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		s := c.Status()
		if s == nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]string{
				"code": "unavailable", "message": "no decision yet"}})
			return
		}
		writeJSON(w, http.StatusOK, s)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

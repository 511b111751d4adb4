package autoscaler

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the autoscaler's own collectors, served on its /metrics
// together with the Go runtime and process collectors.
type Metrics struct {
	Registry *prometheus.Registry

	DesiredNodes   prometheus.Gauge
	CurrentNodes   prometheus.Gauge
	Decisions      *prometheus.CounterVec // action, reason
	LoadRatio      prometheus.Gauge
	ActuatorErrors prometheus.Counter
	CPU            prometheus.Gauge
	Connections    prometheus.Gauge
	Nodes          *prometheus.GaugeVec // status: active, warming, draining, stale
}

// decisionLabels are the (action, reason) pairs a decision can have;
// they are created at start so that dashboards and alerts see zeros.
var decisionLabels = map[Action][]string{
	ActionScaleOut: {ReasonBelowMin, ReasonConnsHigh, ReasonCPUHigh},
	ActionScaleIn:  {ReasonAboveMax, ReasonConnsLow},
	ActionNone: {ReasonWithinBand, ReasonAtMax, ReasonAtMin, ReasonCPUNotLow, ReasonCooldown, ReasonStartupGrace,
		ReasonDrainInProgress, ReasonWouldOverload, ReasonNoDrainCandidate, ReasonBackendDown},
}

// NewMetrics creates and registers the collectors on a new registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: r,
		DesiredNodes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "wsgate_autoscaler_desired_nodes",
			Help: "Node count the last decision wanted."}),
		CurrentNodes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "wsgate_autoscaler_current_nodes",
			Help: "Nodes counted as capacity at the last decision (fresh active and warming nodes)."}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_autoscaler_decisions_total",
			Help: "Scaling decisions, by action (scale_out, scale_in, none) and main reason."}, []string{"action", "reason"}),
		LoadRatio: prometheus.NewGauge(prometheus.GaugeOpts{Name: "wsgate_autoscaler_load_ratio",
			Help: "Connections divided by the capacity of the counted nodes (nodes x max-conns-per-node)."}),
		ActuatorErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_autoscaler_actuator_errors_total",
			Help: "Scaling actions that failed (actuator errors and drains that never started)."}),
		CPU: prometheus.NewGauge(prometheus.GaugeOpts{Name: "wsgate_autoscaler_cpu",
			Help: "Mean CPU use (cores) of the counted nodes at the last decision."}),
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "wsgate_autoscaler_connections",
			Help: "Connections on the fresh nodes (draining ones included) at the last decision."}),
		Nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "wsgate_autoscaler_nodes",
			Help: "Node records seen at the last decision, by status (active, warming, draining, stale)."}, []string{"status"}),
	}
	r.MustRegister(m.DesiredNodes, m.CurrentNodes, m.Decisions, m.LoadRatio, m.ActuatorErrors, m.CPU, m.Connections, m.Nodes)
	for action, reasons := range decisionLabels {
		for _, reason := range reasons {
			m.Decisions.WithLabelValues(string(action), reason)
		}
	}
	for _, s := range []string{"active", "warming", "draining", "stale"} {
		m.Nodes.WithLabelValues(s)
	}
	return m
}

// observe records a decision.
func (m *Metrics) observe(d Decision) {
	m.Decisions.WithLabelValues(string(d.Action), d.Reason).Inc()
	if d.Reason == ReasonBackendDown {
		return // nothing was read: keep the last values
	}
	m.DesiredNodes.Set(float64(d.Desired))
	m.CurrentNodes.Set(float64(d.Current))
	m.LoadRatio.Set(d.LoadRatio)
	m.CPU.Set(d.CPU)
	m.Connections.Set(float64(d.Connections))
	m.Nodes.WithLabelValues("active").Set(float64(d.Active))
	m.Nodes.WithLabelValues("warming").Set(float64(d.Warming))
	m.Nodes.WithLabelValues("draining").Set(float64(d.Draining))
	m.Nodes.WithLabelValues("stale").Set(float64(d.Stale))
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

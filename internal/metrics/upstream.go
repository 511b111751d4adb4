package metrics

import "github.com/prometheus/client_golang/prometheus"

// Upstream holds the collectors of contract section 16 for the upstream
// sink and rpc.
type Upstream struct {
	UpstreamRecords *prometheus.CounterVec // type: records the sink accepted
	UpstreamErrors  prometheus.Counter     // sink writes that failed or timed out
	UpstreamDropped prometheus.Counter     // records given up without reaching the sink
	UpstreamLatency prometheus.Histogram   // one sink write, from call to acceptance
	RPC             *prometheus.CounterVec // result
}

// RPC results (wsgate_rpc_total{result}).
const (
	RPCOK          = "ok"          // answered with a result
	RPCError       = "error"       // answered with an error {code,message}
	RPCUnavailable = "unavailable" // no valid answer within 5 s, or the node's bound was reached
)

// Upstream record types pre-created at zero.
var upstreamTypes = []string{"message", "connect", "disconnect", "online", "offline", "join", "leave", "ack", "undelivered"}

func (m *Metrics) registerUpstream(f func(prometheus.Collector)) {
	m.UpstreamRecords = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_upstream_records_total", Help: "Records the upstream sink accepted, by record type."}, []string{"type"})
	m.UpstreamErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_upstream_errors_total", Help: "Upstream sink writes that failed or did not finish in time."})
	m.UpstreamDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_upstream_dropped_total", Help: "Upstream records given up without reaching the sink (a full queue or buffer)."})
	m.UpstreamLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "wsgate_upstream_latency_seconds", Help: "One upstream sink write, from the call to the sink's acceptance.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}})
	m.RPC = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_rpc_total", Help: "Client rpc frames, by result (ok, error, unavailable)."}, []string{"result"})
	for _, c := range []prometheus.Collector{m.UpstreamRecords, m.UpstreamErrors, m.UpstreamDropped, m.UpstreamLatency, m.RPC} {
		f(c)
	}
	for _, t := range upstreamTypes {
		m.UpstreamRecords.WithLabelValues(t)
	}
	for _, r := range []string{RPCOK, RPCError, RPCUnavailable} {
		m.RPC.WithLabelValues(r)
	}
}

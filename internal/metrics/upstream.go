package metrics

import "github.com/prometheus/client_golang/prometheus"

// Upstream holds the collectors of records sent upstream (contract
// section 16).
type Upstream struct {
	Records *prometheus.CounterVec // type: records the sink accepted
	Errors  prometheus.Counter     // sink writes that failed
	Dropped prometheus.Counter     // event records lost: the buffer was full
	Latency prometheus.Histogram   // one sink write, from start to acceptance
}

func newUpstream(r *prometheus.Registry) *Upstream {
	u := &Upstream{
		Records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_upstream_records_total", Help: "Records the upstream sink accepted, by type."}, []string{"type"}),
		Errors:  prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_upstream_errors_total", Help: "Upstream sink writes that failed (each is retried)."}),
		Dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_upstream_dropped_total", Help: "Event records dropped because the event buffer in front of the sink was full."}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "wsgate_upstream_latency_seconds", Help: "Upstream sink write latency, from start to acceptance.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}),
	}
	r.MustRegister(u.Records, u.Errors, u.Dropped, u.Latency)
	return u
}

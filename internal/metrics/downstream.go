package metrics

import "github.com/prometheus/client_golang/prometheus"

// Downstream holds the collectors of contract section 20: publishes
// consumed from the business's streams (WSGATE_DOWNSTREAM_URL).
type Downstream struct {
	DownstreamRecords  *prometheus.CounterVec // source, result: published, dead, retried
	DownstreamLag      *prometheus.GaugeVec   // source: records waiting, where the source tells
	DownstreamInFlight *prometheus.GaugeVec   // source: records this node holds, not yet acknowledged
}

// Downstream results (wsgate_downstream_records_total{result}).
const (
	DownstreamPublished = "published" // answered as the API would (2xx), then acknowledged
	DownstreamDead      = "dead"      // refused for its content, written to the dead-letter place, acknowledged
	DownstreamRetried   = "retried"   // answered unavailable (503): not acknowledged, tried again
)

func (m *Metrics) registerDownstream(f func(prometheus.Collector)) {
	m.DownstreamRecords = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_downstream_records_total",
		Help: "Records consumed from a WSGATE_DOWNSTREAM_URL source, by source and result (published, dead, retried: one count per try that was answered unavailable)."}, []string{"source", "result"})
	m.DownstreamLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "wsgate_downstream_lag",
		Help: "Records of a downstream source waiting for the cluster (not yet delivered to a consumer, plus delivered and not yet acknowledged), where the source tells."}, []string{"source"})
	m.DownstreamInFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "wsgate_downstream_in_flight",
		Help: "Records of a downstream source this node has read and not yet acknowledged (bounded by WSGATE_DOWNSTREAM_IN_FLIGHT)."}, []string{"source"})
	for _, c := range []prometheus.Collector{m.DownstreamRecords, m.DownstreamLag, m.DownstreamInFlight} {
		f(c)
	}
}

// DownstreamSource creates a source's series at zero, so that dashboards
// and alerts see them before the first record.
func (m *Metrics) DownstreamSource(source string) {
	for _, r := range []string{DownstreamPublished, DownstreamDead, DownstreamRetried} {
		m.DownstreamRecords.WithLabelValues(source, r)
	}
	m.DownstreamLag.WithLabelValues(source)
	m.DownstreamInFlight.WithLabelValues(source)
}

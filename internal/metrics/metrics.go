// Package metrics declares the gateway's Prometheus collectors with the
// names of contract §10. One Metrics value per process, registered on its
// own registry together with the Go runtime and process collectors.
package metrics

import (
	"net/http"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds every gateway collector.
type Metrics struct {
	Registry *prometheus.Registry

	Connections       *prometheus.GaugeVec   // by transport: ws, sse, stream
	ConnectionsTotal  *prometheus.CounterVec // by transport
	HandshakeRejected *prometheus.CounterVec // reason
	Published         *prometheus.CounterVec // target
	Delivered         prometheus.Counter
	Dropped           *prometheus.CounterVec // reason
	DeliveryLatency   prometheus.Histogram
	SendQueueFull     prometheus.Counter
	ClientFrames      *prometheus.CounterVec // type
	BackendErrors     *prometheus.CounterVec // op
	BackendLatency    *prometheus.HistogramVec
	NodeStatus        *prometheus.GaugeVec // status
	DrainRemaining    prometheus.Gauge
	Closes            *prometheus.CounterVec // code
	BusReceived       *prometheus.CounterVec // kind
	TokenRefresh      *prometheus.CounterVec // result
	KeySetFetches     *prometheus.CounterVec // result
	RoomHistory       prometheus.Counter     // messages stored in reliable rooms' histories (v2)
	APIKeyFailures    *prometheus.CounterVec // result: refused (401), throttled (429)
	PartialBytes      prometheus.Gauge       // bytes held for unfinished client frames, node-wide
	TLSHandshakes     *prometheus.CounterVec // path: loop (TLS 1.3 on the event loop), goroutine (TLS 1.2, or HTTP/2), failed

	Upstream    // v2: sinks and rpc (upstream.go)
	Compression // v2: permessage-deflate (compression.go)
	Downstream  // v3: sources of publishes (downstream.go)
}

// Results of a refresh frame (wsgate_token_refresh_total).
const (
	RefreshOK        = "ok"         // the new token replaced the connection's
	RefreshInvalid   = "invalid"    // the token did not verify
	RefreshOtherUser = "other_user" // a valid token for another sub
)

// Handshake rejection reasons.
const (
	RejectBadRequest   = "bad_request"
	RejectUnauthorized = "unauthorized"
	RejectOrigin       = "origin_forbidden"
	RejectRate         = "rate_limited"
	RejectConnLimit    = "conn_limit"
	RejectUnavailable  = "unavailable"
)

// Drop reasons.
const (
	DropQueueFull   = "queue_full"     // realtime message, queue full
	DropNotifyWait  = "notify_timeout" // notify message, no room within 100 ms
	DropSlowClose   = "slow_consumer"  // chat message, connection closed with 4008
	DropClosed      = "closed"         // connection closed before the write
	DropEncode      = "encode"         // message could not be encoded for the connection's format
	DropRateLimited = "rate_limited"   // client frame over WSGATE_MESSAGE_RATE
	DropConflated   = "conflated"      // realtime message with a key, replaced in a full queue by a newer one of the same target and key
)

// New creates and registers every collector.
func New() *Metrics {
	r := prometheus.NewRegistry()
	// The default Go metrics plus the GC's CPU time (go_cpu_classes_gc_total_cpu_seconds_total),
	// so that load tests can report GC CPU next to the pauses.
	gcCPU := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/gc/total:cpu-seconds$`)}
	r.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(gcCPU)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	m := &Metrics{Registry: r}
	m.Connections = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "wsgate_connections", Help: "Open client connections on this node, by transport (ws, sse, stream)."}, []string{"transport"})
	m.ConnectionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_connections_total", Help: "Client connections accepted (upgraded, or streams opened) since start, by transport (ws, sse, stream)."}, []string{"transport"})
	for _, tp := range []string{"ws", "sse", "stream"} {
		m.Connections.WithLabelValues(tp)
		m.ConnectionsTotal.WithLabelValues(tp)
	}
	m.HandshakeRejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_handshake_rejected_total", Help: "Handshakes refused before the upgrade, by reason."}, []string{"reason"})
	m.Published = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_messages_published_total", Help: "Messages published through this node (API and client publish), by target type."}, []string{"target"})
	m.Delivered = prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_messages_delivered_total", Help: "Messages (pushed and replayed) queued to client sockets; control frames, replies and welcomes are not counted."})
	m.Dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_messages_dropped_total", Help: "Messages not delivered to a connection, by reason."}, []string{"reason"})
	m.DeliveryLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "wsgate_delivery_latency_seconds", Help: "From publish to the socket write, per delivered message.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}})
	m.SendQueueFull = prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_send_queue_full_total", Help: "Times a connection's outbound queue was full when a message came."})
	m.ClientFrames = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_client_frames_total", Help: "Frames received from clients, by type."}, []string{"type"})
	m.BackendErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_backend_errors_total", Help: "Cluster backend calls that failed, by operation."}, []string{"op"})
	m.BackendLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "wsgate_backend_latency_seconds", Help: "Cluster backend call latency, by operation.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1, 5}}, []string{"op"})
	m.NodeStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "wsgate_node_status", Help: "1 for this node's current status (warming, active, draining)."}, []string{"status"})
	m.DrainRemaining = prometheus.NewGauge(prometheus.GaugeOpts{Name: "wsgate_drain_remaining", Help: "Connections left to move while draining."})
	m.Closes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_connection_closes_total", Help: "Connections closed, by close code (0: without a close frame)."}, []string{"code"})
	m.BusReceived = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_bus_received_total", Help: "Envelopes this node received from the cluster bus, by kind (message, kick, room, drain, done)."}, []string{"kind"})
	m.TokenRefresh = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_token_refresh_total", Help: "Refresh frames, by result (ok, invalid, other_user)."}, []string{"result"})
	m.KeySetFetches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_jwks_fetch_total", Help: "Fetches of the JWKS key set (WSGATE_JWKS_URL), by result (ok, error)."}, []string{"result"})
	m.RoomHistory = prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_room_history_messages_total", Help: "Reliable room messages this node stored in their room's history."})
	f(m.RoomHistory)
	m.APIKeyFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_api_key_failures_total", Help: "Server API requests refused for their key: refused (401, a wrong or missing key) or throttled (429, too many failures from the client IP)."}, []string{"result"})
	m.PartialBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "wsgate_partial_frame_bytes", Help: "Bytes held for unfinished client frames and fragmented messages, all connections of the node."})
	m.TLSHandshakes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wsgate_tls_handshakes_total", Help: "TLS handshakes on the node's listener, by path: loop (TLS 1.3, held by the event loop), goroutine (TLS 1.2, an HTTP/2 client, a KeyUpdate or ChangeCipherSpec before the request, or WSGATE_TLS_OWN_RECORDS=off: crypto/tls), failed."}, []string{"path"})
	for _, p := range []string{"loop", "goroutine", "failed"} {
		m.TLSHandshakes.WithLabelValues(p)
	}
	for _, c := range []prometheus.Collector{m.TLSHandshakes, m.TokenRefresh, m.KeySetFetches, m.APIKeyFailures, m.PartialBytes, m.BusReceived, m.Connections, m.ConnectionsTotal, m.HandshakeRejected, m.Published, m.Delivered, m.Dropped,
		m.DeliveryLatency, m.SendQueueFull, m.ClientFrames, m.BackendErrors, m.BackendLatency, m.NodeStatus, m.DrainRemaining, m.Closes} {
		f(c)
	}
	m.registerUpstream(f)
	m.registerCompression(f)
	m.registerDownstream(f)
	// Series that exist from the start, so dashboards and alerts see zeros.
	for _, s := range []string{"warming", "active", "draining"} {
		m.NodeStatus.WithLabelValues(s)
	}
	for _, t := range []string{"user", "room", "broadcast"} {
		m.Published.WithLabelValues(t)
	}
	for _, op := range []string{"publish", "route", "inbox", "heartbeat", "rooms", "bus"} {
		m.BackendLatency.WithLabelValues(op)
	}
	for _, ty := range []string{"ping", "ack", "join", "leave", "publish", "send", "rpc", "refresh", "invalid"} {
		m.ClientFrames.WithLabelValues(ty)
	}
	for _, op := range []string{"publish", "route", "inbox", "heartbeat", "rooms", "bus"} {
		m.BackendErrors.WithLabelValues(op)
	}
	for _, r := range []string{DropQueueFull, DropNotifyWait, DropSlowClose, DropClosed, DropEncode, DropRateLimited, DropConflated} {
		m.Dropped.WithLabelValues(r)
	}
	for _, r := range []string{RefreshOK, RefreshInvalid, RefreshOtherUser} {
		m.TokenRefresh.WithLabelValues(r)
	}
	for _, r := range []string{"refused", "throttled"} {
		m.APIKeyFailures.WithLabelValues(r)
	}
	for _, r := range []string{RejectBadRequest, RejectUnauthorized, RejectOrigin, RejectRate, RejectConnLimit, RejectUnavailable} {
		m.HandshakeRejected.WithLabelValues(r)
	}
	return m
}

// SetStatus marks one status as current.
func (m *Metrics) SetStatus(status string) {
	for _, s := range []string{"warming", "active", "draining"} {
		v := 0.0
		if s == status {
			v = 1
		}
		m.NodeStatus.WithLabelValues(s).Set(v)
	}
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

package bench

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

const sampleMetrics = `# HELP go_gc_duration_seconds A summary of the wall-time pause.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 1.2e-05
go_gc_duration_seconds{quantile="1"} 0.000415
go_gc_duration_seconds_sum 0.0031
go_gc_duration_seconds_count 17
go_goroutines 21
go_memstats_heap_inuse_bytes 7.5e+06
go_threads 9
process_cpu_seconds_total 12.34
process_max_fds 20000
process_open_fds 5017
process_resident_memory_bytes 1.2345678e+08
wsgate_connections{transport="sse"} 1000
wsgate_connections{transport="ws"} 4000
wsgate_connections_total{transport="sse"} 1023
wsgate_connections_total{transport="ws"} 4100
wsgate_handshake_rejected_total{reason="rate_limited"} 3
wsgate_handshake_rejected_total{reason="unauthorized"} 2
wsgate_messages_delivered_total 1.5e+06
wsgate_messages_dropped_total{reason="queue_full"} 4
wsgate_messages_dropped_total{reason="closed"} 1
wsgate_messages_dropped_total{reason="conflated"} 2
wsgate_messages_published_total{target="broadcast"} 300
wsgate_send_queue_full_total 4
wsgate_delivery_latency_seconds_bucket{le="0.001"} 50
wsgate_delivery_latency_seconds_bucket{le="0.0025"} 90
wsgate_delivery_latency_seconds_bucket{le="+Inf"} 100
wsgate_delivery_latency_seconds_sum 0.12
wsgate_delivery_latency_seconds_count 100
weird_metric{a="x}y",b="q\"z"} 7 1700000000000
`

func TestParseMetrics(t *testing.T) {
	var ns NodeSample
	if err := ns.parse(strings.NewReader(sampleMetrics)); err != nil {
		t.Fatal(err)
	}
	want := NodeSample{
		RSSBytes: 1.2345678e+08, HeapInuseBytes: 7.5e6, Goroutines: 21, Threads: 9, OpenFDs: 5017, MaxFDs: 20000,
		CPUSeconds: 12.34, GCCycles: 17, GCPauseSeconds: 0.0031, GCPauseMax: 0.000415, Connections: 5000,
		ConnectionsTotal: 5123, HandshakeReject: 5, Published: 300, Delivered: 1.5e6, Dropped: 7, QueueFull: 4, Conflated: 2, DroppedFull: 4,
	}
	got := ns
	got.DeliveryLatency = nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", got, want)
	}
	if len(ns.DeliveryLatency) != 3 || !math.IsInf(ns.DeliveryLatency[2].LE, 1) {
		t.Fatalf("buckets %+v", ns.DeliveryLatency)
	}
	if q := promQuantile(ns.DeliveryLatency, 0.5); math.Abs(q-0.001) > 1e-12 {
		t.Fatalf("p50 %v", q)
	}
	if q := promQuantile(ns.DeliveryLatency, 0.7); math.Abs(q-0.00175) > 1e-12 {
		t.Fatalf("p70 %v", q)
	}
	if q := promQuantile(ns.DeliveryLatency, 0.99); q != 0.0025 {
		t.Fatalf("p99 in +Inf bucket: %v", q)
	}
	d := promDelta(ns.DeliveryLatency, []promBucket{{0.001, 50}, {0.0025, 50}, {math.Inf(1), 50}})
	if d[0].Count != 0 || d[1].Count != 40 || d[2].Count != 50 {
		t.Fatalf("delta %+v", d)
	}
}

func TestParseMetricLine(t *testing.T) {
	name, labels, v, ok := parseMetricLine(`weird_metric{a="x}y",b="q\"z"} 7 1700000000000`)
	if !ok || name != "weird_metric" || v != 7 || labelValue(labels, "a") != "x}y" || labelValue(labels, "b") != `q"z` {
		t.Fatalf("%q %q %v %v", name, labels, v, ok)
	}
	for _, bad := range []string{"", "# comment", "name", "name{a=\"x\" 1", "name abc"} {
		if _, _, _, ok := parseMetricLine(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestSumSamples(t *testing.T) {
	a := NodeSample{URL: "a", Connections: 10, CPUSeconds: 1, GCPauseMax: 0.002, DeliveryLatency: []promBucket{{0.001, 1}, {math.Inf(1), 2}}}
	b := NodeSample{URL: "b", Connections: 5, CPUSeconds: 2, GCPauseMax: 0.001, Err: "down", DeliveryLatency: []promBucket{{0.001, 3}, {math.Inf(1), 4}}}
	s := sumSamples([]NodeSample{a, b})
	if s.Connections != 15 || s.CPUSeconds != 3 || s.GCPauseMax != 0.002 || s.Err != "b: down" ||
		len(s.DeliveryLatency) != 2 || s.DeliveryLatency[0].Count != 4 || s.DeliveryLatency[1].Count != 6 {
		t.Fatalf("%+v", s)
	}
}

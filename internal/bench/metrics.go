package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NodeSample is what the bench reads from one node's /metrics at one
// moment (contract §10 plus the Go runtime and process collectors). A
// series the node does not export is 0.
type NodeSample struct {
	URL string    `json:"url"`
	At  time.Time `json:"at"`
	Err string    `json:"error,omitempty"`

	RSSBytes         float64 `json:"rss_bytes"`                // process_resident_memory_bytes
	HeapInuseBytes   float64 `json:"heap_inuse_bytes"`         // go_memstats_heap_inuse_bytes
	Goroutines       float64 `json:"goroutines"`               // go_goroutines
	Threads          float64 `json:"threads"`                  // go_threads
	OpenFDs          float64 `json:"open_fds"`                 // process_open_fds
	BackendConns     float64 `json:"backend_conns"`            // wsgate_backend_pool_connections
	MaxFDs           float64 `json:"max_fds"`                  // process_max_fds
	CPUSeconds       float64 `json:"cpu_seconds"`              // process_cpu_seconds_total
	GCCycles         float64 `json:"gc_cycles"`                // go_gc_duration_seconds_count
	GCPauseSeconds   float64 `json:"gc_pause_seconds"`         // go_gc_duration_seconds_sum
	GCCPUSeconds     float64 `json:"gc_cpu_seconds"`           // go_cpu_classes_gc_total_cpu_seconds_total
	GCPauseMax       float64 `json:"gc_pause_max_seconds"`     // go_gc_duration_seconds{quantile="1"}
	Connections      float64 `json:"connections"`              // wsgate_connections
	ConnectionsTotal float64 `json:"connections_total"`        // wsgate_connections_total
	HandshakeReject  float64 `json:"handshake_rejected_total"` // sum over reasons
	Published        float64 `json:"published_total"`          // sum over targets
	Delivered        float64 `json:"delivered_total"`          // wsgate_messages_delivered_total
	Dropped          float64 `json:"dropped_total"`            // sum over reasons
	QueueFull        float64 `json:"send_queue_full_total"`    // wsgate_send_queue_full_total
	Conflated        float64 `json:"conflated_total"`          // wsgate_messages_dropped_total{reason="conflated"}
	DroppedFull      float64 `json:"queue_full_dropped_total"` // wsgate_messages_dropped_total{reason="queue_full"}

	// DeliveryLatency is wsgate_delivery_latency_seconds: cumulative
	// counts by upper bound, ascending.
	DeliveryLatency []promBucket `json:"-"`
}

// promBucket is one cumulative bucket of a Prometheus histogram.
type promBucket struct {
	LE    float64 `json:"le"`
	Count float64 `json:"count"`
}

// scraper reads the nodes' /metrics.
type scraper struct {
	urls []string
	http *http.Client
}

func newScraper(urls []string, tlsCfg *tls.Config) *scraper {
	return &scraper{urls: urls, http: &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true, TLSClientConfig: tlsCfg},
	}}
}

// scrape reads every node at once; a node that cannot be read gets Err.
func (s *scraper) scrape(ctx context.Context) []NodeSample {
	out := make([]NodeSample, len(s.urls))
	var wg sync.WaitGroup
	for i, u := range s.urls {
		wg.Go(func() { out[i] = s.scrapeOne(ctx, u) })
	}
	wg.Wait()
	return out
}

func (s *scraper) scrapeOne(ctx context.Context, u string) NodeSample {
	ns := NodeSample{URL: u, At: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		ns.Err = err.Error()
		return ns
	}
	resp, err := s.http.Do(req)
	if err != nil {
		ns.Err = err.Error()
		return ns
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		ns.Err = fmt.Sprintf("HTTP %d", resp.StatusCode)
		return ns
	}
	if err := ns.parse(resp.Body); err != nil {
		ns.Err = err.Error()
	}
	return ns
}

func (s *scraper) close() { s.http.CloseIdleConnections() }

// parse reads the Prometheus text format and keeps the series it knows.
func (ns *NodeSample) parse(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, labels, v, ok := parseMetricLine(sc.Text())
		if !ok {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			ns.RSSBytes = v
		case "go_memstats_heap_inuse_bytes":
			ns.HeapInuseBytes = v
		case "go_goroutines":
			ns.Goroutines = v
		case "go_threads":
			ns.Threads = v
		case "process_open_fds":
			ns.OpenFDs = v
		case "wsgate_backend_pool_connections":
			ns.BackendConns = v
		case "process_max_fds":
			ns.MaxFDs = v
		case "process_cpu_seconds_total":
			ns.CPUSeconds = v
		case "go_gc_duration_seconds_count":
			ns.GCCycles = v
		case "go_gc_duration_seconds_sum":
			ns.GCPauseSeconds = v
		case "go_cpu_classes_gc_total_cpu_seconds_total":
			ns.GCCPUSeconds = v
		case "go_gc_duration_seconds":
			if labelValue(labels, "quantile") == "1" {
				ns.GCPauseMax = v
			}
		case "wsgate_connections": // one series per transport
			ns.Connections += v
		case "wsgate_connections_total":
			ns.ConnectionsTotal += v
		case "wsgate_handshake_rejected_total":
			ns.HandshakeReject += v
		case "wsgate_messages_published_total":
			ns.Published += v
		case "wsgate_messages_delivered_total":
			ns.Delivered = v
		case "wsgate_messages_dropped_total":
			ns.Dropped += v
			switch labelValue(labels, "reason") {
			case "conflated":
				ns.Conflated += v
			case "queue_full":
				ns.DroppedFull += v
			}
		case "wsgate_send_queue_full_total":
			ns.QueueFull = v
		case "wsgate_delivery_latency_seconds_bucket":
			if le, err := strconv.ParseFloat(labelValue(labels, "le"), 64); err == nil {
				ns.DeliveryLatency = addBucket(ns.DeliveryLatency, le, v)
			}
		}
	}
	return sc.Err()
}

// parseMetricLine splits `name{labels} value [timestamp]`; comments and
// malformed lines give ok = false.
func parseMetricLine(line string) (name, labels string, v float64, ok bool) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", "", 0, false
	}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return "", "", 0, false
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		end, inQuote := -1, false
		for j := 1; j < len(rest); j++ {
			switch c := rest[j]; {
			case c == '\\' && inQuote:
				j++
			case c == '"':
				inQuote = !inQuote
			case c == '}' && !inQuote:
				end = j
			}
			if end >= 0 {
				break
			}
		}
		if end < 0 {
			return "", "", 0, false
		}
		labels, rest = rest[1:end], rest[end+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", "", 0, false
	}
	return name, labels, v, true
}

// labelValue returns the value of label k in `a="x",k="y"`.
func labelValue(labels, k string) string {
	for labels != "" {
		eq := strings.IndexByte(labels, '=')
		if eq < 0 || eq+1 >= len(labels) || labels[eq+1] != '"' {
			return ""
		}
		key := strings.TrimSpace(labels[:eq])
		j := eq + 2
		var b strings.Builder
		for ; j < len(labels) && labels[j] != '"'; j++ {
			if labels[j] == '\\' && j+1 < len(labels) {
				j++
			}
			b.WriteByte(labels[j])
		}
		if key == k {
			return b.String()
		}
		labels = strings.TrimLeft(labels[min(j+1, len(labels)):], ", ")
	}
	return ""
}

// sumSamples adds the samples of every node (URL and errors left out).
func sumSamples(ss []NodeSample) NodeSample {
	var t NodeSample
	for _, s := range ss {
		t.RSSBytes += s.RSSBytes
		t.HeapInuseBytes += s.HeapInuseBytes
		t.Goroutines += s.Goroutines
		t.Threads += s.Threads
		t.OpenFDs += s.OpenFDs
		t.BackendConns += s.BackendConns
		t.MaxFDs += s.MaxFDs
		t.CPUSeconds += s.CPUSeconds
		t.GCCycles += s.GCCycles
		t.GCPauseSeconds += s.GCPauseSeconds
		t.GCCPUSeconds += s.GCCPUSeconds
		t.GCPauseMax = max(t.GCPauseMax, s.GCPauseMax)
		t.Connections += s.Connections
		t.ConnectionsTotal += s.ConnectionsTotal
		t.HandshakeReject += s.HandshakeReject
		t.Published += s.Published
		t.Delivered += s.Delivered
		t.Dropped += s.Dropped
		t.QueueFull += s.QueueFull
		t.Conflated += s.Conflated
		t.DroppedFull += s.DroppedFull
		for _, b := range s.DeliveryLatency {
			t.DeliveryLatency = addBucket(t.DeliveryLatency, b.LE, b.Count)
		}
		if s.Err != "" && t.Err == "" {
			t.Err = s.URL + ": " + s.Err
		}
	}
	return t
}

// addBucket adds count to the bucket le, keeping the list sorted.
func addBucket(bs []promBucket, le, count float64) []promBucket {
	i := sort.Search(len(bs), func(i int) bool { return bs[i].LE >= le })
	if i < len(bs) && bs[i].LE == le {
		bs[i].Count += count
		return bs
	}
	return slices.Insert(bs, i, promBucket{LE: le, Count: count})
}

// promDelta returns the buckets of end minus start (same bounds).
func promDelta(end, start []promBucket) []promBucket {
	out := slices.Clone(end)
	for _, b := range start {
		i := sort.Search(len(out), func(i int) bool { return out[i].LE >= b.LE })
		if i < len(out) && out[i].LE == b.LE {
			out[i].Count -= b.Count
		}
	}
	return out
}

// promQuantile estimates quantile q of cumulative buckets like
// Prometheus's histogram_quantile: linear within the bucket; in the +Inf
// bucket, the largest finite bound. It returns seconds, NaN when empty.
func promQuantile(bs []promBucket, q float64) float64 {
	if len(bs) == 0 || bs[len(bs)-1].Count <= 0 {
		return math.NaN()
	}
	total := bs[len(bs)-1].Count
	rank := q * total
	prevLE, prevCount := 0.0, 0.0
	for _, b := range bs {
		if b.Count >= rank {
			if math.IsInf(b.LE, 1) {
				return prevLE
			}
			if b.Count == prevCount {
				return b.LE
			}
			return prevLE + (b.LE-prevLE)*(rank-prevCount)/(b.Count-prevCount)
		}
		prevLE, prevCount = b.LE, b.Count
	}
	return prevLE
}

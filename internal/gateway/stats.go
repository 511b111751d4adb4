package gateway

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

// The console's history (GET /api/v1/stats, a wsgate extension): every
// node keeps what it saw of the cluster at each heartbeat for the last
// statsWindow, read from the node records it fetches anyway (connections,
// and the message counters that give the rates), so that a console
// opened on any node draws the last minutes at once instead of only what
// the page itself sampled.

// statsWindow is how long the history goes back.
const statsWindow = 5 * time.Minute

// NodeSample is one node in a stats sample: its connections, and its
// messages published and delivered per second between its last two
// heartbeats (0 until two were seen).
type NodeSample struct {
	Connections  int     `json:"connections"`
	PublishRate  float64 `json:"publish_rate"`
	DeliveryRate float64 `json:"delivery_rate"`
}

// StatsSample is the cluster as one node saw it at T (Unix ms): every live
// node by id.
type StatsSample struct {
	T     int64                 `json:"t"`
	Nodes map[string]NodeSample `json:"nodes"`
}

// statsRing holds the samples of the last statsWindow, oldest first.
type statsRing struct {
	mu      sync.Mutex
	samples []StatsSample
	last    map[string]cluster.NodeInfo // each node's record at its last new heartbeat
	rates   map[string][2]float64       // and the rates computed then
}

// add records the live nodes of a node list read at now.
func (s *statsRing) add(now time.Time, nodes []cluster.NodeInfo, self string, staleAfter time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last, s.rates = map[string]cluster.NodeInfo{}, map[string][2]float64{}
	}
	sample := StatsSample{T: now.UnixMilli(), Nodes: make(map[string]NodeSample, len(nodes))}
	seen := make(map[string]bool, len(nodes))
	for _, x := range nodes {
		if x.ID != self && allocator.Stale(x, now, staleAfter) {
			continue
		}
		seen[x.ID] = true
		prev, ok := s.last[x.ID]
		if !ok || x.Heartbeat != prev.Heartbeat {
			var r [2]float64
			if dt := float64(x.Heartbeat-prev.Heartbeat) / 1000; ok && dt > 0 && x.StartedAt == prev.StartedAt {
				r = [2]float64{max(0, float64(x.Published-prev.Published)/dt), max(0, float64(x.Delivered-prev.Delivered)/dt)}
			}
			s.last[x.ID], s.rates[x.ID] = x, r
		}
		r := s.rates[x.ID]
		sample.Nodes[x.ID] = NodeSample{Connections: x.Connections, PublishRate: r[0], DeliveryRate: r[1]}
	}
	for id := range s.last {
		if !seen[id] {
			delete(s.last, id)
			delete(s.rates, id)
		}
	}
	s.samples = append(s.samples, sample)
	cut := sample.T - statsWindow.Milliseconds()
	i := 0
	for i < len(s.samples) && s.samples[i].T < cut {
		i++
	}
	s.samples = append(s.samples[:0], s.samples[i:]...)
}

// since returns the samples taken after t (Unix ms), oldest first.
func (s *statsRing) since(t int64) []StatsSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []StatsSample{}
	for _, x := range s.samples {
		if x.T > t {
			out = append(out, x)
		}
	}
	return out
}

// messageCounts reads the node's message counters:
// wsgate_messages_published_total summed over its targets, and
// wsgate_messages_delivered_total.
func (n *Node) messageCounts() (published, delivered int64) {
	for _, t := range []string{protocol.TargetUser, protocol.TargetRoom, protocol.TargetBroadcast} {
		published += counterNow(n.metrics.Published.WithLabelValues(t))
	}
	return published, counterNow(n.metrics.Delivered)
}

func counterNow(c prometheus.Counter) int64 {
	var d dto.Metric
	if c.Write(&d) != nil {
		return 0
	}
	return int64(d.GetCounter().GetValue())
}

// Stats answers GET /api/v1/stats[?since=T]: the samples after T (Unix
// ms; default: all, the last 5 minutes) and the sampling period.
func (n *Node) Stats(since int64) any {
	return map[string]any{
		"interval_ms": n.cfg.HeartbeatInterval.Milliseconds(),
		"window_ms":   statsWindow.Milliseconds(),
		"samples":     n.stats.since(since),
	}
}

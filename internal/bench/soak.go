package bench

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The soak scenario: mixed load for --duration (10 minutes by default)
// on the same connections, to show that nothing grows and nothing is lost.
//
//   - --conns connections, one user each, otherwise idle;
//   - churn: --churn-rate of them closed and reopened per second
//     (alternately with a close frame and by dropping the socket);
//   - --rate reliable user messages per second through
//     /api/v1/publish/batch, round-robin over the users; each one is
//     checked for loss and duplication (its stream index, and its seq on
//     the raw frame: a seq at or below the last one received is out of
//     order). A churned connection resumes with since = its last seq, so
//     it misses nothing and gets nothing twice;
//   - --broadcast-rate broadcasts per second to every connection (not
//     reliable: a connection that is reopening at that moment misses it;
//     counted, and duplicates must be 0);
//   - the nodes' own heartbeats and route refreshes.
//
// Every --sample-every the bench reads each node's RSS, goroutines and
// descriptors (its Redis pool left out, as in the leak check). After
// --warmup, each must stay within --tolerance percent of its baseline,
// the median of the first tenth of the samples after the warm-up (at
// least three). Goroutines and descriptors also get an absolute allowance
// (soakSlack): a burst of work runs a few goroutines for a moment, and
// connections being reopened hold their descriptors for a moment.

// soakSlack is the absolute allowance of goroutines and descriptors.
const soakSlack = 10

// SoakReport is the soak's broadcasts, node series and stability verdicts.
type SoakReport struct {
	ChurnRate         float64         `json:"churn_rate"`
	BroadcastRate     float64         `json:"broadcast_rate"`
	WarmupS           float64         `json:"warmup_s"`
	SampleEveryS      float64         `json:"sample_every_s"`
	TolerancePct      float64         `json:"tolerance_pct"`
	Broadcasts        int64           `json:"broadcasts_sent"`
	BroadcastErrors   int64           `json:"broadcast_errors"`
	BroadcastReceived int64           `json:"broadcast_received"`
	BroadcastDups     int64           `json:"broadcast_duplicated"`
	BroadcastMissed   int64           `json:"broadcast_missed"` // sent x connections - received: connections reopening at the time
	BroadcastLatency  LatencyReport   `json:"broadcast_latency"`
	Samples           []SoakSample    `json:"samples"`
	Stability         []SoakStability `json:"stability"`
}

// SoakSample is one reading of every node, T seconds after the load began.
type SoakSample struct {
	T     float64    `json:"t_s"`
	Nodes []SoakNode `json:"nodes"`
}

// SoakNode is one node's figures in a sample.
type SoakNode struct {
	RSSBytes    float64 `json:"rss_bytes"`
	Goroutines  float64 `json:"goroutines"`
	FDs         float64 `json:"fds"` // open descriptors less the Redis pool
	Connections float64 `json:"connections"`
	Err         string  `json:"error,omitempty"`
}

// SoakStability is one node's metric after the warm-up.
type SoakStability struct {
	Node      string  `json:"node"`
	Metric    string  `json:"metric"`
	Base      float64 `json:"base"`
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
	MaxDevPct float64 `json:"max_deviation_pct"`
	Allowed   float64 `json:"allowed"` // absolute deviation allowed
	Samples   int     `json:"samples"`
	OK        bool    `json:"ok"`
}

// soakState is the soak's part of the runner.
type soakState struct {
	bstream            *stream // the broadcasts (not in runner.streams)
	bsent, berrs       atomic.Int64
	brecv, bdups       atomic.Int64
	blat               Histogram
	mu                 sync.Mutex
	samples            []SoakSample
	loadStart, loadEnd time.Time
}

// soak runs the load phase: reliable user messages, broadcasts, churn and
// the node sampler, together for --duration.
func (r *runner) soak(ctx context.Context) {
	r.setPhase("soak")
	r.soakState.loadStart = time.Now()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() { r.publish(ctx) })
	wg.Go(func() { r.churnAt(ctx, r.cfg.ChurnRate, r.cfg.Duration) })
	wg.Go(func() { r.soakBroadcasts(ctx) })
	var sampler sync.WaitGroup
	sampler.Go(func() { r.soakSampler(ctx, stop) })
	wg.Wait()
	r.setPhase("soak")
	r.soakState.loadEnd = time.Now()
	close(stop)
	sampler.Wait()
}

// soakSampler reads the nodes every --sample-every until stop.
func (r *runner) soakSampler(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(r.cfg.SampleEvery)
	defer t.Stop()
	for {
		r.soakSample(ctx)
		select {
		case <-t.C:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (r *runner) soakSample(ctx context.Context) {
	ss := r.scraper.scrape(ctx)
	p := SoakSample{T: time.Since(r.soakState.loadStart).Seconds()}
	for _, s := range ss {
		p.Nodes = append(p.Nodes, SoakNode{RSSBytes: s.RSSBytes, Goroutines: s.Goroutines, FDs: s.OpenFDs - s.BackendConns, Connections: s.Connections, Err: s.Err})
	}
	st := &r.soakState
	st.mu.Lock()
	st.samples = append(st.samples, p)
	st.mu.Unlock()
}

// soakBroadcasts publishes --broadcast-rate broadcasts per second for
// --duration (rate x duration of them), one request each.
func (r *runner) soakBroadcasts(ctx context.Context) {
	st := r.soakState.bstream
	every := time.Duration(float64(time.Second) / r.cfg.BroadcastRate)
	t := time.NewTicker(every)
	defer t.Stop()
	total := max(1, int(r.cfg.BroadcastRate*r.cfg.Duration.Seconds()))
	for k := range total {
		idx := st.next.Add(1) - 1
		body := r.appendPublish(nil, pubMsg{st: st, idx: idx}, time.Now().UnixNano())
		api := r.cfg.API[k%len(r.cfg.API)]
		resp, err := r.apiDo(ctx, http.MethodPost, api+"/api/v1/publish", body)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		if err != nil {
			st.fail(idx)
			r.soakState.berrs.Add(1)
		} else {
			r.soakState.bsent.Add(1)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// onBroadcast accounts one soak broadcast received by the slot's reader.
func (s *slot) onBroadcast(p payload, now int64) {
	st := &s.r.soakState
	st.blat.Record(time.Duration(now - p.ts))
	if isNew, _ := s.bset.add(p.idx); isNew {
		st.brecv.Add(1)
	} else {
		st.bdups.Add(1)
	}
}

// soakReport gathers the soak's figures and judges the series.
func (r *runner) soakReport() *SoakReport {
	st := &r.soakState
	st.mu.Lock()
	samples := slices.Clone(st.samples)
	st.mu.Unlock()
	rep := &SoakReport{
		ChurnRate: r.cfg.ChurnRate, BroadcastRate: r.cfg.BroadcastRate,
		WarmupS: r.cfg.Warmup.Seconds(), SampleEveryS: r.cfg.SampleEvery.Seconds(), TolerancePct: r.cfg.TolerancePct,
		Broadcasts: st.bsent.Load(), BroadcastErrors: st.berrs.Load(),
		BroadcastReceived: st.brecv.Load(), BroadcastDups: st.bdups.Load(),
		BroadcastLatency: latencyReport(st.blat.Snapshot(), false),
		Samples:          samples,
	}
	rep.BroadcastMissed = rep.Broadcasts*int64(len(r.slots)) - rep.BroadcastReceived
	for i, u := range r.cfg.Metrics {
		for _, m := range []struct {
			name  string
			get   func(SoakNode) float64
			slack float64
		}{
			{"rss", func(n SoakNode) float64 { return n.RSSBytes }, 0},
			{"goroutines", func(n SoakNode) float64 { return n.Goroutines }, soakSlack},
			{"fds", func(n SoakNode) float64 { return n.FDs }, soakSlack},
		} {
			var ys []float64
			for _, p := range samples {
				if p.T >= rep.WarmupS && i < len(p.Nodes) && p.Nodes[i].Err == "" {
					ys = append(ys, m.get(p.Nodes[i]))
				}
			}
			rep.Stability = append(rep.Stability, stability(u, m.name, ys, rep.TolerancePct, m.slack))
		}
	}
	return rep
}

// stability judges one series after the warm-up: the baseline is the
// median of its first tenth (at least 3 samples); every sample must be
// within tolPct of it, or within slack.
func stability(node, metric string, ys []float64, tolPct, slack float64) SoakStability {
	s := SoakStability{Node: node, Metric: metric, Samples: len(ys)}
	if len(ys) < 4 {
		return s // too few samples: not OK
	}
	n := max(3, len(ys)/10)
	head := slices.Clone(ys[:n])
	slices.Sort(head)
	s.Base = head[len(head)/2]
	s.Min, s.Max = slices.Min(ys), slices.Max(ys)
	s.Allowed = max(s.Base*tolPct/100, slack)
	dev := math.Max(s.Max-s.Base, s.Base-s.Min)
	if s.Base > 0 {
		s.MaxDevPct = 100 * dev / s.Base
	}
	s.OK = dev <= s.Allowed
	return s
}

// soakChecks adds the soak's verdicts.
func (r *runner) soakChecks(rep *Report, add func(name string, ok bool, format string, a ...any)) {
	s := rep.Soak
	if s == nil {
		return
	}
	add("broadcasts", s.Broadcasts > 0 && s.BroadcastErrors == 0 && s.BroadcastDups == 0,
		"%d sent (%d failed), %d received, %d duplicated, %d missed by connections reopening", s.Broadcasts, s.BroadcastErrors, s.BroadcastReceived, s.BroadcastDups, s.BroadcastMissed)
	if ch := rep.Churn; ch != nil {
		add("churn", ch.Cycles > 0 && ch.Pending == 0, "%d cycles, %d reopened, %d pending", ch.Cycles, ch.Reopened, ch.Pending)
	}
	for _, st := range s.Stability {
		add("stable "+st.Metric, st.OK, "%s: base %s, min %s, max %s: %.1f %% off (allowed %s, %d samples after %.0fs of warm-up)",
			st.Node, fmtMetric(st.Metric, st.Base), fmtMetric(st.Metric, st.Min), fmtMetric(st.Metric, st.Max), st.MaxDevPct,
			fmtMetric(st.Metric, st.Allowed), st.Samples, s.WarmupS)
	}
}

func fmtMetric(metric string, v float64) string {
	if metric == "rss" {
		return fmtBytes(v)
	}
	return fmt.Sprintf("%.0f", v)
}

// writeSoak writes the soak's lines of the summary.
func (rep *Report) writeSoak(tw io.Writer) {
	s := rep.Soak
	if s == nil {
		return
	}
	l := s.BroadcastLatency
	fmt.Fprintf(tw, "broadcasts\tsent %d\treceived %d\tduplicated %d\tmissed %d (reopening)\tlatency p50 %s p99 %s max %s\n",
		s.Broadcasts, s.BroadcastReceived, s.BroadcastDups, s.BroadcastMissed, fmtMS(l.P50MS), fmtMS(l.P99MS), fmtMS(l.MaxMS))
	fmt.Fprintf(tw, "node series\t%d samples every %gs\twarm-up %gs\ttolerance %g %%\n", len(s.Samples), s.SampleEveryS, s.WarmupS, s.TolerancePct)
	for _, st := range s.Stability {
		fmt.Fprintf(tw, "  %s %s\tbase %s\tmin %s\tmax %s\t%.1f %% off\n", st.Node, st.Metric,
			fmtMetric(st.Metric, st.Base), fmtMetric(st.Metric, st.Min), fmtMetric(st.Metric, st.Max), st.MaxDevPct)
	}
}

// soakColors tell the nodes apart in the soak's charts.
var soakColors = []string{"#2b7bb9", "#e08a1e", "#39a845", "#c8322d", "#7a4fb5", "#8c564b", "#e377c2", "#555555"}

// soakCharts plots each node's RSS, goroutines, descriptors and
// connections over the soak (one line per node), the warm-up included.
func (rep *Report) soakCharts() []template.HTML {
	s := rep.Soak
	if s == nil || len(s.Samples) == 0 {
		return nil
	}
	xs := make([]float64, len(s.Samples))
	for i, p := range s.Samples {
		xs[i] = p.T
	}
	var out []template.HTML
	for _, m := range []struct {
		title string
		get   func(SoakNode) float64
	}{
		{"Node RSS (MiB) during the soak", func(n SoakNode) float64 { return n.RSSBytes / (1 << 20) }},
		{"Node goroutines during the soak", func(n SoakNode) float64 { return n.Goroutines }},
		{"Node open descriptors (less the Redis pool) during the soak", func(n SoakNode) float64 { return n.FDs }},
		{"Node connections during the soak", func(n SoakNode) float64 { return n.Connections }},
	} {
		var ss []series
		for i := range rep.Config.Metrics {
			ys := make([]float64, len(s.Samples))
			for k, p := range s.Samples {
				ys[k] = math.NaN()
				if i < len(p.Nodes) && p.Nodes[i].Err == "" {
					ys[k] = m.get(p.Nodes[i])
				}
			}
			ss = append(ss, series{fmt.Sprintf("node %d", i+1), soakColors[i%len(soakColors)], ys})
		}
		out = append(out, lineChart(m.title, xs, ss, false))
	}
	return out
}

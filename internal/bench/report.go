package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// Report is every figure of one run; it is what --json writes.
type Report struct {
	Scenario string    `json:"scenario"`
	RunID    string    `json:"run_id"`
	Started  time.Time `json:"started"`
	ElapsedS float64   `json:"elapsed_s"`
	Error    string    `json:"error,omitempty"`

	Config      ReportConfig       `json:"config"`
	Connections ConnectionsReport  `json:"connections"`
	Messages    *MessagesReport    `json:"messages,omitempty"`
	Latency     *LatencyReport     `json:"latency,omitempty"`
	PublishAPI  *LatencyReport     `json:"publish_request,omitempty"`
	Churn       *ChurnReport       `json:"churn,omitempty"`
	Storm       *StormReport       `json:"storm,omitempty"`
	Sends       *SendsReport       `json:"sends,omitempty"`
	Soak        *SoakReport        `json:"soak,omitempty"`
	Listen      *ListenReport      `json:"listen,omitempty"`
	Downstream  *DownstreamReport  `json:"downstream,omitempty"`
	Ticker      *TickerReport      `json:"ticker,omitempty"`
	Nodes       []NodeReport       `json:"nodes"`
	Total       NodeReport         `json:"nodes_total"`
	Derived     Derived            `json:"derived"`
	Checks      []Check            `json:"checks"`
	Warnings    []string           `json:"warnings,omitempty"`
	Bench       SelfReport         `json:"bench_process"`
	Timeline    []Point            `json:"timeline"`
	Phases      map[string]float64 `json:"phases_s"` // when each phase was sampled, seconds since the start
}

// ReportConfig is the configuration of the run (secrets left out).
type ReportConfig struct {
	URLs       []string `json:"url"`
	Allocator  string   `json:"allocator,omitempty"`
	API        []string `json:"api"`
	Metrics    []string `json:"metrics"`
	SourceIPs  int      `json:"source_ips"`
	Conns      int      `json:"conns"`
	Users      int      `json:"users"`
	Rooms      int      `json:"rooms,omitempty"`
	Rate       float64  `json:"rate"`
	DurationS  float64  `json:"duration_s"`
	SettleS    float64  `json:"settle_s"`
	Ramp       float64  `json:"ramp"`
	Inflight   int      `json:"inflight"`
	Size       int      `json:"size"`
	Reliable   bool     `json:"reliable"`
	Class      string   `json:"class"`
	Format     string   `json:"format"`
	Auth       string   `json:"auth"` // "jwt" or "insecure ?user="
	GOMAXPROCS int      `json:"gomaxprocs"`
	Reader     string   `json:"reader"` // loop or goroutine (--reader)
	Join       string   `json:"join,omitempty"`

	BroadcastRate float64 `json:"broadcast_rate,omitempty"` // soak
	ChurnRate     float64 `json:"churn_rate,omitempty"`     // soak
}

// ConnectionsReport counts connections: the first attempt of each slot
// (attempted, succeeded) and every dial after it (reconnects, churn).
type ConnectionsReport struct {
	Attempted    int64             `json:"attempted"`
	Succeeded    int64             `json:"succeeded"`
	Failed       int64             `json:"failed"`
	FailReasons  map[string]int64  `json:"fail_reasons,omitempty"`
	FailSamples  map[string]string `json:"fail_samples,omitempty"`
	Dials        int64             `json:"dials"`
	DialFailures int64             `json:"dial_failures"`
	Drops        int64             `json:"drops"`      // connections lost that the bench did not close
	Reconnects   int64             `json:"reconnects"` // successful reconnections after a drop
	GaveUp       int64             `json:"gave_up"`    // slots that stopped (stop close code, 4xx handshake)
	PeakOpen     int64             `json:"peak_open"`
	OpenAtEnd    int64             `json:"open_at_end"`
	CloseCodes   map[string]int64  `json:"close_codes,omitempty"`
	RampS        float64           `json:"ramp_s"` // time to open every connection
	ConnectRate  float64           `json:"connect_rate"`
	ConnectTime  LatencyReport     `json:"connect_time"`        // with --join: dial to the join's reply
	JoinTime     *LatencyReport    `json:"join_time,omitempty"` // --join: welcome to the join's reply
}

// MessagesReport counts messages exactly. For each recipient connection,
// expected = received + lost; the totals are the sums over recipients.
type MessagesReport struct {
	Reliable        bool             `json:"reliable"`
	TargetRate      float64          `json:"target_rate"`
	AchievedRate    float64          `json:"achieved_rate"` // messages accepted by the API per second
	PublishLagMaxMS float64          `json:"publish_lag_max_ms"`
	PublishRequests int64            `json:"publish_requests"`
	Sent            int64            `json:"sent"` // messages accepted by the API
	PublishErrors   int64            `json:"publish_errors"`
	PublishErrorWhy map[string]int64 `json:"publish_error_reasons,omitempty"`
	Recipients      int64            `json:"recipients"` // connections that must receive messages
	Expected        int64            `json:"expected"`   // deliveries expected: sum over recipients of their stream's sent
	Received        int64            `json:"received"`   // distinct expected messages received
	Lost            int64            `json:"lost"`
	Duplicated      int64            `json:"duplicated"`
	Unconfirmed     int64            `json:"received_unconfirmed"` // received although the publish request failed
	Foreign         int64            `json:"foreign"`              // messages of other runs or publishers
	ForeignSample   string           `json:"foreign_sample,omitempty"`
	Misrouted       int64            `json:"misrouted"` // this run's messages for another recipient
	Untracked       int64            `json:"untracked"`
	OutOfOrder      int64            `json:"reliable_out_of_order"`
	GapFrames       int64            `json:"gap_frames"`
	GapMissed       int64            `json:"gap_missed"`
	BadFrames       int64            `json:"bad_frames"`
	ErrorFrames     int64            `json:"error_frames"`
	DeliveryRate    float64          `json:"delivery_rate"` // received per second of the publish phase
	DrainS          float64          `json:"drain_s"`       // from the last publish to the last expected message (or --settle)
	AllArrived      bool             `json:"all_arrived"`
}

// LatencyReport is a distribution in milliseconds.
type LatencyReport struct {
	Count     uint64   `json:"count"`
	MinMS     float64  `json:"min_ms"`
	MeanMS    float64  `json:"mean_ms"`
	P50MS     float64  `json:"p50_ms"`
	P90MS     float64  `json:"p90_ms"`
	P95MS     float64  `json:"p95_ms"`
	P99MS     float64  `json:"p99_ms"`
	P999MS    float64  `json:"p999_ms"`
	MaxMS     float64  `json:"max_ms"`
	Histogram []Bucket `json:"histogram,omitempty"`
}

// ChurnReport counts connection cycles.
type ChurnReport struct {
	Cycles   int64 `json:"cycles"`
	Polite   int64 `json:"closed_with_frame"`
	Abrupt   int64 `json:"dropped"`
	Reopened int64 `json:"reopened"`
	Skipped  int64 `json:"skipped"` // slot not open at its turn
	Pending  int64 `json:"pending"` // not reopened at the end
}

// StormReport is the reconnection after every connection dropped at once.
type StormReport struct {
	Dropped        int64   `json:"dropped"`
	Reconnected    int64   `json:"reconnected"`
	Complete       bool    `json:"complete"`
	FullReconnectS float64 `json:"full_reconnect_s"` // drop to the last reconnection
	MeanRate       float64 `json:"mean_rate"`        // reconnections per second
	PeakRate       float64 `json:"peak_rate"`        // best second
	Dials          int64   `json:"dials"`
	DialFailures   int64   `json:"dial_failures"`
	PerSecond      []int64 `json:"reconnects_per_second"` // second 0 starts at the drop
}

// NodeReport is one node's (or the sum of all nodes') samples by phase.
type NodeReport struct {
	URL      string      `json:"url"`
	Baseline *NodeSample `json:"baseline,omitempty"`
	Ready    *NodeSample `json:"ready,omitempty"`
	End      *NodeSample `json:"end,omitempty"`
	Final    *NodeSample `json:"final,omitempty"`
}

// Derived are the figures computed from the node samples (sums of all
// nodes). Zero when not measured.
type Derived struct {
	ConnsAdded         float64 `json:"node_connections_added"`
	RSSPerConnBytes    float64 `json:"rss_per_conn_bytes"`
	HeapPerConnBytes   float64 `json:"heap_per_conn_bytes"`
	GoroutinesPerConn  float64 `json:"goroutines_per_conn"`
	FDsPerConn         float64 `json:"fds_per_conn"`
	ConnectsCounted    float64 `json:"node_connects_counted"` // wsgate_connections_total, baseline to ready
	CPUPerConnectS     float64 `json:"cpu_per_connect_s"`
	ConnectCPUCores    float64 `json:"connect_cpu_cores"` // node CPU while connecting, in cores
	LoadS              float64 `json:"load_s"`            // ready to end
	LoadCPUSeconds     float64 `json:"load_cpu_s"`
	LoadCPUCores       float64 `json:"load_cpu_cores"`
	ServerDelivered    float64 `json:"server_delivered"` // wsgate_messages_delivered_total, ready to end
	ServerDropped      float64 `json:"server_dropped"`
	ServerQueueFull    float64 `json:"server_send_queue_full"`
	CPUPerDeliveredS   float64 `json:"cpu_per_delivered_s"`
	CPUPerCycleS       float64 `json:"cpu_per_churn_cycle_s,omitempty"`
	CPUPerReconnectS   float64 `json:"cpu_per_reconnect_s,omitempty"`
	ServerLatencyCount float64 `json:"server_delivery_latency_count,omitempty"`
	ServerLatencyP50MS float64 `json:"server_delivery_latency_p50_ms,omitempty"` // wsgate_delivery_latency_seconds, interpolated
	ServerLatencyP99MS float64 `json:"server_delivery_latency_p99_ms,omitempty"`
	GCCycles           float64 `json:"gc_cycles"`
	GCPauseTotalS      float64 `json:"gc_pause_total_s"`
	GCPauseMaxS        float64 `json:"gc_pause_max_s"`
	GCCPUS             float64 `json:"gc_cpu_s"`     // CPU the GC used, baseline to end
	GCCPUShare         float64 `json:"gc_cpu_share"` // of the nodes' CPU, baseline to end
	HandshakesRejected float64 `json:"handshakes_rejected"`
}

// Check is a pass/fail verdict of the run.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// SelfReport is the bench process itself.
type SelfReport struct {
	LoadCores    float64 `json:"load_cpu_cores"`  // bench CPU during the load phase, in cores
	CPUPerFrameS float64 `json:"cpu_per_frame_s"` // bench CPU per message frame read during the load phase
	Saturated    bool    `json:"saturated"`       // LoadCores >= 85 % of GOMAXPROCS: latency includes bench queueing
	CPUSeconds   float64 `json:"cpu_s"`
	MaxRSSBytes  float64 `json:"max_rss_bytes"`
	Goroutines   int     `json:"goroutines_at_end"`
	FDLimit      uint64  `json:"fd_limit"`
	BytesPerConn float64 `json:"max_rss_per_conn_bytes"`
}

// Failed reports whether a check failed.
func (rep *Report) Failed() bool {
	for _, c := range rep.Checks {
		if !c.OK {
			return true
		}
	}
	return false
}

func latencyReport(s *Snapshot, withHist bool) LatencyReport {
	l := LatencyReport{Count: s.N}
	if s.N == 0 {
		return l
	}
	l.MinMS, l.MeanMS, l.MaxMS = nsToMS(s.Min), ms(s.Mean()), nsToMS(s.Max)
	l.P50MS, l.P90MS, l.P95MS = ms(s.Quantile(.5)), ms(s.Quantile(.9)), ms(s.Quantile(.95))
	l.P99MS, l.P999MS = ms(s.Quantile(.99)), ms(s.Quantile(.999))
	if withHist {
		l.Histogram = s.Buckets()
	}
	return l
}

// report gathers every figure once the run is over (every goroutine done).
func (r *runner) report(timeline []Point, runErr error) *Report {
	cfg := r.cfg
	rep := &Report{
		Scenario: cfg.Scenario, RunID: r.runID, Started: r.start,
		ElapsedS: time.Since(r.start).Seconds(), Timeline: timeline,
		Phases: map[string]float64{},
	}
	if runErr != nil {
		rep.Error = runErr.Error()
	}
	auth := "insecure ?user="
	if cfg.JWTSecret != "" {
		auth = "jwt"
	}
	rep.Config = ReportConfig{
		URLs: cfg.URLs, Allocator: cfg.Allocator, API: cfg.API, Metrics: cfg.Metrics,
		SourceIPs: len(cfg.SourceIPs), Conns: cfg.Conns, Users: cfg.Users, Rate: cfg.Rate,
		DurationS: cfg.Duration.Seconds(), SettleS: cfg.Settle.Seconds(), Ramp: cfg.Ramp,
		Inflight: cfg.Inflight, Size: cfg.Size, Reliable: cfg.Reliable, Class: cfg.Class,
		Format: cfg.Format.String(), Auth: auth, GOMAXPROCS: runtime.GOMAXPROCS(0),
		Reader: r.readerName(), Join: cfg.Join,
	}
	if cfg.Scenario == ScenarioSoak {
		rep.Config.BroadcastRate, rep.Config.ChurnRate = cfg.BroadcastRate, cfg.ChurnRate
	}
	if cfg.Scenario == ScenarioRoom {
		rep.Config.Rooms = cfg.Rooms
	}

	// Connections.
	c := &rep.Connections
	c.Attempted, c.Succeeded = r.attempted.Load(), r.succeeded.Load()
	c.Failed = c.Attempted - c.Succeeded
	c.Dials, c.DialFailures = r.dials.Load(), r.dialFails.Load()
	c.Drops, c.Reconnects, c.GaveUp = r.drops.Load(), r.reconnects.Load(), r.gaveUp.Load()
	c.PeakOpen, c.OpenAtEnd = r.peakOpen.Load(), r.openAtEnd
	r.mu.Lock()
	if len(r.failReasons) > 0 {
		c.FailReasons, c.FailSamples = maps.Clone(r.failReasons), maps.Clone(r.failSample)
	}
	if len(r.closeCodes) > 0 {
		c.CloseCodes = map[string]int64{}
		for code, n := range r.closeCodes {
			c.CloseCodes[strconv.Itoa(code)] = n
		}
	}
	r.mu.Unlock()
	if !r.readyAt.IsZero() {
		c.RampS = r.readyAt.Sub(r.start).Seconds()
		if c.RampS > 0 {
			c.ConnectRate = float64(c.Succeeded) / c.RampS
		}
	}
	c.ConnectTime = latencyReport(r.connLat.Snapshot(), true)
	if cfg.Join != "" {
		j := latencyReport(r.joinLat.Snapshot(), false)
		c.JoinTime = &j
	}

	// Messages.
	if cfg.needsAPI() || cfg.Scenario == ScenarioDownstream {
		rep.Messages = r.messagesReport()
		l := latencyReport(r.lat.Snapshot(), true)
		rep.Latency = &l
		a := latencyReport(r.apiLat.Snapshot(), false)
		rep.PublishAPI = &a
	}
	if cfg.Scenario == ScenarioChurn || cfg.Scenario == ScenarioSoak {
		rep.Churn = &ChurnReport{
			Cycles: r.churnCycles.Load(), Polite: r.churnPolite.Load(), Abrupt: r.churnAbrupt.Load(),
			Reopened: r.churnDone.Load(), Skipped: r.churnSkipped.Load(), Pending: r.churnPending.Load(),
		}
	}
	if cfg.Scenario == ScenarioStorm {
		rep.Storm = r.stormReport()
	}
	if cfg.Scenario == ScenarioDownstream {
		rep.Downstream = r.downstreamReport(rep)
	}
	if cfg.Scenario == ScenarioSoak {
		rep.Soak = r.soakReport()
	}
	if cfg.Listen {
		rep.Listen = r.listenReport()
	}
	if cfg.Scenario == ScenarioTicker {
		rep.Ticker = r.tickerReport()
	}
	if cfg.Scenario == ScenarioSend {
		rep.Sends = r.sendsReport()
		l := latencyReport(r.lat.Snapshot(), true) // write to reply
		rep.Latency = &l
	}

	// Nodes.
	r.mu.Lock()
	samples := maps.Clone(r.samples)
	r.mu.Unlock()
	for name := range samples {
		if len(samples[name]) > 0 {
			rep.Phases[name] = samples[name][0].At.Sub(r.start).Seconds()
		}
	}
	get := func(name string, i int) *NodeSample {
		ss := samples[name]
		if i < 0 {
			if len(ss) == 0 {
				return nil
			}
			t := sumSamples(ss)
			t.URL, t.At = "total", ss[0].At
			return &t
		}
		if i >= len(ss) {
			return nil
		}
		s := ss[i]
		return &s
	}
	for i, u := range cfg.Metrics {
		rep.Nodes = append(rep.Nodes, NodeReport{URL: u, Baseline: get("baseline", i), Ready: get("ready", i), End: get("end", i), Final: get("final", i)})
	}
	rep.Total = NodeReport{URL: "total", Baseline: get("baseline", -1), Ready: get("ready", -1), End: get("end", -1), Final: get("final", -1)}
	rep.Derived = r.derive(rep)
	rep.Checks = r.checks(rep)
	rep.Bench = selfReport(cfg.Conns)
	if a, b := r.selfReady, r.selfEnd; !a.at.IsZero() && !b.at.IsZero() {
		if d := b.at.Sub(a.at).Seconds(); d > 0 {
			rep.Bench.LoadCores = (b.cpu - a.cpu) / d
		}
		if n := b.frames - a.frames; n > 0 {
			rep.Bench.CPUPerFrameS = (b.cpu - a.cpu) / float64(n)
		}
		rep.Bench.Saturated = rep.Bench.LoadCores >= 0.85*float64(runtime.GOMAXPROCS(0))
	}
	if rep.Bench.Saturated {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("the bench used %.2f of its %d core(s) during the load: its own queueing is part of the latency "+
			"(give it more cores, or split the connections over several bench processes)", rep.Bench.LoadCores, runtime.GOMAXPROCS(0)))
	}
	return rep
}

// messagesReport does the exact count: for each recipient, the messages
// of its stream accepted by the API, minus those it received, are lost.
func (r *runner) messagesReport() *MessagesReport {
	m := &MessagesReport{
		Reliable: r.cfg.Reliable, TargetRate: r.cfg.Rate,
		PublishRequests: r.pubRequests.Load(), Sent: r.sent.Load(), PublishErrors: r.pubErrors.Load(),
		Foreign: r.foreign.Load(), Misrouted: r.misrouted.Load(), Untracked: r.untracked.Load(),
		OutOfOrder: r.outOfOrder.Load(), GapFrames: r.gapFrames.Load(), GapMissed: r.gapMissed.Load(),
		BadFrames: r.badFrames.Load(), ErrorFrames: r.errorFrames.Load(),
		PublishLagMaxMS: nsToMS(r.pubLag.Load()),
	}
	if v, ok := r.foreignSample.Load().(string); ok {
		m.ForeignSample = v
	}
	r.mu.Lock()
	if len(r.pubReasons) > 0 {
		m.PublishErrorWhy = maps.Clone(r.pubReasons)
	}
	r.mu.Unlock()
	for _, s := range r.slots {
		if s.stream == nil || !s.connected.Load() {
			continue
		}
		st := s.stream
		st.mu.Lock()
		failed := st.failed
		st.mu.Unlock()
		confirmed := st.next.Load() - uint64(len(failed))
		var unconfirmed uint64
		for _, f := range failed {
			if s.set.has(f) {
				unconfirmed++
			}
		}
		got := s.set.n - unconfirmed
		m.Recipients++
		m.Expected += int64(confirmed)
		m.Received += int64(got)
		m.Lost += int64(confirmed - got)
		m.Duplicated += int64(s.dups)
		m.Unconfirmed += int64(unconfirmed)
	}
	if !r.pubStart.IsZero() {
		d := r.pubEnd.Sub(r.pubStart).Seconds()
		if d > 0 {
			m.AchievedRate = float64(m.Sent) / d
			m.DeliveryRate = float64(m.Received) / d
		}
		if !r.drainedAt.IsZero() {
			m.DrainS = r.drainedAt.Sub(r.pubEnd).Seconds()
		}
	}
	m.AllArrived = m.Lost == 0
	return m
}

func (r *runner) stormReport() *StormReport {
	s := &StormReport{
		Dropped: r.stormVictims.Load(), Dials: r.stormDials1 - r.stormDials0,
		DialFailures: r.stormFails1 - r.stormFails0,
	}
	s.Reconnected = s.Dropped - r.stormLeft.Load()
	s.Complete = s.Dropped > 0 && s.Reconnected == s.Dropped
	if end := r.stormEnd.Load(); end > 0 && s.Reconnected > 0 {
		s.FullReconnectS = time.Unix(0, end).Sub(r.stormStart).Seconds()
		if s.FullReconnectS > 0 {
			s.MeanRate = float64(s.Reconnected) / s.FullReconnectS
		}
	}
	last := 0
	for i := range r.stormPerSec {
		if r.stormPerSec[i].Load() > 0 {
			last = i
		}
	}
	for i := 0; i <= last && i < len(r.stormPerSec); i++ {
		n := r.stormPerSec[i].Load()
		s.PerSecond = append(s.PerSecond, n)
		s.PeakRate = max(s.PeakRate, float64(n))
	}
	return s
}

// derive computes per-connection and per-message costs from the sums of
// the nodes' samples.
func (r *runner) derive(rep *Report) Derived {
	var d Derived
	t := rep.Total
	if t.Baseline == nil || t.Ready == nil || t.End == nil || t.Baseline.Err != "" || t.End.Err != "" || t.Ready.Err != "" {
		return d
	}
	b, rd, e := t.Baseline, t.Ready, t.End
	// Memory per connection: baseline to end (after --settle for connect).
	d.ConnsAdded = e.Connections - b.Connections
	if d.ConnsAdded > 0 {
		d.RSSPerConnBytes = (e.RSSBytes - b.RSSBytes) / d.ConnsAdded
		d.HeapPerConnBytes = (e.HeapInuseBytes - b.HeapInuseBytes) / d.ConnsAdded
		d.GoroutinesPerConn = (e.Goroutines - b.Goroutines) / d.ConnsAdded
		d.FDsPerConn = (e.OpenFDs - b.OpenFDs) / d.ConnsAdded
	}
	// CPU per connect: baseline to ready (the connect phase only).
	if n := rd.ConnectionsTotal - b.ConnectionsTotal; n > 0 {
		d.ConnectsCounted = n
		d.CPUPerConnectS = (rd.CPUSeconds - b.CPUSeconds) / n
		if s := rd.At.Sub(b.At).Seconds(); s > 0 {
			d.ConnectCPUCores = (rd.CPUSeconds - b.CPUSeconds) / s
		}
	}
	// The load phase: ready to end.
	d.LoadS = e.At.Sub(rd.At).Seconds()
	d.LoadCPUSeconds = e.CPUSeconds - rd.CPUSeconds
	if d.LoadS > 0 {
		d.LoadCPUCores = d.LoadCPUSeconds / d.LoadS
	}
	d.ServerDelivered = e.Delivered - rd.Delivered
	d.ServerDropped = e.Dropped - rd.Dropped
	d.ServerQueueFull = e.QueueFull - rd.QueueFull
	if d.ServerDelivered > 0 {
		d.CPUPerDeliveredS = d.LoadCPUSeconds / d.ServerDelivered
	}
	if lat := promDelta(e.DeliveryLatency, rd.DeliveryLatency); len(lat) > 0 && lat[len(lat)-1].Count > 0 {
		d.ServerLatencyCount = lat[len(lat)-1].Count
		d.ServerLatencyP50MS = promQuantile(lat, 0.50) * 1e3
		d.ServerLatencyP99MS = promQuantile(lat, 0.99) * 1e3
	}
	if rep.Churn != nil && rep.Churn.Cycles > 0 && rep.Scenario == ScenarioChurn {
		d.CPUPerCycleS = d.LoadCPUSeconds / float64(rep.Churn.Cycles)
	}
	if rep.Storm != nil && rep.Storm.Reconnected > 0 {
		d.CPUPerReconnectS = d.LoadCPUSeconds / float64(rep.Storm.Reconnected)
	}
	if rep.Sends != nil && rep.Sends.OK > 0 {
		rep.Sends.CPUPerOKS = d.LoadCPUSeconds / float64(rep.Sends.OK)
	}
	d.GCCycles = e.GCCycles - b.GCCycles
	d.GCPauseTotalS = e.GCPauseSeconds - b.GCPauseSeconds
	d.GCPauseMaxS = e.GCPauseMax
	d.GCCPUS = e.GCCPUSeconds - b.GCCPUSeconds
	if cpu := e.CPUSeconds - b.CPUSeconds; cpu > 0 {
		d.GCCPUShare = d.GCCPUS / cpu
	}
	d.HandshakesRejected = e.HandshakeReject - b.HandshakeReject
	return d
}

// checks are the verdicts: exact accounting, no loss or duplicate of
// reliable messages, nothing misrouted, every connection opened, and the
// nodes back to their baseline once the bench closed everything.
func (r *runner) checks(rep *Report) []Check {
	var cs []Check
	add := func(name string, ok bool, format string, a ...any) {
		cs = append(cs, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, a...)})
	}
	c := rep.Connections
	add("connections", c.Succeeded == c.Attempted, "%d of %d opened", c.Succeeded, c.Attempted)
	if m := rep.Messages; m != nil {
		why := ""
		for _, k := range slices.Sorted(maps.Keys(m.PublishErrorWhy)) {
			why += fmt.Sprintf(", %s: %d", k, m.PublishErrorWhy[k])
		}
		by := "accepted by the API"
		if r.ds != nil {
			by = "written to the source"
		}
		add("publish", m.PublishErrors == 0 && m.Sent > 0, "%d messages %s, %d refused or failed%s", m.Sent, by, m.PublishErrors, why)
		add("accounting", m.Expected == m.Received+m.Lost, "expected %d = received %d + lost %d", m.Expected, m.Received, m.Lost)
		add("misrouted", m.Misrouted == 0, "%d messages reached a connection they were not for", m.Misrouted)
		if m.Reliable {
			add("reliable delivery", m.Lost == 0 && m.Duplicated == 0 && m.OutOfOrder == 0,
				"lost %d, duplicated %d, out of seq order %d", m.Lost, m.Duplicated, m.OutOfOrder)
		}
	}
	if s := rep.Sends; s != nil {
		add("send replies", s.OK > 0 && s.Unanswered == 0 && s.Refused == 0 && s.Foreign == 0,
			"%d written: ok %d + unavailable %d + refused %d (%s) + unanswered %d; %d foreign replies",
			s.Written, s.OK, s.Unavailable, s.Refused, s.RefusedCode, s.Unanswered, s.Foreign)
	}
	r.soakChecks(rep, add)
	r.tickerChecks(rep, add)
	if s := rep.Storm; s != nil {
		add("storm reconnection", s.Complete, "%d of %d reconnected in %.2fs", s.Reconnected, s.Dropped, s.FullReconnectS)
	}
	t := rep.Total
	if t.End != nil && t.Baseline != nil && t.End.Err == "" && (r.cfg.Scenario == ScenarioChurn || r.cfg.Scenario == ScenarioStorm) {
		want := t.Baseline.Connections + float64(c.OpenAtEnd)
		add("node connections", t.End.Connections == want, "node count %.0f, bench open %d + baseline %.0f", t.End.Connections, c.OpenAtEnd, t.Baseline.Connections)
	}
	if t.Final != nil && t.Baseline != nil {
		if t.Final.Err != "" || t.Baseline.Err != "" {
			why := t.Baseline.Err
			if why == "" {
				why = t.Final.Err
			}
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("no leak check and no node figures: /metrics unavailable (%s); set --metrics", why))
		} else {
			fds := ""
			if r.cfg.Scenario == ScenarioSend {
				fds = "; fds not checked: the upstream sink's pool is not exported"
			} else if r.cfg.Scenario == ScenarioDownstream {
				fds = "; fds not checked: the downstream sources' pools are not exported"
			}
			add("leak check", r.leakFree(*t.Baseline, *t.Final),
				"after close: connections %.0f (baseline %.0f), goroutines %.0f (baseline %.0f, tolerance %d), open fds %.0f (baseline %.0f, tolerance %d; Redis pool %.0f, baseline %.0f%s)",
				t.Final.Connections, t.Baseline.Connections, t.Final.Goroutines, t.Baseline.Goroutines, leakGoroutines,
				t.Final.OpenFDs, t.Baseline.OpenFDs, leakFDs, t.Final.BackendConns, t.Baseline.BackendConns, fds)
		}
	}
	if r.cleanupErr != "" {
		add("room cleanup", false, "%s", r.cleanupErr)
	}
	return cs
}

// selfCPU is the CPU time of the bench process so far, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
}

func selfReport(conns int) SelfReport {
	var s SelfReport
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.CPUSeconds = tvSeconds(ru.Utime) + tvSeconds(ru.Stime)
		s.MaxRSSBytes = float64(ru.Maxrss) * 1024
		if conns > 0 {
			s.BytesPerConn = s.MaxRSSBytes / float64(conns)
		}
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		s.FDLimit = rl.Cur
	}
	s.Goroutines = runtime.NumGoroutine()
	return s
}

func tvSeconds(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// writeFile writes a report file through fn.
func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteSummary writes the human summary table.
func (rep *Report) WriteSummary(w io.Writer) {
	cfg := rep.Config
	fmt.Fprintf(w, "\nwsgate bench %s (run %s): %d connections", rep.Scenario, rep.RunID, cfg.Conns)
	if cfg.Users != cfg.Conns {
		fmt.Fprintf(w, ", %d users", cfg.Users)
	}
	switch rep.Scenario {
	case ScenarioBroadcast, ScenarioPush, ScenarioRoom:
		fmt.Fprintf(w, ", %g msg/s for %gs, %d B data, class %s", cfg.Rate, cfg.DurationS, cfg.Size, cfg.Class)
		if cfg.Reliable {
			fmt.Fprint(w, ", reliable")
		}
		if rep.Scenario == ScenarioRoom {
			fmt.Fprintf(w, ", %d rooms", cfg.Rooms)
		}
	case ScenarioSoak:
		fmt.Fprintf(w, ", %g reliable msg/s, %g broadcasts/s, %g cycles/s for %gs", cfg.Rate, cfg.BroadcastRate, cfg.ChurnRate, cfg.DurationS)
	case ScenarioChurn:
		fmt.Fprintf(w, ", %g cycles/s for %gs", cfg.Rate, cfg.DurationS)
	case ScenarioSend:
		fmt.Fprintf(w, ", %g sends/s for %gs, %d B data", cfg.Rate, cfg.DurationS, cfg.Size)
	case ScenarioDownstream:
		fmt.Fprintf(w, ", %g reliable records/s for %gs, %d B data, class %s", cfg.Rate, cfg.DurationS, cfg.Size, cfg.Class)
	case ScenarioTicker:
		fmt.Fprintf(w, ", %g updates/s for %gs, %d B data", cfg.Rate, cfg.DurationS, cfg.Size)
	}
	if cfg.Join != "" {
		fmt.Fprintf(w, ", each joining room %s", cfg.Join)
	}
	fmt.Fprintf(w, ", %s, %.1fs\n", cfg.Format, rep.ElapsedS)
	if rep.Error != "" {
		fmt.Fprintf(w, "error: %s\n", rep.Error)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	c := rep.Connections
	fmt.Fprintf(tw, "connections\tattempted %d\tsucceeded %d\tfailed %d\treconnects %d\tdrops %d\tpeak open %d\n",
		c.Attempted, c.Succeeded, c.Failed, c.Reconnects, c.Drops, c.PeakOpen)
	for _, k := range slices.Sorted(maps.Keys(c.FailReasons)) {
		fmt.Fprintf(tw, "  failures\t%s: %d\t(e.g. %s)\n", k, c.FailReasons[k], trim(c.FailSamples[k], 100))
	}
	ct := c.ConnectTime
	label := "connect time"
	if cfg.Join != "" {
		label = "connect+join time"
	}
	fmt.Fprintf(tw, "%s\tp50 %s\tp99 %s\tmax %s\tmean %s\t%d dials, %.0f/s over %.2fs\n",
		label, fmtMS(ct.P50MS), fmtMS(ct.P99MS), fmtMS(ct.MaxMS), fmtMS(ct.MeanMS), c.Dials, c.ConnectRate, c.RampS)
	if j := c.JoinTime; j != nil {
		fmt.Fprintf(tw, "  join %s\tp50 %s\tp99 %s\tmax %s\tmean %s\t%d replies\n",
			cfg.Join, fmtMS(j.P50MS), fmtMS(j.P99MS), fmtMS(j.MaxMS), fmtMS(j.MeanMS), j.Count)
	}
	if m := rep.Messages; m != nil {
		fmt.Fprintf(tw, "messages\tsent %d\texpected %d\treceived %d\tlost %d\tduplicated %d\t(%d recipients)\n",
			m.Sent, m.Expected, m.Received, m.Lost, m.Duplicated, m.Recipients)
		fmt.Fprintf(tw, "  rates\tpublish %.0f/s (target %g)\tdelivery %.0f/s\tpublish errors %d\tdrain %.2fs\tforeign %d\n",
			m.AchievedRate, m.TargetRate, m.DeliveryRate, m.PublishErrors, m.DrainS, m.Foreign)
		if m.Reliable || m.GapFrames > 0 || m.OutOfOrder > 0 || m.Misrouted > 0 {
			fmt.Fprintf(tw, "  checks\tout of seq order %d\tgap frames %d (missed %d)\tmisrouted %d\tunconfirmed %d\n",
				m.OutOfOrder, m.GapFrames, m.GapMissed, m.Misrouted, m.Unconfirmed)
		}
		if l := rep.Latency; l != nil {
			fmt.Fprintf(tw, "latency\tp50 %s\tp95 %s\tp99 %s\tmax %s\t(p99.9 %s, mean %s, %d samples)\n",
				fmtMS(l.P50MS), fmtMS(l.P95MS), fmtMS(l.P99MS), fmtMS(l.MaxMS), fmtMS(l.P999MS), fmtMS(l.MeanMS), l.Count)
		}
		if a := rep.PublishAPI; a != nil && a.Count > 0 {
			label := "API request"
			if rep.Downstream != nil {
				label = "source write"
			}
			fmt.Fprintf(tw, "  %s\tp50 %s\tp99 %s\tmax %s\t%d requests\n", label, fmtMS(a.P50MS), fmtMS(a.P99MS), fmtMS(a.MaxMS), a.Count)
		}
	}
	rep.writeDownstream(tw)
	if s := rep.Sends; s != nil {
		fmt.Fprintf(tw, "sends\twritten %d\tok %d\tunavailable %d\trefused %d\tunanswered %d\t(skipped %d, write errors %d)\n",
			s.Written, s.OK, s.Unavailable, s.Refused, s.Unanswered, s.Skipped, s.WriteErrors)
		fmt.Fprintf(tw, "  rates\twritten %.0f/s (target %g)\tok %.0f/s\tlag max %s\n", s.WriteRate, s.TargetRate, s.OKRate, fmtMS(s.PublishLagMS))
		for _, k := range slices.Sorted(maps.Keys(s.UnavailableWhy)) {
			fmt.Fprintf(tw, "  unavailable\t%d\t%s\n", s.UnavailableWhy[k], k)
		}
		if l := rep.Latency; l != nil {
			fmt.Fprintf(tw, "reply latency\tp50 %s\tp95 %s\tp99 %s\tmax %s\t(p99.9 %s, mean %s, %d replies)\n",
				fmtMS(l.P50MS), fmtMS(l.P95MS), fmtMS(l.P99MS), fmtMS(l.MaxMS), fmtMS(l.P999MS), fmtMS(l.MeanMS), l.Count)
		}
	}
	if ch := rep.Churn; ch != nil {
		fmt.Fprintf(tw, "churn\tcycles %d\tclose frame %d\tdropped %d\treopened %d\tskipped %d\tpending %d\n",
			ch.Cycles, ch.Polite, ch.Abrupt, ch.Reopened, ch.Skipped, ch.Pending)
	}
	rep.writeSoak(tw)
	rep.writeListen(tw)
	rep.writeTicker(tw)
	if s := rep.Storm; s != nil {
		fmt.Fprintf(tw, "storm\tdropped %d\treconnected %d\tfull reconnection %.2fs\trate mean %.0f/s peak %.0f/s\tdials %d (failed %d)\n",
			s.Dropped, s.Reconnected, s.FullReconnectS, s.MeanRate, s.PeakRate, s.Dials, s.DialFailures)
	}
	tw.Flush()

	// Node table: one column per sampled phase, totals over the nodes.
	fmt.Fprintln(w)
	nodes := rep.Nodes
	if len(nodes) > 1 {
		nodes = append(nodes, rep.Total)
	}
	for _, n := range nodes {
		writeNodeTable(w, n)
	}

	d := rep.Derived
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if tb := rep.Total.Baseline; tb != nil && tb.Err == "" {
		rep.writeDerived(tw, d)
	}
	b := rep.Bench
	fmt.Fprintf(tw, "bench process\tCPU %.2fs\tmax RSS %s (%s per connection)\tfd limit %d\n",
		b.CPUSeconds, fmtBytes(b.MaxRSSBytes), fmtBytes(b.BytesPerConn), b.FDLimit)
	if b.CPUPerFrameS > 0 {
		fmt.Fprintf(tw, "  during the load\t%.2f cores of %d\t%s per message read (publishing included), reader %s\n", b.LoadCores, cfg.GOMAXPROCS, fmtSeconds(b.CPUPerFrameS), cfg.Reader)
	}
	tw.Flush()
	for _, wn := range rep.Warnings {
		fmt.Fprintf(w, "warning: %s\n", wn)
	}

	fmt.Fprintln(w)
	for _, ck := range rep.Checks {
		v := "ok  "
		if !ck.OK {
			v = "FAIL"
		}
		fmt.Fprintf(w, "%s %-18s %s\n", v, ck.Name, ck.Detail)
	}
}

// writeDerived writes the per-connection and per-message costs.
func (rep *Report) writeDerived(tw io.Writer, d Derived) {
	fmt.Fprintln(tw, "derived (all nodes)\t")
	if d.ConnsAdded > 0 && rep.Scenario == ScenarioConnect {
		fmt.Fprintf(tw, "  per connection\tRSS %s\theap %s\tgoroutines %.3f\tfds %.3f\t(%.0f connections added)\n",
			fmtBytes(d.RSSPerConnBytes), fmtBytes(d.HeapPerConnBytes), d.GoroutinesPerConn, d.FDsPerConn, d.ConnsAdded)
	}
	if d.ConnectsCounted > 0 {
		label := "CPU per connect"
		if rep.Config.Join != "" {
			label = "CPU per connect+join"
		}
		if d.CPUPerConnectS > 0 {
			fmt.Fprintf(tw, "  %s\t%s\t(%.2f cores while connecting)\n", label, fmtSeconds(d.CPUPerConnectS), d.ConnectCPUCores)
		} else {
			// process_cpu_seconds_total counts in 10 ms steps: a short
			// connect phase may not move it at all.
			fmt.Fprintf(tw, "  %s\tunder %s\t(the nodes' CPU counter did not move in %.0f connects; open more connections)\n",
				label, fmtSeconds(0.01/d.ConnectsCounted), d.ConnectsCounted)
		}
	}
	if rep.Scenario != ScenarioConnect {
		fmt.Fprintf(tw, "  load phase\t%.2fs\tCPU %.2fs\t%.2f cores\n", d.LoadS, d.LoadCPUSeconds, d.LoadCPUCores)
	}
	fmt.Fprintf(tw, "  GC\t%.0f cycles\tpauses %s total\tmax %s\tGC CPU ~%s (the runtime's estimate, ~%.1f %% of the nodes' CPU)\n",
		d.GCCycles, fmtSeconds(d.GCPauseTotalS), fmtSeconds(d.GCPauseMaxS), fmtSeconds(d.GCCPUS), 100*d.GCCPUShare)
	if rep.Messages != nil {
		fmt.Fprintf(tw, "  CPU per delivered message\t%s\t(%.0f delivered, %.0f dropped, %.0f queue full)\n",
			fmtSeconds(d.CPUPerDeliveredS), d.ServerDelivered, d.ServerDropped, d.ServerQueueFull)
		if d.ServerLatencyCount > 0 {
			fmt.Fprintf(tw, "  server delivery latency\tp50 %s\tp99 %s\t(wsgate_delivery_latency_seconds, %.0f fan-outs)\n",
				fmtMS(d.ServerLatencyP50MS), fmtMS(d.ServerLatencyP99MS), d.ServerLatencyCount)
		}
	}
	if d.CPUPerCycleS > 0 {
		fmt.Fprintf(tw, "  CPU per churn cycle\t%s\n", fmtSeconds(d.CPUPerCycleS))
	}
	if d.CPUPerReconnectS > 0 {
		fmt.Fprintf(tw, "  CPU per reconnection\t%s\n", fmtSeconds(d.CPUPerReconnectS))
	}
	if s := rep.Sends; s != nil && s.CPUPerOKS > 0 {
		fmt.Fprintf(tw, "  CPU per record\t%s\t(load phase CPU / %d ok replies)\n", fmtSeconds(s.CPUPerOKS), s.OK)
	}
	if d.HandshakesRejected > 0 {
		fmt.Fprintf(tw, "  handshakes rejected\t%.0f\n", d.HandshakesRejected)
	}
}

func writeNodeTable(w io.Writer, n NodeReport) {
	type col struct {
		name string
		s    *NodeSample
	}
	var cols []col
	for _, c := range []col{{"baseline", n.Baseline}, {"ready", n.Ready}, {"end", n.End}, {"final", n.Final}} {
		if c.s != nil {
			cols = append(cols, c)
		}
	}
	if len(cols) == 0 {
		return
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	rows := []struct {
		label string
		f     func(*NodeSample) string
	}{
		{"connections", func(s *NodeSample) string { return num(s.Connections) }},
		{"rss", func(s *NodeSample) string { return fmtBytes(s.RSSBytes) }},
		{"heap in use", func(s *NodeSample) string { return fmtBytes(s.HeapInuseBytes) }},
		{"goroutines", func(s *NodeSample) string { return num(s.Goroutines) }},
		{"open fds", func(s *NodeSample) string { return num(s.OpenFDs) }},
		{"cpu seconds", func(s *NodeSample) string { return strconv.FormatFloat(s.CPUSeconds, 'f', 2, 64) }},
		{"gc cycles", func(s *NodeSample) string { return num(s.GCCycles) }},
		{"gc pause max", func(s *NodeSample) string { return fmtSeconds(s.GCPauseMax) }},
		{"delivered", func(s *NodeSample) string { return num(s.Delivered) }},
		{"dropped", func(s *NodeSample) string { return num(s.Dropped) }},
	}
	allErr := true
	for _, c := range cols {
		allErr = allErr && c.s.Err != ""
	}
	if allErr {
		rows = nil
	}
	// Labels left-aligned, figures right-aligned under their phase.
	cells := make([][]string, len(rows)+1)
	cells[0] = []string{"node " + n.URL}
	for _, c := range cols {
		cells[0] = append(cells[0], c.name)
	}
	for i, r := range rows {
		cells[i+1] = []string{"  " + r.label}
		for _, c := range cols {
			cells[i+1] = append(cells[i+1], r.f(c.s))
		}
	}
	width := make([]int, len(cells[0]))
	for _, row := range cells {
		for j, v := range row {
			width[j] = max(width[j], len([]rune(v)))
		}
	}
	for _, row := range cells {
		var b strings.Builder
		for j, v := range row {
			pad := strings.Repeat(" ", width[j]-len([]rune(v)))
			if j == 0 {
				b.WriteString(v + pad)
			} else {
				b.WriteString("  " + pad + v)
			}
		}
		fmt.Fprintln(w, b.String())
	}
	for _, c := range cols {
		if c.s.Err != "" {
			fmt.Fprintf(w, "  %s: %s\n", c.name, c.s.Err)
		}
	}
	fmt.Fprintln(w)
}

func fmtMS(v float64) string { return fmtDur(time.Duration(v * 1e6)) }

func fmtSeconds(v float64) string { return fmtDur(time.Duration(v * 1e9)) }

// fmtDur prints a duration with 3 significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return sig3(float64(d)/1e3) + "µs"
	case d < time.Second:
		return sig3(float64(d)/1e6) + "ms"
	}
	return sig3(d.Seconds()) + "s"
}

func sig3(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func fmtBytes(v float64) string {
	neg := ""
	if v < 0 {
		neg, v = "-", -v
	}
	switch {
	case v >= 1<<30:
		return neg + sig3(v/(1<<30)) + " GiB"
	case v >= 1<<20:
		return neg + sig3(v/(1<<20)) + " MiB"
	case v >= 1<<10:
		return neg + sig3(v/(1<<10)) + " KiB"
	}
	return neg + strconv.FormatFloat(v, 'f', 0, 64) + " B"
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return strings.TrimSpace(s)
}

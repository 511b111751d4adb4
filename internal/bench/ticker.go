package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

// The ticker scenario (contract §19, conflation): every connection is a
// member of one room; the bench publishes realtime updates to it at
// --rate, update i carrying the conflation key k<i mod --keys>, so that
// each key's values (the update indices) increase. Most connections read
// at once and must get every update. --slow of them read slowly: they stop
// reading for --slow-stall, then read at full speed for half as long, and
// again, so that their queues on the node fill and the node replaces a
// queued update of a key by the newer one (counted as dropped, reason
// "conflated"). The slow readers stall in step, on a schedule that ends
// with a stall over the last --slow-stall of the updates: when the updates
// stop, every slow reader is behind, its queue full. Then they read at
// full speed: each must hold, for every key, the latest value published
// (a newer value replaces an older one, the latest is never lost), and no
// key's values may go backwards.
//
// A slow reader's socket is opened with a 2 KiB receive buffer and an
// MSS of 1400 bytes, like a phone on a mobile network: the node's kernel
// then takes some 40 to 70 KB for it before the node queues, rather than
// the ~4 MiB of loopback's 64 KiB MSS. Reading at full speed makes the
// kernel grow the node's send buffer (to ~2 MB on loopback), so the
// updates of a stall must outgrow that for the queue to fill: a run
// without conflation says so in a warning. A stall stays well under the
// 10 s after which a node closes a socket that takes no data, and never
// holds up the end of the run: it ends when the updates stop or when the
// run closes its connections.

// TickerConfig is the ticker scenario's part of a Config.
type TickerConfig struct {
	Keys      int           // --keys: conflation keys
	SlowPct   float64       // --slow: percent of the connections that read slowly
	SlowStall time.Duration // --slow-stall: how long a slow reader stops reading at a time
}

// Defaults and bounds of the ticker settings.
const (
	tickerKeys     = 10
	tickerSlowPct  = 10
	tickerStall    = 4 * time.Second
	maxTickerStall = 7 * time.Second // with the drain after it, well under the node's 10 s for a socket that takes no data
	minTickerStall = 100 * time.Millisecond
	maxTickerKeys  = 10000
)

// Socket options of a slow reader (see above).
const (
	slowRcvBuf = 2048
	slowMSS    = 1400
)

// finalGrace bounds how much the last stall may outlast the schedule,
// waiting for the last updates; the stall stays within maxTickerStall.
const finalGrace = time.Second

// slowKeepAlive is how often a slow reader sends a ping of its own: the
// node's pings wait for room in a queue that conflation keeps full.
const slowKeepAlive = 10 * time.Second

type tickerSettings struct {
	keys  int
	slow  string
	stall time.Duration
}

func registerTicker(set *config.Set, s *tickerSettings) {
	set.Int(&s.keys, "keys", tickerKeys, "ticker: conflation keys; update i carries key k<i mod keys>")
	set.String(&s.slow, "slow", strconv.Itoa(tickerSlowPct)+"%", "ticker: share of the connections that read slowly, in percent (0% to 100%)")
	set.Duration(&s.stall, "slow-stall", tickerStall, "ticker: a slow reader stops reading this long, then reads at full speed for half as long, and again "+
		"(100ms to 7s: a node closes a socket that takes no data for 10 s)")
}

// config parses the ticker settings; --slow takes 10% or 10.
func (s tickerSettings) config() (TickerConfig, error) {
	t := TickerConfig{Keys: s.keys, SlowStall: s.stall}
	if s.keys < 1 || s.keys > maxTickerKeys { // 0 is no default here, as it is in a Config
		return t, fmt.Errorf("--keys must be between 1 and %d, got %d", maxTickerKeys, s.keys)
	}
	v := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s.slow), "%"))
	pct, err := strconv.ParseFloat(v, 64)
	if err != nil || pct < 0 || pct > 100 {
		return t, fmt.Errorf("--slow: want a percentage from 0%% to 100%% (e.g. 10%%), got %q", s.slow)
	}
	t.SlowPct = pct
	return t, nil
}

// tickerDefaults: one room; realtime messages (the only class that
// conflates); one publish request at a time, so that each key's values
// reach the nodes in order.
func (c Config) tickerDefaults() Config {
	c.Rooms, c.Class, c.Inflight = 1, "realtime", 1
	if c.Ticker.Keys == 0 {
		c.Ticker.Keys = tickerKeys
	}
	if c.Ticker.SlowStall == 0 {
		c.Ticker.SlowStall = tickerStall
	}
	return c
}

func (c Config) validateTicker() error {
	if c.Scenario != ScenarioTicker {
		return nil
	}
	t := c.Ticker
	switch {
	case t.Keys < 1 || t.Keys > maxTickerKeys:
		return fmt.Errorf("--keys must be between 1 and %d, got %d", maxTickerKeys, t.Keys)
	case t.SlowPct < 0 || t.SlowPct > 100:
		return fmt.Errorf("--slow must be between 0%% and 100%%, got %g%%", t.SlowPct)
	case t.SlowStall < minTickerStall || t.SlowStall > maxTickerStall:
		return fmt.Errorf("--slow-stall must be between %s and %s, got %s", minTickerStall, maxTickerStall, t.SlowStall)
	case c.Transport != client.WebSocket:
		return fmt.Errorf("--transport: the ticker's slow readers need websocket, got %s", c.Transport)
	}
	return nil
}

// tickerState is the run's side of the ticker.
type tickerState struct {
	catchUp     chan struct{} // closed when the updates stop: slow readers read at full speed
	end         atomic.Int64  // Unix ns when the updates are due to stop; 0: not started
	catchUpOnce sync.Once
	readers     []*tickReader
	latest      []int64 // per key, once the updates stopped: the newest value accepted (-1: none)
	slowLat     Histogram
}

// tickReader is a slow reader: what it received, by key.
type tickReader struct {
	s       *slot
	last    []atomic.Int64 // per key: the last value received (-1: none)
	frames  atomic.Int64   // updates received
	regress atomic.Int64   // updates whose value was not above the key's previous one
	stalls  atomic.Int64
	pinged  time.Time // the reader goroutine's own: its last ping
}

// tickerSlots makes the room stream and marks the slow readers, spread
// evenly over the connections: round(conns × --slow %) of them.
func (r *runner) tickerSlots() {
	cfg := r.cfg
	st := &stream{id: 0, target: []byte(`{"type":"room","id":` + strconv.Quote(r.roomName(0)) + `}`)}
	r.streams = []*stream{st}
	r.tick.catchUp = make(chan struct{})
	r.tick.latest = r.latestValues() // none yet
	slow := func(n int) int { return int(float64(n)*cfg.Ticker.SlowPct/100 + 0.5) }
	for n, s := range r.slots {
		if slow(n+1) == slow(n) {
			s.stream = st
			continue
		}
		t := &tickReader{s: s, last: make([]atomic.Int64, cfg.Ticker.Keys)}
		for k := range t.last {
			t.last[k].Store(-1)
		}
		s.tick = t
		r.tick.readers = append(r.tick.readers, t)
	}
}

// appendKey appends the conflation key of update idx.
func (r *runner) appendKey(dst []byte, idx uint64) []byte {
	dst = append(dst, `,"key":"k`...)
	dst = strconv.AppendUint(dst, idx%uint64(r.cfg.Ticker.Keys), 10)
	return append(dst, '"')
}

// slowSocket sets a slow reader's socket options before it connects.
func slowSocket(_, _ string, c syscall.RawConn) error {
	var err error
	cerr := c.Control(func(fd uintptr) {
		if err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, slowRcvBuf); err == nil {
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, slowMSS)
		}
	})
	if cerr != nil {
		return cerr
	}
	return err
}

// onTick accounts one update received by a slow reader, then paces it:
// on the reader's goroutine, which reads this connection only.
func (s *slot) onTick(c *wsConn, p payload, now int64) {
	r, t := s.r, s.tick
	r.frames.Add(1)
	r.tick.slowLat.Record(time.Duration(now - p.ts))
	k := p.idx % uint64(len(t.last))
	if int64(p.idx) <= t.last[k].Load() {
		t.regress.Add(1)
	}
	t.last[k].Store(int64(p.idx))
	t.frames.Add(1)
	t.pace(c)
}

// tickerStart starts the slow readers' schedule: the updates are due to
// stop --duration from now.
func (r *runner) tickerStart() {
	r.tick.end.Store(time.Now().Add(r.cfg.Duration).UnixNano())
}

// stallLeft is how long a slow reader must still stall at now (Unix ns),
// 0 when it reads: the stalls are [end - S - j×1.5S, end - j×1.5S) for
// j = 0, 1, … (S = --slow-stall), so each is followed by S/2 of reading
// and the last one ends when the updates are due to stop.
func stallLeft(now, end int64, stall time.Duration) time.Duration {
	if end == 0 || now >= end {
		return 0
	}
	cycle := int64(stall + stall/2)
	if m := (end - now) % cycle; m > 0 && m <= int64(stall) {
		return time.Duration(m)
	}
	return 0
}

// pace stalls the reader when the schedule says so, unless the updates
// stopped or the run is closing; either ends a stall at once.
func (t *tickReader) pace(c *wsConn) {
	r := t.s.r
	select {
	case <-r.tick.catchUp:
		return
	case <-r.dialCtx.Done():
		return
	default:
	}
	now, end := time.Now().UnixNano(), r.tick.end.Load()
	d := stallLeft(now, end, r.cfg.Ticker.SlowStall)
	if d <= 0 {
		return
	}
	if time.Duration(end-now) <= r.cfg.Ticker.SlowStall {
		// The last stall lasts until the updates stopped, as a
		// publisher behind its schedule sends the last ones late; at
		// most finalGrace longer, and no longer than maxTickerStall.
		d = max(d, min(d+finalGrace, maxTickerStall))
	}
	t.stalls.Add(1)
	tm := time.NewTimer(d)
	select {
	case <-tm.C:
	case <-r.tick.catchUp:
	case <-r.dialCtx.Done():
	}
	tm.Stop()
	if now := time.Now(); now.Sub(t.pinged) >= slowKeepAlive {
		t.pinged = now
		ts := float64(now.UnixMilli())
		_ = c.WriteFrame(&protocol.ClientFrame{Type: protocol.TypePing, TS: &ts})
	}
}

// latestValues returns, per key, the newest update accepted by the API
// (-1 for a key that got none).
func (r *runner) latestValues() []int64 {
	st := r.streams[0]
	st.mu.Lock()
	failed := make(map[uint64]bool, len(st.failed))
	for _, f := range st.failed {
		failed[f] = true
	}
	st.mu.Unlock()
	latest := make([]int64, r.cfg.Ticker.Keys)
	for k := range latest {
		latest[k] = -1
	}
	left := len(latest)
	for i := int64(st.next.Load()) - 1; i >= 0 && left > 0; i-- {
		if k := i % int64(len(latest)); latest[k] < 0 && !failed[uint64(i)] {
			latest[k] = i
			left--
		}
	}
	return latest
}

// atLatest reports whether the reader's last value of every key is the
// latest one.
func (t *tickReader) atLatest(latest []int64) bool {
	for k, v := range latest {
		if t.last[k].Load() != v {
			return false
		}
	}
	return true
}

// slowAtLatest counts the slow readers that connected and those of them
// at the latest value of every key.
func (r *runner) slowAtLatest() (connected, at int) {
	for _, t := range r.tick.readers {
		if t.s.connected.Load() {
			connected++
			if t.atLatest(r.tick.latest) {
				at++
			}
		}
	}
	return connected, at
}

// tickerDrain ends the stalls and waits, at most --settle, until every
// fast reader got every update and every slow reader holds the latest
// value of every key.
func (r *runner) tickerDrain(ctx context.Context) {
	r.setPhase("draining")
	r.tick.latest = r.latestValues()
	r.tick.catchUpOnce.Do(func() { close(r.tick.catchUp) })
	fast := r.expected()
	deadline := time.Now().Add(r.cfg.Settle)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		conn, at := r.slowAtLatest()
		if r.received.Load() >= fast && at == conn {
			break
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	r.drainedAt = time.Now()
}

// TickerReport is the ticker's figures, by kind of reader, and the
// nodes' conflation counts over the run.
type TickerReport struct {
	Keys        int     `json:"keys"`
	SlowPct     float64 `json:"slow_pct"`
	SlowStallS  float64 `json:"slow_stall_s"`
	FastReaders int64   `json:"fast_readers"`
	SlowReaders int64   `json:"slow_readers"` // slow readers that connected

	FastExpected int64 `json:"fast_expected"` // updates × fast readers
	FastReceived int64 `json:"fast_received"`
	FastLost     int64 `json:"fast_lost"`

	SlowReceived     int64         `json:"slow_received"`      // updates the slow readers got
	SlowUnconflated  int64         `json:"slow_unconflated"`   // what they would have got with nothing conflated
	SlowStalls       int64         `json:"slow_stalls"`        // times a slow reader stopped reading
	SlowAtLatest     int64         `json:"slow_at_latest"`     // slow readers ending with the latest value of every key
	SlowBehindSample string        `json:"slow_behind_sample"` // the first slow reader that did not, and why
	Regressions      int64         `json:"regressions"`        // updates not newer than the key's previous one
	SlowLatency      LatencyReport `json:"slow_latency"`       // publish to receipt, slow readers

	// The nodes' counts from the baseline to the end sample (after the
	// drain).
	Conflated     float64 `json:"conflated"`       // wsgate_messages_dropped_total{reason="conflated"}
	QueueFullDrop float64 `json:"queue_full_drop"` // wsgate_messages_dropped_total{reason="queue_full"}
}

func (r *runner) tickerReport() *TickerReport {
	cfg := r.cfg
	t := &TickerReport{Keys: cfg.Ticker.Keys, SlowPct: cfg.Ticker.SlowPct, SlowStallS: cfg.Ticker.SlowStall.Seconds()}
	sent := int64(r.streams[0].next.Load()) - int64(r.streams[0].failedCount())
	for _, s := range r.slots {
		if !s.connected.Load() {
			continue
		}
		if s.tick == nil {
			t.FastReaders++
			continue
		}
		tk := s.tick
		t.SlowReaders++
		t.SlowReceived += tk.frames.Load()
		t.SlowStalls += tk.stalls.Load()
		t.Regressions += tk.regress.Load()
		if tk.atLatest(r.tick.latest) {
			t.SlowAtLatest++
		} else if t.SlowBehindSample == "" {
			for k, v := range r.tick.latest {
				if got := tk.last[k].Load(); got != v {
					t.SlowBehindSample = fmt.Sprintf("connection %d, key k%d: last value %d, latest published %d", s.n, k, got, v)
					break
				}
			}
		}
	}
	t.SlowUnconflated = sent * t.SlowReaders
	if m := r.messagesReport(); m != nil {
		t.FastExpected, t.FastReceived, t.FastLost = m.Expected, m.Received, m.Lost
	}
	t.SlowLatency = latencyReport(r.tick.slowLat.Snapshot(), false)
	base, end := sumSamples(r.sampled("baseline")), sumSamples(r.sampled("end"))
	if base.Err == "" && end.Err == "" {
		t.Conflated, t.QueueFullDrop = end.Conflated-base.Conflated, end.DroppedFull-base.DroppedFull
	}
	return t
}

// tickerChecks: fast readers lost nothing; slow readers ended with the
// latest value of every key, and no key went backwards. A run whose slow
// readers never filled their queue is warned about.
func (r *runner) tickerChecks(rep *Report, add func(name string, ok bool, format string, a ...any)) {
	t := rep.Ticker
	if t == nil {
		return
	}
	add("fast readers", t.FastLost == 0 && t.FastExpected > 0, "%d fast readers: received %d of %d updates, lost %d", t.FastReaders, t.FastReceived, t.FastExpected, t.FastLost)
	detail := fmt.Sprintf("%d of %d slow readers end with the latest value of each of %d keys; %d updates out of order", t.SlowAtLatest, t.SlowReaders, t.Keys, t.Regressions)
	if t.SlowBehindSample != "" {
		detail += " (" + t.SlowBehindSample + ")"
	}
	add("latest value", t.SlowAtLatest == t.SlowReaders && t.Regressions == 0, "%s", detail)
	if t.SlowReaders > 0 && t.Conflated == 0 && rep.Total.End != nil && rep.Total.End.Err == "" {
		rep.Warnings = append(rep.Warnings, "no update was conflated: the slow readers' queues never filled (raise --size or --slow-stall, or lower the node's WSGATE_SEND_QUEUE)")
	}
}

// writeTicker writes the ticker's lines of the summary.
func (rep *Report) writeTicker(w io.Writer) {
	t := rep.Ticker
	if t == nil {
		return
	}
	fmt.Fprintf(w, "ticker\t%d keys\t%d fast readers\t%d slow readers (%g%%, stall %gs)\n", t.Keys, t.FastReaders, t.SlowReaders, t.SlowPct, t.SlowStallS)
	fmt.Fprintf(w, "  fast readers\treceived %d\texpected %d\tlost %d\n", t.FastReceived, t.FastExpected, t.FastLost)
	fmt.Fprintf(w, "  slow readers\treceived %d of %d\tstalls %d\tat latest %d of %d\tout of order %d\n",
		t.SlowReceived, t.SlowUnconflated, t.SlowStalls, t.SlowAtLatest, t.SlowReaders, t.Regressions)
	l := t.SlowLatency
	fmt.Fprintf(w, "  slow latency\tp50 %s\tp99 %s\tmax %s\t(%d samples)\n", fmtMS(l.P50MS), fmtMS(l.P99MS), fmtMS(l.MaxMS), l.Count)
	fmt.Fprintf(w, "  node drops\tconflated %.0f\tqueue full %.0f\n", t.Conflated, t.QueueFullDrop)
}

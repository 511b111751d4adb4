package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/internal/downstream"
	"github.com/wsgate/wsgate/internal/netpoll"
	"github.com/wsgate/wsgate/protocol"
)

// maxDialing bounds the handshakes in progress at once, so that a stalled
// gateway does not get the whole --conns as simultaneous SYNs.
const maxDialing = 1000

// stream is one sequence of published messages and its recipients: the
// broadcast, one user (push) or one room. Indices are assigned in publish
// order; the ones whose publish failed are remembered so that the final
// count is exact.
type stream struct {
	id       uint64
	target   []byte // JSON {"type":..,"id":..}
	reliable bool   // published with "reliable":true
	next     atomic.Uint64

	mu     sync.Mutex
	failed []uint64
}

func (st *stream) fail(idx uint64) {
	st.mu.Lock()
	st.failed = append(st.failed, idx)
	st.mu.Unlock()
}

// runner is one run of a scenario: it owns every goroutine it starts
// (slots in wg, helpers in bg) and every counter of the report.
type runner struct {
	cfg   Config
	runID string
	start time.Time

	dialCtx   context.Context // canceled when the run stops: ends dials and backoff waits
	stopDials context.CancelFunc
	stopping  atomic.Bool
	wg        sync.WaitGroup // slot goroutines
	dialSem   chan struct{}

	slots   []*slot
	streams []*stream
	src     *sourcePicker
	apiHTTP *http.Client
	scraper *scraper

	lat     Histogram // end-to-end message latency
	connLat Histogram // connect time
	joinLat Histogram // --join: welcome to the join's reply
	apiLat  Histogram // publish request time

	// connections
	initialLeft          atomic.Int64
	initialDone          chan struct{}
	attempted, succeeded atomic.Int64 // first connection of each slot
	dials, dialFails     atomic.Int64 // every dial
	connects             atomic.Int64 // successful dials
	open, peakOpen       atomic.Int64
	drops, reconnects    atomic.Int64
	gaveUp               atomic.Int64

	// messages
	received, dups, foreign, misrouted, untracked atomic.Int64
	outOfOrder, gapFrames, gapMissed              atomic.Int64
	badFrames, errorFrames                        atomic.Int64
	sent, pubErrors, pubRequests                  atomic.Int64
	pubLag                                        atomic.Int64 // ns
	pubStart, pubEnd                              time.Time
	produced                                      int64

	target     atomic.Int64 // distinct receipts that complete the run
	targetOnce sync.Once
	targetDone chan struct{}

	sends     sendState // the send scenario
	soakState soakState // the soak scenario

	ds   *downstream.Producer // the downstream scenario's source (downstream.go)
	tick tickerState          // the ticker scenario

	// storm
	stormOn                  atomic.Bool
	stormLeft                atomic.Int64
	stormOnce                sync.Once
	stormDone                chan struct{}
	stormStart               time.Time
	stormEnd                 atomic.Int64 // Unix ns of the last victim's reconnection
	stormVictims             atomic.Int64
	stormPerSec              []atomic.Int64 // reconnections by second since the drop
	stormDials0, stormFails0 int64
	stormDials1, stormFails1 int64

	// churn
	churnPending, churnCycles, churnDone atomic.Int64
	churnPolite, churnAbrupt             atomic.Int64
	churnSkipped                         atomic.Int64

	readyAt, drainedAt, endAt time.Time
	selfReady, selfEnd        selfMark
	frames                    atomic.Int64 // message frames read
	openAtEnd                 int64
	cleanupErr                string

	mu          sync.Mutex
	failReasons map[string]int64
	failSample  map[string]string
	closeCodes  map[int]int64
	pubReasons  map[string]int64

	phase         atomic.Value // string
	foreignSample atomic.Value // string: the first foreign message

	samples map[string][]NodeSample // phase name -> per node
	order   []string                // phases sampled, in order

	prog *progress

	// The event loop reading the connections (loop.go); nil: every
	// connection is read by its slot's goroutine.
	poller    *netpoll.Poller
	readerErr string // why the event loop is not used, when --reader loop
	sweepStop chan struct{}
	sweepDone chan struct{}
}

func newRunner(cfg Config) *runner {
	var id [4]byte
	rand.Read(id[:])
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{
		cfg:         cfg,
		runID:       hex.EncodeToString(id[:]),
		dialCtx:     ctx,
		stopDials:   cancel,
		dialSem:     make(chan struct{}, cmp.Or(cfg.Dialing, maxDialing)),
		src:         newSourcePicker(cfg.SourceIPs),
		initialDone: make(chan struct{}),
		targetDone:  make(chan struct{}),
		stormDone:   make(chan struct{}),
		failReasons: map[string]int64{},
		failSample:  map[string]string{},
		closeCodes:  map[int]int64{},
		pubReasons:  map[string]int64{},
		samples:     map[string][]NodeSample{},
		apiHTTP: &http.Client{
			Timeout: 10 * time.Second,
			Transport: &http.Transport{
				MaxIdleConnsPerHost: cfg.Inflight + 16,
				DisableCompression:  true,
				IdleConnTimeout:     30 * time.Second,
				TLSClientConfig:     cfg.TLS,
			},
		},
		scraper: newScraper(cfg.Metrics, cfg.TLS),
	}
	if cfg.RunID != "" {
		r.runID = cfg.RunID
	}
	r.target.Store(1<<62 - 1)
	r.phase.Store("start")
	r.buildSlots()
	r.sends.sendSlots(cfg)
	return r
}

// user is the user of slot n in this run: bench-<--user-offset + n mod
// users>, so that several bench processes can hold distinct users.
func (r *runner) user(n int) string { return "bench-" + strconv.Itoa(r.cfg.UserOffset+n%r.cfg.Users) }

// roomName is room k of this run (unique per run, so that memberships of
// earlier runs never mix in).
func (r *runner) roomName(k int) string { return "bench-" + r.runID + "-" + strconv.Itoa(k) }

// buildSlots creates the slots and the streams they listen to.
func (r *runner) buildSlots() {
	cfg := r.cfg
	target := func(typ, id string) []byte {
		b := protocol.AppendJSONString([]byte(`{"type":`), typ)
		b = append(b, `,"id":`...)
		b = protocol.AppendJSONString(b, id)
		return append(b, '}')
	}
	switch cfg.Scenario {
	case ScenarioBroadcast:
		r.streams = []*stream{{id: 0, target: []byte(`{"type":"broadcast"}`)}}
	case ScenarioPush, ScenarioSoak, ScenarioDownstream:
		r.streams = make([]*stream, cfg.Users)
		for u := range cfg.Users {
			r.streams[u] = &stream{id: uint64(u), target: target(protocol.TargetUser, r.user(u)), reliable: cfg.Reliable}
		}
		if cfg.Scenario == ScenarioSoak {
			r.soakState.bstream = &stream{id: uint64(cfg.Users), target: []byte(`{"type":"broadcast"}`)}
		}
	case ScenarioRoom:
		r.streams = make([]*stream, cfg.Rooms)
		for k := range cfg.Rooms {
			r.streams[k] = &stream{id: uint64(k), target: target(protocol.TargetRoom, r.roomName(k))}
		}
	}
	if cfg.Scenario == ScenarioConnect && cfg.Listen {
		r.soakState.bstream = r.listenStream()
	}
	r.slots = make([]*slot, cfg.Conns)
	for n := range cfg.Conns {
		s := &slot{r: r, n: n, user: r.user(n)}
		u := n % cfg.Users
		switch cfg.Scenario {
		case ScenarioBroadcast:
			s.stream = r.streams[0]
		case ScenarioPush, ScenarioDownstream:
			s.stream = r.streams[u]
		case ScenarioSoak:
			s.stream, s.bcast = r.streams[u], r.soakState.bstream
		case ScenarioConnect:
			s.bcast = r.soakState.bstream // --listen; else nil
		case ScenarioRoom:
			s.stream = r.streams[u%cfg.Rooms]
		}
		r.slots[n] = s
	}
	if cfg.Scenario == ScenarioTicker {
		r.tickerSlots()
	}
}

func (r *runner) setPhase(p string) { r.phase.Store(p) }
func (r *runner) getPhase() string  { return r.phase.Load().(string) }

// sample scrapes every node and keeps the result under the phase name.
func (r *runner) sample(ctx context.Context, name string) []NodeSample {
	ss := r.scraper.scrape(ctx)
	r.mu.Lock()
	if _, ok := r.samples[name]; !ok {
		r.order = append(r.order, name)
	}
	r.samples[name] = ss
	r.mu.Unlock()
	return ss
}

func (r *runner) sampled(name string) []NodeSample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.samples[name]
}

// openAll starts every slot at --ramp per second and returns when each
// one has connected or failed its first attempt (or ctx ends).
func (r *runner) openAll(ctx context.Context) error {
	r.setPhase("connecting")
	n := len(r.slots)
	r.initialLeft.Store(int64(n))
	start := time.Now()
	launched := 0
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for launched < n {
		due := n
		if r.cfg.Ramp > 0 {
			due = min(n, 1+int(r.cfg.Ramp*time.Since(start).Seconds()))
		}
		for ; launched < due; launched++ {
			r.attempted.Add(1)
			r.wg.Add(1)
			go r.slots[launched].run()
		}
		if launched == n {
			break
		}
		select {
		case <-tick.C:
		case <-r.cfg.EndRamp: // the slots not launched are not attempted
			left := n - launched
			n = launched
			if left > 0 && r.initialLeft.Add(-int64(left)) == 0 {
				close(r.initialDone)
			}
		case <-ctx.Done():
			r.initialLeft.Add(-int64(n - launched))
			return ctx.Err()
		}
	}
	select {
	case <-r.initialDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// initialFinished is called once per slot when its first attempt ends.
func (r *runner) initialFinished(ok bool) {
	if ok {
		r.succeeded.Add(1)
	}
	if r.initialLeft.Add(-1) == 0 {
		close(r.initialDone)
	}
}

// gotOne counts a distinct message and signals the end of the wait when
// the expected count is reached.
func (r *runner) gotOne() {
	if r.received.Add(1) >= r.target.Load() {
		r.targetOnce.Do(func() { close(r.targetDone) })
	}
}

// setTarget sets the distinct receipts that complete the run.
func (r *runner) setTarget(n int64) {
	r.target.Store(n)
	if r.received.Load() >= n {
		r.targetOnce.Do(func() { close(r.targetDone) })
	}
}

func (r *runner) reconnected(s *slot) {
	r.reconnects.Add(1)
	if s.victim.Swap(false) && r.stormOn.Load() {
		now := time.Now()
		r.stormEnd.Store(now.UnixNano())
		if i := int(now.Sub(r.stormStart) / time.Second); i < len(r.stormPerSec) {
			r.stormPerSec[i].Add(1)
		}
		if r.stormLeft.Add(-1) == 0 {
			r.stormOnce.Do(func() { close(r.stormDone) })
		}
	}
}

func (r *runner) churnReopened() {
	r.churnDone.Add(1)
	r.churnPending.Add(-1)
}

func (r *runner) countFailure(reason string, err error) {
	r.mu.Lock()
	r.failReasons[reason]++
	if _, ok := r.failSample[reason]; !ok {
		r.failSample[reason] = err.Error()
	}
	r.mu.Unlock()
}

func (r *runner) countClose(code int) {
	r.mu.Lock()
	r.closeCodes[code]++
	r.mu.Unlock()
}

func (r *runner) countPubError(reason string, n int64) {
	r.pubErrors.Add(n)
	r.mu.Lock()
	r.pubReasons[reason] += n
	r.mu.Unlock()
}

// closeAll ends every connection politely (ack, close 1000), stops dials
// and backoff waits, and waits for every slot goroutine; connections whose
// close is not echoed within closeWait are closed at once.
func (r *runner) closeAll() {
	r.setPhase("closing")
	r.stopping.Store(true)
	r.stopDials()
	for _, s := range r.slots {
		if c := s.conn.Load(); c != nil {
			s.sayGoodbye(c)
		}
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	for _, s := range r.slots {
		if c := s.conn.Load(); c != nil {
			c.Close()
		}
	}
	<-done
}

// closeWait is how long closeAll waits for the servers' close echoes.
const closeWait = 5 * time.Second

// waitBaseline polls the nodes until their connection count is back to
// the baseline and their goroutines and descriptors are within tolerance
// of it, at most pollBound; it returns the last sample.
func (r *runner) waitBaseline(ctx context.Context, name string) []NodeSample {
	r.setPhase("leak check")
	base := sumSamples(r.sampled("baseline"))
	deadline := time.Now().Add(r.pollBound())
	for {
		ss := r.sample(ctx, name)
		t := sumSamples(ss)
		if t.Err != "" || base.Err != "" || r.leakFree(base, t) || !time.Now().Before(deadline) || ctx.Err() != nil {
			return ss
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// pollBound bounds the waits for the nodes (back to the baseline, holding
// the bench's connections) and for churned connections to reopen: --settle,
// at least minPoll. Each wait ends as soon as its condition holds.
func (r *runner) pollBound() time.Duration { return max(r.cfg.Settle, minPoll) }

const minPoll = 5 * time.Second

// Tolerances of the leak check: goroutines and descriptors may differ from
// the baseline by this much (HTTP keep-alive connections of the scrape,
// timers of the runtime). Descriptors are counted without the nodes'
// Redis pools (wsgate_backend_pool_connections), which grow under load
// and keep idle connections.
const (
	leakGoroutines = 5
	leakFDs        = 5
)

func leakFree(base, t NodeSample) bool {
	return t.Connections == base.Connections &&
		t.Goroutines <= base.Goroutines+leakGoroutines &&
		t.OpenFDs-t.BackendConns <= base.OpenFDs-base.BackendConns+leakFDs
}

// leakFree is the leak check of this run: the send scenario leaves the
// descriptors out, because the upstream sink's own connection pool (a
// Redis or NATS client of its own, not in wsgate_backend_pool_connections)
// grows under load and keeps idle connections too.
func (r *runner) leakFree(base, t NodeSample) bool {
	if r.cfg.Scenario == ScenarioSend || r.cfg.Scenario == ScenarioDownstream {
		t.OpenFDs, t.BackendConns = base.OpenFDs, base.BackendConns
	}
	return leakFree(base, t)
}

// waitNodeConns polls until the nodes hold want connections (at most
// pollBound), e.g. until closed ones have been cleaned up.
func (r *runner) waitNodeConns(ctx context.Context, name string, want float64) []NodeSample {
	deadline := time.Now().Add(r.pollBound())
	for {
		ss := r.sample(ctx, name)
		t := sumSamples(ss)
		if t.Err != "" || t.Connections == want || !time.Now().Before(deadline) || ctx.Err() != nil {
			return ss
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// startReader starts the event loop that reads the connections (unless
// --reader goroutine), and its idle sweep. Without it every connection is
// read by its slot's goroutine.
func (r *runner) startReader() {
	if r.cfg.Reader != ReaderLoop {
		return
	}
	// --spin: see netpoll.Options. On loopback the gateway's write also
	// pays for waking the bench's loop, a cost no remote client puts on
	// it; spinning avoids it but costs the bench a core.
	p, err := netpoll.New(netpoll.Options{Logger: slog.New(slog.DiscardHandler), Spin: r.cfg.Spin})
	if err != nil {
		r.readerErr = err.Error()
		return
	}
	r.poller = p
	r.sweepStop, r.sweepDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.sweepDone)
		r.sweepIdle(r.sweepStop)
	}()
}

// readerName is the reader in use, for the report.
func (r *runner) readerName() string {
	switch {
	case r.cfg.Transport != "" && r.cfg.Transport != "websocket":
		return ReaderGoroutine + " (" + string(r.cfg.Transport) + ")"

	case r.poller != nil:
		return ReaderLoop
	case r.readerErr != "":
		return ReaderGoroutine + " (event loop unavailable: " + r.readerErr + ")"
	}
	return ReaderGoroutine
}

// shutdown releases what the run holds after every goroutine ended.
func (r *runner) shutdown() {
	if r.poller != nil {
		close(r.sweepStop)
		<-r.sweepDone
		r.poller.Close()
	}
	r.stopDials()
	r.apiHTTP.CloseIdleConnections()
	r.scraper.close()
}

func (r *runner) String() string { return fmt.Sprintf("bench %s run %s", r.cfg.Scenario, r.runID) }

func (r *runner) stormVictimsLoad() int64 { return r.stormVictims.Load() }

// selfMark is the bench process's CPU time and frames read at a moment.
type selfMark struct {
	at     time.Time
	cpu    float64
	frames int64
}

func (r *runner) markSelf() selfMark {
	return selfMark{at: time.Now(), cpu: selfCPU(), frames: r.frames.Load()}
}

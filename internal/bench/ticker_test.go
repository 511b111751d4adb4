package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTicker runs a small ticker against a node whose send queue holds 16
// frames: 10 of the 20 connections read slowly, stalling 2 s at a time
// while 16 kB updates come at 100/s. That is more than their sockets and
// queues hold even once the node's kernel has grown its send buffer for
// them (on loopback, to about 2 MB after a read at full speed), so the
// node conflates, also during the last stall, which ends when the updates
// stop. Fast readers lose nothing; every slow reader ends with the latest
// value of each of the 5 keys, having received fewer updates than were
// sent; no key goes backwards.
func TestTicker(t *testing.T) {
	g := startGateway(t, "dev", "WSGATE_SEND_QUEUE=16")
	res := runBench(t, "ticker", "--url", g.wsURL(), "--conns", "20", "--slow", "50%", "--keys", "5",
		"--rate", "100", "--size", "16000", "--duration", "5s", "--slow-stall", "2s", "--settle", smokeSettle)
	checkCommon(t, res, 20)
	tk := res.rep.Ticker
	if tk == nil {
		t.Fatal("no ticker figures")
	}
	// On a loaded machine the publisher may stop short of 500; what was
	// accepted is what must arrive.
	sent := res.rep.Messages.Sent
	if sent < 100 || res.rep.Messages.PublishErrors != 0 {
		t.Errorf("sent %d (publish errors %d), want up to 500", sent, res.rep.Messages.PublishErrors)
	}
	if tk.FastReaders != 10 || tk.SlowReaders != 10 {
		t.Errorf("%d fast and %d slow readers, want 10 and 10", tk.FastReaders, tk.SlowReaders)
	}
	if tk.FastExpected != 10*sent || tk.FastReceived != tk.FastExpected || tk.FastLost != 0 {
		t.Errorf("fast readers received %d of %d (lost %d), want all %d", tk.FastReceived, tk.FastExpected, tk.FastLost, 10*sent)
	}
	if tk.Conflated <= 0 {
		t.Errorf("the node conflated %v updates, want some", tk.Conflated)
	}
	if tk.SlowAtLatest != 10 || tk.Regressions != 0 {
		t.Errorf("%d of 10 slow readers at the latest value (%s), %d updates out of order", tk.SlowAtLatest, tk.SlowBehindSample, tk.Regressions)
	}
	if tk.SlowUnconflated != 10*sent || tk.SlowReceived >= tk.SlowUnconflated || tk.SlowStalls < 10 {
		t.Errorf("slow readers received %d of %d in %d stalls: want fewer than all, at least one stall each", tk.SlowReceived, tk.SlowUnconflated, tk.SlowStalls)
	}
	if c := res.rep.Connections; c.Drops != 0 {
		t.Errorf("%d connections dropped (close codes %v): a slow reader was closed", c.Drops, c.CloseCodes)
	}
	if !strings.Contains(res.stdout, "conflated") {
		t.Error("the summary does not show the conflated count")
	}
	if want := fmt.Sprintf("<b>%d / %d</b>", tk.SlowAtLatest, tk.SlowReaders); !strings.Contains(res.html, "ticker: slow readers at the latest value") || !strings.Contains(res.html, want) {
		t.Errorf("the HTML report lacks the ticker's cards (want %q)", want)
	}
}

// TestTickerConfig: --slow takes a bare number too; the ticker's
// messages are realtime, in one room, published one request at a time.
// (Bad ticker flags are in TestFlags.)
func TestTickerConfig(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	var s settings
	set := newSet(&s)
	if err := set.Load([]string{"--slow", "25", "--class", "chat", "--inflight", "8"}, noEnv); err != nil {
		t.Fatal(err)
	}
	cfg, err := s.toConfig(ScenarioTicker)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Ticker.SlowPct != 25 || cfg.Class != "realtime" || cfg.Rooms != 1 || cfg.Inflight != 1 || cfg.Ticker.Keys != 10 {
		t.Errorf("config %+v, class %s, rooms %d, inflight %d", cfg.Ticker, cfg.Class, cfg.Rooms, cfg.Inflight)
	}
}

// TestStallLeft: the slow readers' stalls last --slow-stall, are 1.5 of it
// apart, and the last one ends when the updates are due to stop.
func TestStallLeft(t *testing.T) {
	const s = 2 * time.Second
	end := int64(100 * time.Second)
	for _, tc := range []struct {
		before time.Duration // before the end
		want   time.Duration
	}{
		{0, 0},            // the end: read
		{-time.Second, 0}, // after it: read
		{time.Millisecond, time.Millisecond},
		{s, s},
		{s + time.Millisecond, 0}, // reading before the last stall
		{s + s/2, 0},
		{s + s/2 + time.Millisecond, time.Millisecond},
		{2*s + s/2, s},
		{2*s + s/2 + time.Millisecond, 0},
	} {
		if got := stallLeft(end-int64(tc.before), end, s); got != tc.want {
			t.Errorf("%s before the end: stall %s, want %s", tc.before, got, tc.want)
		}
	}
	if got := stallLeft(5, 0, s); got != 0 {
		t.Errorf("before the updates start: stall %s, want 0", got)
	}
}

// TestTickerChecks: a slow reader behind on one key fails "latest value",
// one lost update fails "fast readers", and a run whose slow readers
// never had an update conflated is warned about.
func TestTickerChecks(t *testing.T) {
	r := &runner{}
	run := func(tk TickerReport) *Report {
		rep := &Report{Ticker: &tk, Total: NodeReport{End: &NodeSample{}}}
		r.tickerChecks(rep, func(name string, ok bool, format string, a ...any) {
			rep.Checks = append(rep.Checks, Check{Name: name, OK: ok})
		})
		return rep
	}
	failed := func(rep *Report) (names []string) {
		for _, c := range rep.Checks {
			if !c.OK {
				names = append(names, c.Name)
			}
		}
		return names
	}
	good := TickerReport{Keys: 5, FastReaders: 4, SlowReaders: 1, FastExpected: 40, FastReceived: 40, SlowAtLatest: 1, Conflated: 3}
	if rep := run(good); len(failed(rep)) != 0 || len(rep.Checks) != 2 || len(rep.Warnings) != 0 {
		t.Errorf("good run: failed %v of %d checks, warnings %v", failed(rep), len(rep.Checks), rep.Warnings)
	}
	behind, lost, unconflated := good, good, good
	behind.SlowAtLatest = 0
	lost.FastReceived, lost.FastLost = 39, 1
	unconflated.Conflated = 0
	if f := failed(run(behind)); len(f) != 1 || f[0] != "latest value" {
		t.Errorf("a slow reader behind: failed %v, want latest value", f)
	}
	if f := failed(run(lost)); len(f) != 1 || f[0] != "fast readers" {
		t.Errorf("a fast reader's update lost: failed %v, want fast readers", f)
	}
	if rep := run(unconflated); len(failed(rep)) != 0 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "no update was conflated") {
		t.Errorf("nothing conflated: failed %v, warnings %v", failed(rep), rep.Warnings)
	}
}

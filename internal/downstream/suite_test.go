package downstream

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/metrics"
)

// sourceHarness is one real source under test.
type sourceHarness struct {
	// url is the source URL every node opens.
	url string
	// produce appends values to the source, in this order (one key per
	// target for Kafka, so that a target's records share a partition).
	produce func(t *testing.T, values ...[]byte)
	// dead returns what the dead-letter place holds.
	dead func(t *testing.T) []DeadLetter
	// pending is how many records were delivered to a node and not
	// acknowledged (-1: the source does not tell).
	pending func(t *testing.T) int
	// weakOrder: per-target order holds within a node and without
	// redeliveries only (JetStream): the order test runs one consumer and
	// the crash test checks exactly once without the order.
	weakOrder bool
}

// startSource opens the harness's source as node and runs it until the
// returned stop is called (or the test ends).
func startSource(t *testing.T, h *sourceHarness, node string, opt Options) (stop func()) {
	t.Helper()
	_, stop = runSource(t, h.url, node, opt)
	return stop
}

// runSource opens url as node and runs it until the returned stop is
// called (or the test ends).
func runSource(t *testing.T, url, node string, opt Options) (src Source, stop func()) {
	t.Helper()
	opt.NodeID = node
	if opt.Metrics == nil {
		opt.Metrics = metrics.New()
	}
	if opt.Grace == 0 {
		opt.Grace = 200 * time.Millisecond
	}
	opt.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("test_node", node)
	src, err := Open(url, opt)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			_ = src.Close()
		})
	}
	t.Cleanup(stop)
	return src, stop
}

// runSourceSuite runs the tests every source must pass.
func runSourceSuite(t *testing.T, newHarness func(t *testing.T) *sourceHarness) {
	t.Run("OrderPerTargetAcrossNodes", func(t *testing.T) {
		h := newHarness(t)
		g := newFakeGateway()
		// Work of a few hundred microseconds per record, so that the
		// nodes' records interleave.
		g.afterStore = func(context.Context, string, Record) { time.Sleep(time.Duration(rand.IntN(400)) * time.Microsecond) }
		names := []string{"n1", "n2", "n3"}
		if h.weakOrder {
			names = names[:1]
		}
		for _, n := range names {
			startSource(t, h, n, Options{Handler: g.handler(n), InFlight: 32})
		}
		const users, perUser = 6, 100
		job := 0
		for round := range 10 {
			var vals [][]byte
			for range users * perUser / 10 {
				vals = append(vals, body(fmt.Sprintf("u%d", (job+round)%users), job))
				job++
			}
			h.produce(t, vals...)
		}
		await(t, 60*time.Second, "every record published", func() (bool, string) {
			return g.storedCount() == job && h.pending(t) <= 0, g.String()
		})
		g.checkOrder(t, job)
		t.Logf("records per node: %v", g.by)
	})

	t.Run("DeadLettersExactly", func(t *testing.T) {
		h := newHarness(t)
		g := newFakeGateway()
		m := metrics.New()
		startSource(t, h, "n1", Options{Handler: g.handler("n1"), Metrics: m})
		var vals [][]byte
		bad := map[string]bool{}
		for i := range 60 {
			switch i % 10 {
			case 3:
				v := fmt.Sprintf(`{"not json %d`, i)
				bad[v] = true
				vals = append(vals, []byte(v))
			case 7:
				v := fmt.Sprintf(`{"target":{"type":"planet","id":"p%d"},"data":{"job":%d}}`, i, i)
				bad[v] = true
				vals = append(vals, []byte(v))
			default:
				vals = append(vals, body("u1", i))
			}
		}
		h.produce(t, vals...)
		await(t, 30*time.Second, "every record handled", func() (bool, string) {
			return g.storedCount() == 60-len(bad) && len(h.dead(t)) >= len(bad) && h.pending(t) <= 0, g.String()
		})
		dead := h.dead(t)
		if len(dead) != len(bad) {
			t.Fatalf("dead-letter place holds %d entries, want exactly %d", len(dead), len(bad))
		}
		for _, d := range dead {
			v := string(d.Record)
			if s, ok := jsonString(d.Record); ok {
				v = s
			}
			if !bad[v] || d.Error.Code != "bad_request" || d.ID == "" {
				t.Errorf("dead letter %+v is not one of the planted bad records", d)
			}
			delete(bad, v)
		}
		if got := sumCounter(t, m, metrics.DownstreamDead); got != 12 {
			t.Errorf("wsgate_downstream_records_total{result=dead} = %v, want 12", got)
		}
		if got := sumCounter(t, m, metrics.DownstreamPublished); got != 48 {
			t.Errorf("wsgate_downstream_records_total{result=published} = %v, want 48", got)
		}
	})

	t.Run("UnavailableIsRetriedNotAcknowledged", func(t *testing.T) {
		h := newHarness(t)
		g := newFakeGateway()
		var mu sync.Mutex
		refusals := 0
		sawPending := make(chan int, 1)
		g.unavailable = func(r Record) bool {
			mu.Lock()
			defer mu.Unlock()
			if string(r.Value) != string(body("u1", 3)) || refusals == 5 {
				return false
			}
			refusals++
			if refusals == 5 {
				sawPending <- h.pending(t)
			}
			return true
		}
		m := metrics.New()
		startSource(t, h, "n1", Options{Handler: g.handler("n1"), Metrics: m})
		var vals [][]byte
		for i := range 10 {
			vals = append(vals, body("u1", i))
		}
		h.produce(t, vals...)
		await(t, 30*time.Second, "every record published", func() (bool, string) {
			return g.storedCount() == 10 && h.pending(t) <= 0, g.String()
		})
		if p := <-sawPending; p == 0 {
			t.Errorf("while answered unavailable the record was acknowledged (pending 0)")
		}
		g.checkOrder(t, 10)
		if got := sumCounter(t, m, metrics.DownstreamRetried); got != 5 {
			t.Errorf("retried = %v, want 5", got)
		}
	})

	t.Run("CrashBetweenPublishAndAck", func(t *testing.T) {
		h := newHarness(t)
		g := newFakeGateway()
		crashed := make(chan struct{})
		var once sync.Once
		g.afterStore = func(ctx context.Context, node string, r Record) {
			if node == "a" && string(r.Value) == string(body("u1", 7)) {
				once.Do(func() { close(crashed) })
				<-ctx.Done() // stored, never answered: the node dies here
			}
		}
		stopA := startSource(t, h, "a", Options{Handler: g.handler("a")})
		var vals [][]byte
		for i := range 20 {
			vals = append(vals, body(fmt.Sprintf("u%d", i%2), i))
		}
		h.produce(t, vals...)
		<-crashed
		stopA()
		startSource(t, h, "b", Options{Handler: g.handler("b")})
		await(t, 60*time.Second, "the records come again and are acknowledged", func() (bool, string) {
			return g.storedCount() == 20 && h.pending(t) <= 0, g.String()
		})
		if !h.weakOrder {
			g.checkOrder(t, 20)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		var key string
		for k, j := range g.stored {
			if j == 7 {
				key = k
			}
		}
		if g.tries[key] != 2 {
			t.Errorf("record 7 was handled %d times, want 2 (before the crash, and again under the same key %q)", g.tries[key], key)
		}
	})

	t.Run("RecordNamingSeveralTargets", func(t *testing.T) {
		h := newHarness(t)
		g := newFakeGateway()
		startSource(t, h, "n1", Options{Handler: g.handler("n1")})
		// A batch naming two users runs alone, between the records
		// before and after it (the test handler dead-letters batches).
		b := []byte(`{"messages":[` + string(body("u1", 100)) + `,` + string(body("u2", 101)) + `]}`)
		h.produce(t, body("u1", 0), body("u2", 1), b, body("u1", 2), body("u2", 3))
		await(t, 30*time.Second, "every record handled", func() (bool, string) {
			return g.storedCount() == 4 && len(h.dead(t)) == 1 && h.pending(t) <= 0, g.String()
		})
		g.checkOrder(t, 4)
	})

	t.Run("BackpressureBoundsRecordsInHand", func(t *testing.T) {
		h := newHarness(t)
		g := newFakeGateway()
		gate := make(chan struct{})
		g.afterStore = func(ctx context.Context, _ string, _ Record) {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		m := metrics.New()
		startSource(t, h, "n1", Options{Handler: g.handler("n1"), InFlight: 4, Metrics: m})
		var vals [][]byte
		for i := range 100 {
			vals = append(vals, body(fmt.Sprintf("u%d", i), i))
		}
		h.produce(t, vals...)
		// Four in hand: in the handler, or in their lane behind another
		// user's record of the same lane.
		await(t, 30*time.Second, "four records in hand", func() (bool, string) {
			v := metricSum(t, m, "wsgate_downstream_in_flight", "")
			return v == 4, fmt.Sprintf("in flight %v", v)
		})
		if p := h.pending(t); p != -1 && p != 4 {
			t.Errorf("%d records delivered and not acknowledged, want the bound 4", p)
		}
		if n := g.storedCount(); n > 4 {
			t.Errorf("%d records stored while 4 may be in hand", n)
		}
		close(gate)
		await(t, 30*time.Second, "every record published", func() (bool, string) {
			return g.storedCount() == 100 && h.pending(t) <= 0, g.String()
		})
		if g.maxHeld > 4 {
			t.Errorf("%d records handled at once, over the bound 4", g.maxHeld)
		}
	})
}

// sumCounter sums wsgate_downstream_records_total{result} over sources.
func sumCounter(t *testing.T, m *metrics.Metrics, result string) float64 {
	t.Helper()
	return metricSum(t, m, "wsgate_downstream_records_total", result)
}

// metricSum sums a counter or gauge over its series (those with that
// result label, unless result is empty).
func metricSum(t *testing.T, m *metrics.Metrics, name, result string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			match := result == ""
			for _, l := range mt.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					match = true
				}
			}
			if match {
				sum += mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func jsonString(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return "", false
	}
	return s, true
}

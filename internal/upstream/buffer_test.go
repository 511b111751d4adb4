package upstream

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/wsgate/wsgate/internal/metrics"
)

// flakySink accepts whole batches while up and refuses them while down;
// every refused Write is counted, and each accepted record is kept.
type flakySink struct {
	mu      sync.Mutex
	down    bool
	refused int
	got     []Record
	wrote   chan struct{} // a Write ended (either way)
}

func newFlakySink() *flakySink { return &flakySink{wrote: make(chan struct{}, 1)} }

func (s *flakySink) Write(ctx context.Context, recs []Record) error {
	s.mu.Lock()
	defer func() {
		s.mu.Unlock()
		select {
		case s.wrote <- struct{}{}:
		default:
		}
	}()
	if s.down {
		s.refused++
		return errors.New("sink down")
	}
	s.got = append(s.got, recs...)
	return nil
}

func (s *flakySink) Close() error { return nil }

func (s *flakySink) set(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

func (s *flakySink) state() (refused, got int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused, len(s.got)
}

// waitWrites waits until cond holds, checking after every Write.
func (s *flakySink) waitWrites(t *testing.T, what string, cond func(refused, got int) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !cond(s.state()) {
		select {
		case <-s.wrote:
		case <-deadline:
			r, g := s.state()
			t.Fatalf("%s: not reached (refused %d writes, got %d records)", what, r, g)
		}
	}
}

func startBuffer(t *testing.T, s Sink, max int) (*Buffer, *metrics.Upstream) {
	m := &metrics.New().Upstream
	b := NewBuffer(s, BufferOptions{Max: max, Metrics: m})
	go b.Run()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		b.Close(ctx)
	})
	return b, m
}

// A sink outage: the records of a minute at 1,600 events per second
// (96,000, under the default bound) wait in the buffer while every write
// is refused, and all reach the sink, in order and once each, when it is
// back.
func TestBufferSurvivesOutage(t *testing.T) {
	s := newFlakySink()
	s.set(true)
	b, m := startBuffer(t, s, 0)
	const n = 96_000
	accepted := 0
	var amu sync.Mutex
	for i := range n {
		if !b.Add(Record{Type: "connect", ID: fmt.Sprint(i)}, func() { amu.Lock(); accepted++; amu.Unlock() }) {
			t.Fatalf("record %d refused", i)
		}
	}
	s.waitWrites(t, "writes refused during the outage", func(refused, _ int) bool { return refused >= 3 })
	s.set(false)
	s.waitWrites(t, "every record delivered", func(_, got int) bool { return got >= n })
	s.mu.Lock()
	for i, r := range s.got {
		if r.ID != fmt.Sprint(i) {
			s.mu.Unlock()
			t.Fatalf("record %d has id %s: order or duplicates broken", i, r.ID)
		}
	}
	got := len(s.got)
	s.mu.Unlock()
	if got != n {
		t.Fatalf("sink got %d records, want %d", got, n)
	}
	if d := value(m.UpstreamDropped); d != 0 {
		t.Fatalf("dropped %v records, want 0", d)
	}
	if r := value(m.UpstreamRecords.WithLabelValues("connect")); r != n {
		t.Fatalf("wsgate_upstream_records_total{type=connect} = %v, want %d", r, n)
	}
	amu.Lock()
	defer amu.Unlock()
	if accepted != n {
		t.Fatalf("accepted callbacks: %d, want %d", accepted, n)
	}
}

// Past the bound, new records are dropped and counted; the ones held are
// delivered.
func TestBufferOverflowCounted(t *testing.T) {
	s := newFlakySink()
	s.set(true)
	b, m := startBuffer(t, s, 100)
	refused := 0
	for i := range 150 {
		if !b.Add(Record{Type: "online", ID: fmt.Sprint(i)}, nil) {
			refused++
		}
	}
	if refused != 50 || value(m.UpstreamDropped) != 50 {
		t.Fatalf("refused %d, dropped metric %v: want 50 and 50", refused, value(m.UpstreamDropped))
	}
	s.set(false)
	s.waitWrites(t, "the held records delivered", func(_, got int) bool { return got >= 100 })
	if _, got := s.state(); got != 100 {
		t.Fatalf("sink got %d records, want 100", got)
	}
}

// Close flushes what the sink takes before its context ends; the rest is
// counted as dropped, and Close returns.
func TestBufferCloseFlushes(t *testing.T) {
	s := newFlakySink()
	b, m := startBuffer(t, s, 0)
	for i := range 500 {
		b.Add(Record{Type: "disconnect", ID: fmt.Sprint(i)}, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	b.Close(ctx)
	cancel()
	if _, got := s.state(); got != 500 {
		t.Fatalf("after Close the sink has %d records, want 500", got)
	}

	s2 := newFlakySink()
	s2.set(true)
	b2, m2 := startBuffer(t, s2, 0)
	for i := range 10 {
		b2.Add(Record{Type: "disconnect", ID: fmt.Sprint(i)}, nil)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	b2.Close(ctx)
	cancel()
	if d := value(m2.UpstreamDropped); d != 10 {
		t.Fatalf("a flush that could not finish dropped %v records, want 10 counted", d)
	}
	_ = m
}

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// The default bound in memory: a full buffer of typical event records
// (ids, user, node and reason strings of their usual sizes) stays under
// 40 MiB.
func TestBufferFullSize(t *testing.T) {
	s := newFlakySink()
	s.set(true)
	b := NewBuffer(s, BufferOptions{Metrics: &metrics.New().Upstream}) // not running: it only fills
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range DefaultBufferRecords {
		d := int64(i)
		b.Add(Record{Type: "disconnect", ID: fmt.Sprintf("8e73246b%012x", i), User: fmt.Sprintf("user-%08d", i),
			ConnID: fmt.Sprintf("8e73246b%012x", i+1), Node: "gateway-7f9c2d-abc123", Device: "default",
			TS: 1796167792589, Code: 1000, Reason: "client closed", DurationMS: &d}, nil)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	used := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d records hold %.1f MiB (%d bytes each)", b.Len(), float64(used)/(1<<20), used/int64(b.Len()))
	if b.Len() != DefaultBufferRecords || used > 40<<20 {
		t.Fatalf("%d records, %d bytes: want %d records under 40 MiB", b.Len(), used, DefaultBufferRecords)
	}
}

package upstream

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/metrics"
)

// DefaultBufferRecords is the event buffer's default bound: a minute's
// sink outage at 1,600 events per second, about 35 MiB of typical records
// (TestBufferFullSize).
const DefaultBufferRecords = 100_000

// BufferOptions configure NewBuffer.
type BufferOptions struct {
	Max     int               // records held; default DefaultBufferRecords
	Batch   int               // records per Write; default 100
	Timeout time.Duration     // bound of one Write; default 5 s
	Metrics *metrics.Upstream // required
	Logger  *slog.Logger
}

// Buffer is the bounded in-memory queue of event records in front of a
// Sink: Add never blocks, one goroutine (Run) writes the records in
// order, in batches, and retries a failed batch with backoff (100 ms
// doubling to 5 s) until the sink takes it. A record that finds the
// buffer full is dropped and counted (wsgate_upstream_dropped_total);
// nothing else is ever dropped while the process lives. Close flushes
// what it can before its context ends.
type Buffer struct {
	sink Sink
	opt  BufferOptions

	mu      sync.Mutex
	q       []item // FIFO
	closing bool
	flush   context.Context // Close's context, once closing
	wake    chan struct{}   // 1-buffered: something to do
	done    chan struct{}   // closed when Run returned
}

type item struct {
	rec      Record
	accepted func() // called once the sink accepted the record (may be nil)
}

// NewBuffer returns a buffer in front of sink; start its Run.
func NewBuffer(sink Sink, opt BufferOptions) *Buffer {
	if opt.Max <= 0 {
		opt.Max = DefaultBufferRecords
	}
	if opt.Batch <= 0 {
		opt.Batch = 100
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 5 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	return &Buffer{sink: sink, opt: opt, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Add queues rec; accepted, when not nil, runs on Run's goroutine once
// the sink accepted it. It reports false (and counts the drop) when the
// buffer is full or closed.
func (b *Buffer) Add(rec Record, accepted func()) bool {
	b.mu.Lock()
	if len(b.q) >= b.opt.Max || b.closing && b.flush.Err() != nil {
		b.mu.Unlock()
		b.opt.Metrics.UpstreamDropped.Inc()
		return false
	}
	b.q = append(b.q, item{rec, accepted})
	b.mu.Unlock()
	b.kick()
	return true
}

// Len is the number of records waiting.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.q)
}

func (b *Buffer) kick() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Run writes the queued records until Close: then until the buffer is
// empty or Close's context ends.
func (b *Buffer) Run() {
	defer close(b.done)
	delay := 100 * time.Millisecond
	for {
		b.mu.Lock()
		n := min(len(b.q), b.opt.Batch)
		batch := b.q[:n:n]
		closing, flush := b.closing, b.flush
		b.mu.Unlock()
		if n == 0 {
			if closing {
				return
			}
			<-b.wake
			continue
		}
		parent := context.Background()
		if closing {
			parent = flush
		}
		if err := b.write(parent, batch); err != nil {
			if parent.Err() != nil {
				b.mu.Lock()
				lost := len(b.q)
				b.q = nil
				b.mu.Unlock()
				b.opt.Metrics.UpstreamDropped.Add(float64(lost))
				b.opt.Logger.Error("event records not delivered by the end of the flush", "records", lost, "err", err)
				return
			}
			b.opt.Logger.Warn("upstream sink refused event records; retrying", "records", n, "retry_in", delay, "err", err)
			b.backoff(delay)
			delay = min(2*delay, 5*time.Second)
			continue
		}
		delay = 100 * time.Millisecond
		b.mu.Lock()
		b.q = b.q[n:]
		if len(b.q) == 0 {
			b.q = nil // let the array go after a burst
		}
		b.mu.Unlock()
		for _, it := range batch {
			b.opt.Metrics.UpstreamRecords.WithLabelValues(it.rec.Type).Inc()
			if it.accepted != nil {
				it.accepted()
			}
		}
	}
}

// backoff waits for delay, or less once Close was called (new records are
// no reason to retry sooner).
func (b *Buffer) backoff(delay time.Duration) {
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return
		case <-b.wake:
			b.mu.Lock()
			closing := b.closing
			b.mu.Unlock()
			if closing {
				return
			}
		}
	}
}

func (b *Buffer) write(parent context.Context, batch []item) error {
	recs := make([]Record, len(batch))
	for i, it := range batch {
		recs[i] = it.rec
	}
	ctx, cancel := context.WithTimeout(parent, b.opt.Timeout)
	defer cancel()
	start := time.Now()
	err := b.sink.Write(ctx, recs)
	if err != nil {
		b.opt.Metrics.UpstreamErrors.Inc()
		return err
	}
	b.opt.Metrics.UpstreamLatency.Observe(time.Since(start).Seconds())
	return nil
}

// Close asks Run to write what is left and waits until it did or ctx
// ended (then the rest is counted as dropped). Records added meanwhile
// are still taken until ctx ends. It does not close the sink.
func (b *Buffer) Close(ctx context.Context) {
	b.mu.Lock()
	if !b.closing {
		b.closing, b.flush = true, ctx
	}
	b.mu.Unlock()
	b.kick()
	select {
	case <-b.done:
	case <-ctx.Done():
		b.kick()
		<-b.done
	}
}

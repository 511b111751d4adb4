package downstream

import (
	"context"
	"encoding/json"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsgate/wsgate/internal/metrics"
)

// core is what every source shares: the handler and its retries, the
// metrics, the bound on records in hand and the per-target lanes.
//
// A record read is dispatched to the lane of its target (one goroutine per
// lane runs its records one after the other, so that one target's records
// are handled in their order); a record naming several targets waits for
// every record in hand and is handled alone. dispatch blocks while the
// node holds Options.InFlight records: that is the backpressure.
type core struct {
	name string
	opt  Options
	log  *slog.Logger

	slots    chan struct{} // one per record in hand
	lanes    []chan func()
	seed     maphash.Seed
	inHand   sync.WaitGroup // records dispatched and not finished
	lanesRun sync.WaitGroup // the lane goroutines
	rr       atomic.Uint64  // lane of records without a target

	published, dead, retried prometheus.Counter
	inFlight                 prometheus.Gauge
	lag                      prometheus.Gauge
}

// maxLanes bounds the lanes of a source on one node.
const maxLanes = 64

func newCore(name string, opt Options) *core {
	c := &core{
		name:  name,
		opt:   opt,
		log:   opt.Logger.With("component", "downstream", "source", name),
		slots: make(chan struct{}, opt.InFlight),
		lanes: make([]chan func(), min(opt.InFlight, maxLanes)),
		seed:  maphash.MakeSeed(),
	}
	m := opt.Metrics
	m.DownstreamSource(name)
	c.published = m.DownstreamRecords.WithLabelValues(name, metrics.DownstreamPublished)
	c.dead = m.DownstreamRecords.WithLabelValues(name, metrics.DownstreamDead)
	c.retried = m.DownstreamRecords.WithLabelValues(name, metrics.DownstreamRetried)
	c.inFlight = m.DownstreamInFlight.WithLabelValues(name)
	c.lag = m.DownstreamLag.WithLabelValues(name)
	return c
}

// handleCtx returns the context records in hand are handled under: it
// ends grace after ctx ends, or when stop is called (once everything in
// hand is finished).
func (c *core) handleCtx(ctx context.Context) (context.Context, func()) {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
			return
		}
		select {
		case <-time.After(c.opt.Grace):
			cancel()
		case <-stopped:
		}
	}()
	var once sync.Once
	return hctx, func() { once.Do(func() { close(stopped); cancel() }) }
}

// startLanes starts the lane goroutines; stopLanes ends them after the
// records they hold.
func (c *core) startLanes() {
	for i := range c.lanes {
		ch := make(chan func(), c.opt.InFlight)
		c.lanes[i] = ch
		c.lanesRun.Add(1)
		go func() {
			defer c.lanesRun.Done()
			for f := range ch {
				f()
			}
		}()
	}
}

func (c *core) stopLanes() {
	c.inHand.Wait()
	for _, ch := range c.lanes {
		close(ch)
	}
	c.lanesRun.Wait()
}

// acquire takes a slot for one record in hand, waiting while the node
// holds InFlight of them; false when ctx ended first.
func (c *core) acquire(ctx context.Context) bool {
	select {
	case c.slots <- struct{}{}:
		c.inFlight.Inc()
		c.inHand.Add(1)
		return true
	case <-ctx.Done():
		return false
	}
}

// take takes a slot the caller knows is free (free() said so, and only
// the reader takes slots).
func (c *core) take() {
	c.slots <- struct{}{}
	c.inFlight.Inc()
	c.inHand.Add(1)
}

// reserve waits for n free slots, which the caller turns into records in
// hand one by one (use) or gives back (unreserve); false when ctx ended
// first, with none kept. Reserved slots count in the backpressure but not
// among the records in hand a record naming several targets waits for.
func (c *core) reserve(ctx context.Context, n int) bool {
	for i := range n {
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			c.unreserve(i)
			return false
		}
	}
	return true
}

// unreserve gives back n reserved slots.
func (c *core) unreserve(n int) {
	for range n {
		<-c.slots
	}
}

// use makes a reserved slot a record's in hand (release gives it back).
func (c *core) use() {
	c.inFlight.Inc()
	c.inHand.Add(1)
}

// release gives a slot back (once per acquire).
func (c *core) release() {
	<-c.slots
	c.inFlight.Dec()
	c.inHand.Done()
}

// free is how many records may be read now.
func (c *core) free() int { return cap(c.slots) - len(c.slots) }

// dispatch runs f (which calls release at its end) on the lane of the
// record's targets, after that lane's earlier records; a record naming
// several targets runs alone, once every record in hand is finished. The
// caller holds a slot for it.
func (c *core) dispatch(targets []string, f func()) {
	switch len(targets) {
	case 0:
		c.lanes[c.rr.Add(1)%uint64(len(c.lanes))] <- f
	case 1:
		c.lanes[maphash.String(c.seed, targets[0])%uint64(len(c.lanes))] <- f
	default:
		// This record's own slot is held: wait for the others.
		c.inHand.Done()
		c.inHand.Wait()
		c.inHand.Add(1)
		f()
	}
}

// handle calls the handler until the record is not answered unavailable;
// false when ctx ended first (the record stays unacknowledged).
func (c *core) handle(ctx context.Context, r Record) (Outcome, bool) {
	for try := 0; ; try++ {
		if ctx.Err() != nil {
			return Outcome{}, false // stopping: the record comes again
		}
		o := c.opt.Handler(ctx, r)
		if !o.Retry {
			return o, true
		}
		c.retried.Inc()
		if try == 0 || try%20 == 0 {
			c.log.Warn("record answered unavailable; retrying, not acknowledged", "id", r.ID, "tries", try+1, "err", o.Err)
		}
		if !sleep(ctx, backoff(try)) {
			return o, false
		}
	}
}

// count records a handled record in the metrics and logs its dead parts.
func (c *core) count(r Record, o Outcome) {
	if len(o.Dead) == 0 {
		c.published.Inc()
		return
	}
	c.dead.Inc()
	c.log.Warn("record refused: written to the dead-letter place", "id", r.ID, "code", o.Dead[0].Error.Code, "err", o.Dead[0].Error.Message, "parts", len(o.Dead))
}

// deadJSON encodes the dead-letter entries of a record.
func deadJSON(o Outcome) [][]byte {
	out := make([][]byte, 0, len(o.Dead))
	for _, d := range o.Dead {
		if !json.Valid(d.Record) {
			d.Record, _ = json.Marshal(string(d.Record))
		}
		b, _ := json.Marshal(d)
		out = append(out, b)
	}
	return out
}

// retryUntil runs op until it succeeds or ctx ends (acknowledgements,
// dead-letter writes: a failure is retried with backoff).
func (c *core) retryUntil(ctx context.Context, what string, op func(context.Context) error) bool {
	for try := 0; ; try++ {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(octx)
		cancel()
		if err == nil {
			return true
		}
		if try == 0 || try%20 == 0 {
			c.log.Warn("downstream "+what+" failed; retrying", "tries", try+1, "err", err)
		}
		if !sleep(ctx, backoff(try)) {
			return false
		}
	}
}

// targetsOf returns the targets a record's value names ("user\x00ID",
// "room\x00ID", "broadcast\x00"), each once; nil for a value that is not
// a publish or batch body (it goes to the dead-letter place on any lane).
func targetsOf(value []byte) []string {
	type target struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	}
	var v struct {
		Target   *target `json:"target"`
		Messages []struct {
			Target *target `json:"target"`
		} `json:"messages"`
	}
	if json.Unmarshal(value, &v) != nil {
		return nil
	}
	var out []string
	add := func(t *target) {
		if t == nil {
			return
		}
		k := t.Type + "\x00" + t.ID
		if t.Type == "broadcast" {
			k = "broadcast\x00"
		}
		for _, x := range out {
			if x == k {
				return
			}
		}
		out = append(out, k)
	}
	add(v.Target)
	if v.Target == nil {
		for i := range v.Messages {
			add(v.Messages[i].Target)
		}
	}
	return out
}

// overlaps reports whether two target lists share one.
func overlaps(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

package auth

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"time"
)

// The limits are token buckets with burst = rate (at least 1), written in
// the GCRA form: instead of a token count, a bucket keeps one time, the
// theoretical arrival time (tat) of the next event at the sustained rate.
// An event at now is allowed when tat-now <= tolerance, and then pushes
// tat one interval further. This is exactly a token bucket, in integer
// nanoseconds (no float drift), in 8 bytes, and a bucket whose tat has
// passed is indistinguishable from a new one, which makes eviction exact.

// gcra returns the emission interval (ns per event) and the burst
// tolerance for rate events per second with burst max(rate, 1).
// ok is false when rate means "unlimited" (zero, negative or NaN).
func gcra(rate float64) (interval, tolerance int64, ok bool) {
	if !(rate > 0) {
		return 0, 0, false
	}
	// Below one event every 11.5 days the interval is capped, which keeps
	// tat arithmetic far from overflow.
	iv := min(float64(time.Second)/rate, 1e15)
	interval = max(int64(iv), 1)
	burst := max(math.Floor(rate), 1)
	return interval, int64(min((burst-1)*float64(interval), 1e15)), true
}

// Bucket is one connection's frame-rate limiter (WSGATE_MESSAGE_RATE). It
// is 8 bytes, its zero value is a full bucket, and it has no lock: the
// connection's reader, the only caller, serialises its use.
type Bucket struct {
	tat int64 // Unix nanoseconds
}

// Take reports whether one frame may pass at now (Unix nanoseconds) under
// rate frames per second, burst max(rate, 1), and takes its token if so.
// A rate <= 0 always allows.
func (b *Bucket) Take(rate float64, now int64) bool {
	interval, tolerance, ok := gcra(rate)
	if !ok {
		return true
	}
	tat := max(b.tat, now)
	if tat-now > tolerance {
		return false
	}
	b.tat = tat + interval
	return true
}

const (
	limiterShards = 32 // power of two; spreads lock contention
	// RateLimiterMaxKeys bounds a RateLimiter's memory: about 100 bytes a
	// key, so about 100 MiB at worst.
	RateLimiterMaxKeys = 1 << 20
	sweepEvery         = int64(time.Second)
)

// RateLimiter limits events per key, e.g. handshakes per client IP
// (WSGATE_HANDSHAKE_RATE_PER_IP). It is safe for concurrent use; a nil
// *RateLimiter allows everything.
//
// Memory is bounded: a key whose bucket is full again is forgotten by a
// sweep of its shard that runs at most once a second inside Allow, so the
// table holds only the keys seen within about max(1s, 1/rate) plus a
// second; beyond RateLimiterMaxKeys an arbitrary key is forgotten (it
// starts again with a full bucket) to make room.
type RateLimiter struct {
	interval, tolerance int64
	limited             bool
	shardCap            int // RateLimiterMaxKeys / limiterShards; smaller in tests
	seed                maphash.Seed
	shards              [limiterShards]rateShard
}

type rateShard struct {
	mu        sync.Mutex
	tat       map[string]int64
	lastSweep int64
	_         [40]byte // keep shards on separate cache lines
}

// NewRateLimiter limits each key to ratePerSec events per second with a
// burst of max(ratePerSec, 1). Zero (or less) means unlimited.
func NewRateLimiter(ratePerSec float64) *RateLimiter {
	l := &RateLimiter{seed: maphash.MakeSeed(), shardCap: RateLimiterMaxKeys / limiterShards}
	l.interval, l.tolerance, l.limited = gcra(ratePerSec)
	for i := range l.shards {
		l.shards[i].tat = make(map[string]int64)
	}
	return l
}

// NewBurstLimiter limits each key to burst events at once, refilled at
// ratePerSec (e.g. failed API-key attempts per client IP: 10 at once, then
// one every 6 s). Zero rate or burst means unlimited.
func NewBurstLimiter(ratePerSec float64, burst int) *RateLimiter {
	l := NewRateLimiter(ratePerSec)
	if l.limited && burst > 0 {
		l.tolerance = int64(burst-1) * l.interval
	} else {
		l.limited = false
	}
	return l
}

// Refused reports whether an event for key at now would be refused, and
// for how long, without recording anything.
func (l *RateLimiter) Refused(key string, now time.Time) (refused bool, retryAfter time.Duration) {
	if l == nil || !l.limited {
		return false, 0
	}
	n := now.UnixNano()
	s := &l.shards[maphash.String(l.seed, key)&(limiterShards-1)]
	s.mu.Lock()
	tat := max(s.tat[key], n)
	s.mu.Unlock()
	if wait := tat - n - l.tolerance; wait > 0 {
		return true, time.Duration(wait)
	}
	return false, 0
}

// Allow reports whether an event for key may happen at now and records it
// if so. When refused, retryAfter is how long until one would be allowed.
func (l *RateLimiter) Allow(key string, now time.Time) (ok bool, retryAfter time.Duration) {
	if l == nil || !l.limited {
		return true, 0
	}
	n := now.UnixNano()
	s := &l.shards[maphash.String(l.seed, key)&(limiterShards-1)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if n-s.lastSweep >= sweepEvery || n < s.lastSweep {
		s.sweep(n)
	}
	tat, known := s.tat[key]
	tat = max(tat, n)
	if wait := tat - n - l.tolerance; wait > 0 {
		return false, time.Duration(wait)
	}
	if !known {
		if len(s.tat) >= l.shardCap {
			// Full: the periodic sweep found every key busy. Forget an
			// arbitrary key rather than sweep again, which would cost a
			// scan of the shard per new key under a flood of addresses.
			for k := range s.tat {
				delete(s.tat, k)
				if len(s.tat) < l.shardCap {
					break
				}
			}
		}
		key = strings.Clone(key) // do not pin the caller's buffer
	}
	s.tat[key] = tat + l.interval
	return true, 0
}

// Sweep forgets every key whose bucket is full at now. Allow does this
// lazily; calling Sweep from a ticker returns memory sooner after a burst
// of many keys.
func (l *RateLimiter) Sweep(now time.Time) {
	if l == nil {
		return
	}
	n := now.UnixNano()
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		s.sweep(n)
		s.mu.Unlock()
	}
}

// Len returns the number of keys tracked.
func (l *RateLimiter) Len() int {
	if l == nil {
		return 0
	}
	total := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		total += len(s.tat)
		s.mu.Unlock()
	}
	return total
}

// sweep must be called with s.mu held.
func (s *rateShard) sweep(n int64) {
	s.lastSweep = n
	for k, tat := range s.tat {
		if tat <= n {
			delete(s.tat, k)
		}
	}
}

// ConnCounter counts concurrent connections per key, e.g. per client IP
// on one node (WSGATE_MAX_CONNS_PER_IP). It is safe for concurrent use; a
// nil *ConnCounter allows everything. A key is removed when its count
// returns to zero, so memory follows the open connections.
type ConnCounter struct {
	limit  int
	seed   maphash.Seed
	shards [limiterShards]countShard
}

type countShard struct {
	mu sync.Mutex
	n  map[string]int
	_  [48]byte // keep shards on separate cache lines
}

// NewConnCounter allows at most max concurrent holders per key; zero (or
// less) means unlimited, and then nothing is tracked.
func NewConnCounter(max int) *ConnCounter {
	c := &ConnCounter{limit: max, seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].n = make(map[string]int)
	}
	return c
}

// Acquire takes a slot for key, reporting false (and taking nothing) when
// key already holds the maximum. Every successful Acquire needs one Release.
func (c *ConnCounter) Acquire(key string) bool {
	if c == nil || c.limit <= 0 {
		return true
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n[key]
	if n >= c.limit {
		return false
	}
	if n == 0 {
		key = strings.Clone(key) // do not pin the caller's buffer
	}
	s.n[key] = n + 1
	return true
}

// Release gives back a slot taken by Acquire. Releasing a key that holds
// none is a no-op.
func (c *ConnCounter) Release(key string) {
	if c == nil || c.limit <= 0 {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch n := s.n[key]; {
	case n > 1:
		s.n[key] = n - 1
	case n == 1:
		delete(s.n, key)
	}
}

// Count returns the slots key holds (always 0 when unlimited).
func (c *ConnCounter) Count(key string) int {
	if c == nil || c.limit <= 0 {
		return 0
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[key]
}

// Len returns the number of keys holding at least one slot.
func (c *ConnCounter) Len() int {
	if c == nil {
		return 0
	}
	total := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		total += len(s.n)
		s.mu.Unlock()
	}
	return total
}

func (c *ConnCounter) shard(key string) *countShard {
	return &c.shards[maphash.String(c.seed, key)&(limiterShards-1)]
}

package bench

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The latency histogram is log-linear, like HdrHistogram: values below
// 2^histBits nanoseconds have a bucket each; above, every power of two is
// split into 2^(histBits-1) equal buckets, so that a bucket is never wider
// than 1/128 of its values (0.8 % relative error) whatever the scale. The
// buckets are a fixed array of counters: recording is a few atomic adds,
// with no per-sample storage and no allocation, from any goroutine.
const (
	histBits    = 8
	histHalf    = 1 << (histBits - 1)
	histMaxBits = 42 // largest value kept: 2^42 ns = 73 min; larger ones are clamped
	histBuckets = (histMaxBits-histBits)*histHalf + (1 << histBits)
	histMaxNS   = 1<<histMaxBits - 1
)

// bucketOf returns the bucket index of a value in nanoseconds (>= 0).
func bucketOf(v int64) int {
	if v < 1<<histBits {
		return int(v)
	}
	if v > histMaxNS {
		v = histMaxNS
	}
	shift := bits.Len64(uint64(v)) - histBits
	return shift*histHalf + int(v>>shift)
}

// bucketBounds returns the values [low, high) of bucket i.
func bucketBounds(i int) (low, high int64) {
	if i < 1<<histBits {
		return int64(i), int64(i) + 1
	}
	shift := i/histHalf - 1
	top := int64(i - shift*histHalf)
	return top << shift, (top + 1) << shift
}

// Histogram records durations concurrently. The zero value is ready.
type Histogram struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Int64 // ns
	min    atomic.Int64 // ns + 1; 0 = none yet
	max    atomic.Int64 // ns
	winMax atomic.Int64 // max since the last TakeWindowMax
}

// Record adds one duration; negative ones count as 0.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	storeMax(&h.max, v)
	storeMax(&h.winMax, v)
	for {
		m := h.min.Load()
		if m != 0 && m-1 <= v {
			break
		}
		if h.min.CompareAndSwap(m, v+1) {
			break
		}
	}
}

func storeMax(a *atomic.Int64, v int64) {
	for {
		m := a.Load()
		if m >= v || a.CompareAndSwap(m, v) {
			return
		}
	}
}

// TakeWindowMax returns the largest value recorded since the last call.
func (h *Histogram) TakeWindowMax() time.Duration { return time.Duration(h.winMax.Swap(0)) }

// Snapshot copies the counters. Taken while values are recorded, it may be
// a few samples off between its fields; never negative.
func (h *Histogram) Snapshot() *Snapshot {
	s := &Snapshot{Counts: make([]uint64, histBuckets)}
	var n uint64
	for i := range h.counts {
		c := h.counts[i].Load()
		s.Counts[i] = c
		n += c
	}
	s.N = n
	s.Sum = h.sum.Load()
	s.Max = h.max.Load()
	if m := h.min.Load(); m > 0 {
		s.Min = m - 1
	}
	return s
}

// Snapshot is a histogram's counts at one moment (or the difference of
// two moments, see Sub).
type Snapshot struct {
	Counts   []uint64
	N        uint64
	Sum      int64 // ns
	Min, Max int64 // ns; for a difference, bounds from the buckets
}

// Sub returns the samples recorded between prev and s (prev may be nil).
// Min and Max of the difference are bucket bounds (max is exact when the
// caller uses TakeWindowMax).
func (s *Snapshot) Sub(prev *Snapshot) *Snapshot {
	if prev == nil {
		return s
	}
	d := &Snapshot{Counts: make([]uint64, len(s.Counts)), Sum: s.Sum - prev.Sum}
	lo, hi := -1, -1
	for i, c := range s.Counts {
		var v uint64
		if c > prev.Counts[i] {
			v = c - prev.Counts[i]
		}
		d.Counts[i] = v
		d.N += v
		if v > 0 {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	if lo >= 0 {
		d.Min, _ = bucketBounds(lo)
		_, h := bucketBounds(hi)
		d.Max = h - 1
	}
	return d
}

// Quantile returns the value at quantile q (0..1): the highest value of
// the bucket holding the ceil(q*N)-th sample, kept within [Min, Max].
func (s *Snapshot) Quantile(q float64) time.Duration {
	switch {
	case s.N == 0:
		return 0
	case q <= 0:
		return time.Duration(s.Min)
	case q >= 1:
		return time.Duration(s.Max)
	}
	rank := uint64(math.Ceil(q * float64(s.N)))
	rank = max(rank, 1)
	var acc uint64
	for i, c := range s.Counts {
		acc += c
		if acc >= rank {
			_, high := bucketBounds(i)
			v := min(max(high-1, s.Min), s.Max)
			return time.Duration(v)
		}
	}
	return time.Duration(s.Max)
}

// Mean returns the average value.
func (s *Snapshot) Mean() time.Duration {
	if s.N == 0 {
		return 0
	}
	return time.Duration(s.Sum / int64(s.N))
}

// Bucket is one histogram bucket in a report: values in [LowMS, HighMS).
type Bucket struct {
	LowMS  float64 `json:"low_ms"`
	HighMS float64 `json:"high_ms"`
	Count  uint64  `json:"count"`
}

// Buckets returns the non-empty buckets at full resolution.
func (s *Snapshot) Buckets() []Bucket {
	var out []Bucket
	for i, c := range s.Counts {
		if c == 0 {
			continue
		}
		lo, hi := bucketBounds(i)
		out = append(out, Bucket{LowMS: nsToMS(lo), HighMS: nsToMS(hi), Count: c})
	}
	return out
}

func nsToMS(v int64) float64 { return float64(v) / 1e6 }

package bench

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func TestBucketBoundsContainValue(t *testing.T) {
	values := []int64{0, 1, 2, 127, 128, 255, 256, 257, 1000, 1023, 1024, 999_999, 1_000_000, 123_456_789, histMaxNS - 1, histMaxNS}
	for range 20000 {
		values = append(values, rand.Int64N(histMaxNS))
	}
	for _, v := range values {
		i := bucketOf(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucketOf(%d) = %d, outside [0, %d)", v, i, histBuckets)
		}
		lo, hi := bucketBounds(i)
		if v < lo || v >= hi {
			t.Fatalf("value %d in bucket %d = [%d, %d)", v, i, lo, hi)
		}
		if v >= 1<<histBits && float64(hi-lo)/float64(lo) > 1.0/histHalf+1e-12 {
			t.Fatalf("bucket %d = [%d, %d) is wider than 1/%d of its values", i, lo, hi, histHalf)
		}
	}
}

func TestBucketsAreContiguous(t *testing.T) {
	_, prevHi := bucketBounds(0)
	for i := 1; i < histBuckets; i++ {
		lo, hi := bucketBounds(i)
		if lo != prevHi || hi <= lo {
			t.Fatalf("bucket %d = [%d, %d) does not follow [.., %d)", i, lo, hi, prevHi)
		}
		prevHi = hi
	}
	if _, hi := bucketBounds(histBuckets - 1); hi-1 != histMaxNS {
		t.Fatalf("last bucket ends at %d, want %d", hi-1, histMaxNS)
	}
}

func TestClampsLargeAndNegative(t *testing.T) {
	var h Histogram
	h.Record(-5)
	h.Record(time.Duration(histMaxNS) * 4)
	s := h.Snapshot()
	if s.N != 2 || s.Counts[0] != 1 || s.Counts[histBuckets-1] != 1 {
		t.Fatalf("N %d, first %d, last %d", s.N, s.Counts[0], s.Counts[histBuckets-1])
	}
}

func TestQuantilesOfUniform(t *testing.T) {
	var h Histogram
	for v := 1; v <= 100_000; v++ { // 1 µs .. 100 ms
		h.Record(time.Duration(v) * time.Microsecond)
	}
	s := h.Snapshot()
	if s.N != 100_000 || s.Min != int64(time.Microsecond) || s.Max != int64(100*time.Millisecond) {
		t.Fatalf("N %d min %d max %d", s.N, s.Min, s.Max)
	}
	for _, q := range []float64{0.5, 0.9, 0.95, 0.99, 0.999} {
		got := float64(s.Quantile(q))
		want := q * float64(100*time.Millisecond)
		if got < want || got > want*(1+1.0/histHalf)+1000 {
			t.Errorf("q%.3f = %v, want %v within +0.8%%", q, time.Duration(got), time.Duration(want))
		}
	}
	if s.Quantile(1) != 100*time.Millisecond || s.Quantile(0) != time.Microsecond {
		t.Errorf("q0 %v q1 %v", s.Quantile(0), s.Quantile(1))
	}
	if m := s.Mean(); m < 50*time.Millisecond-time.Microsecond || m > 50*time.Millisecond+time.Microsecond {
		t.Errorf("mean %v", m)
	}
}

func TestEmptySnapshot(t *testing.T) {
	var h Histogram
	s := h.Snapshot()
	if s.N != 0 || s.Quantile(0.99) != 0 || s.Mean() != 0 || len(s.Buckets()) != 0 {
		t.Fatalf("empty histogram: %+v", s)
	}
}

func TestSnapshotSub(t *testing.T) {
	var h Histogram
	for range 100 {
		h.Record(time.Millisecond)
	}
	a := h.Snapshot()
	for range 10 {
		h.Record(50 * time.Millisecond)
	}
	d := h.Snapshot().Sub(a)
	if d.N != 10 {
		t.Fatalf("difference has %d samples, want 10", d.N)
	}
	if q := d.Quantile(0.5); q < 50*time.Millisecond || q > 51*time.Millisecond {
		t.Fatalf("difference p50 %v, want ~50ms", q)
	}
	if w := h.TakeWindowMax(); w != 50*time.Millisecond {
		t.Fatalf("window max %v", w)
	}
	if w := h.TakeWindowMax(); w != 0 {
		t.Fatalf("window max after take %v", w)
	}
}

func TestConcurrentRecord(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10000 {
				h.Record(time.Duration(g*10000+i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	var sum uint64
	for _, c := range s.Counts {
		sum += c
	}
	if s.N != 80000 || sum != 80000 || s.Min != 0 || s.Max != int64(79999*time.Microsecond) {
		t.Fatalf("N %d sum %d min %d max %d", s.N, sum, s.Min, s.Max)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(1000, func() { h.Record(1234 * time.Microsecond) }); n != 0 {
		t.Fatalf("Record allocates %v times", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	b.RunParallel(func(pb *testing.PB) {
		d := time.Duration(0)
		for pb.Next() {
			d += 997
			h.Record(d % (time.Second))
		}
	})
}

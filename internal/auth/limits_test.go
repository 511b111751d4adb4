package auth

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func TestBucket(t *testing.T) {
	const s = int64(time.Second)
	t0 := int64(1_800_000_000) * s

	tests := []struct {
		name  string
		rate  float64
		steps []struct {
			at   int64 // offset from t0
			want bool
		}
	}{
		{"unlimited", 0, steps(0, true, 0, true, 0, true, 0, true)},
		{"negative is unlimited", -5, steps(0, true, 0, true)},
		{"NaN is unlimited", math.NaN(), steps(0, true, 0, true)},
		// burst 3, then one every 1/3 s
		{"rate 3", 3, steps(0, true, 0, true, 0, true, 0, false, s/3-1, false, s/3, true, s/3, false, s, true, s, true, s, false)},
		// burst = rate: a full second refills everything
		{"refill after idle", 2, steps(0, true, 0, true, 0, false, 10*s, true, 10*s, true, 10*s, false)},
		// rate below 1: burst 1, one every 2 s
		{"rate 0.5", 0.5, steps(0, true, 0, false, s, false, 2*s-1, false, 2*s, true, 2*s, false)},
		// fractional rate above 1: burst floor(2.5) = 2, interval 0.4 s
		{"rate 2.5", 2.5, steps(0, true, 0, true, 0, false, 4*s/10, true, 4*s/10, false)},
		// time going backwards never refills
		{"clock back", 1, steps(0, true, -s, false, 0, false, s, true)},
		{"huge rate", 1e12, steps(0, true, 0, true, 0, true)},
		{"tiny rate", 1e-30, steps(0, true, 0, false, 1000*s, false)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Bucket
			for i, st := range tc.steps {
				if got := b.Take(tc.rate, t0+st.at); got != st.want {
					t.Fatalf("step %d (t0%+dns): Take = %v, want %v", i, st.at, got, st.want)
				}
			}
		})
	}
	if n := unsafe.Sizeof(Bucket{}); n != 8 {
		t.Errorf("Bucket is %d bytes, want 8", n)
	}
}

// steps pairs (offset, want) arguments.
func steps(args ...any) []struct {
	at   int64
	want bool
} {
	var out []struct {
		at   int64
		want bool
	}
	for i := 0; i < len(args); i += 2 {
		var at int64
		switch v := args[i].(type) {
		case int:
			at = int64(v)
		case int64:
			at = v
		}
		out = append(out, struct {
			at   int64
			want bool
		}{at, args[i+1].(bool)})
	}
	return out
}

// Over a long run the bucket passes rate per second plus the burst.
func TestBucketSustainedRate(t *testing.T) {
	var b Bucket
	const rate = 50
	t0 := int64(1_800_000_000) * int64(time.Second)
	passed := 0
	for i := range 10_000 { // one frame per ms for 10 s
		if b.Take(rate, t0+int64(i)*int64(time.Millisecond)) {
			passed++
		}
	}
	if want := rate*10 + rate; passed < want-1 || passed > want {
		t.Fatalf("passed %d frames in 10 s at rate %d, want about %d", passed, rate, want)
	}
}

func TestRateLimiter(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	l := NewRateLimiter(2)
	type step struct {
		key   string
		at    time.Duration
		ok    bool
		retry time.Duration
	}
	for i, st := range []step{
		{"1.1.1.1", 0, true, 0},
		{"1.1.1.1", 0, true, 0},
		{"1.1.1.1", 0, false, 500 * time.Millisecond},
		{"2.2.2.2", 0, true, 0}, // keys are independent
		{"1.1.1.1", 100 * time.Millisecond, false, 400 * time.Millisecond},
		{"1.1.1.1", 500 * time.Millisecond, true, 0},
		{"1.1.1.1", 500 * time.Millisecond, false, 500 * time.Millisecond},
		{"1.1.1.1", 5 * time.Second, true, 0},
		{"1.1.1.1", 5 * time.Second, true, 0},
		{"1.1.1.1", 5 * time.Second, false, 500 * time.Millisecond},
	} {
		ok, retry := l.Allow(st.key, t0.Add(st.at))
		if ok != st.ok || retry != st.retry {
			t.Fatalf("step %d: Allow(%s, +%v) = %v, %v; want %v, %v", i, st.key, st.at, ok, retry, st.ok, st.retry)
		}
	}

	for _, u := range []*RateLimiter{NewRateLimiter(0), NewRateLimiter(-1), nil} {
		for range 100 {
			if ok, _ := u.Allow("k", t0); !ok {
				t.Fatal("unlimited limiter refused")
			}
		}
		if u.Len() != 0 {
			t.Fatal("unlimited limiter tracks keys")
		}
		u.Sweep(t0)
	}
}

// Idle keys are forgotten, so many distinct IPs do not grow the table.
func TestRateLimiterEviction(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	l := NewRateLimiter(10)
	for i := range 5000 {
		l.Allow(fmt.Sprintf("10.0.%d.%d", i/256, i%256), t0)
	}
	if n := l.Len(); n != 5000 {
		t.Fatalf("Len = %d, want 5000", n)
	}
	// Lazy: new traffic two seconds later sweeps the shards it touches.
	for i := range 5000 {
		l.Allow(fmt.Sprintf("10.1.%d.%d", i/256, i%256), t0.Add(2*time.Second))
	}
	if n := l.Len(); n != 5000 {
		t.Fatalf("after lazy sweeps Len = %d, want 5000 (only the new keys)", n)
	}
	l.Sweep(t0.Add(time.Hour))
	if n := l.Len(); n != 0 {
		t.Fatalf("after Sweep Len = %d, want 0", n)
	}
	// A forgotten key starts with a full bucket, as if never seen.
	for range 10 {
		if ok, _ := l.Allow("10.0.0.1", t0.Add(time.Hour)); !ok {
			t.Fatal("burst refused after eviction")
		}
	}
}

// The table never exceeds its cap even when every key is busy; a new key
// is still served (an arbitrary old one is forgotten).
func TestRateLimiterCap(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	l := NewRateLimiter(0.001) // keys stay for 1000 s
	l.shardCap = 8
	const maxKeys = 8 * limiterShards
	for i := range 20 * maxKeys {
		if ok, _ := l.Allow(fmt.Sprint(i), t0.Add(time.Duration(i)*time.Millisecond)); !ok {
			t.Fatal("new key refused")
		}
		if n := l.Len(); n > maxKeys {
			t.Fatalf("Len = %d, above the cap %d", n, maxKeys)
		}
	}
	if RateLimiterMaxKeys/limiterShards != NewRateLimiter(1).shardCap {
		t.Fatal("default cap not applied")
	}
}

func TestRateLimiterConcurrent(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	l := NewRateLimiter(100)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		allowed int
	)
	for g := range 8 {
		wg.Go(func() {
			n := 0
			for i := range 1000 {
				if ok, _ := l.Allow("shared", t0); ok {
					n++
				}
				l.Allow(fmt.Sprint(g, i), t0.Add(time.Duration(i)*time.Millisecond))
			}
			mu.Lock()
			allowed += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if allowed != 100 {
		t.Fatalf("allowed %d events at one instant, want the burst of 100", allowed)
	}
}

func TestConnCounter(t *testing.T) {
	c := NewConnCounter(2)
	steps := []struct {
		op   string // "a" acquire, "r" release
		key  string
		want bool // for acquire
		n    int  // Count(key) after
	}{
		{"a", "ip1", true, 1},
		{"a", "ip1", true, 2},
		{"a", "ip1", false, 2},
		{"a", "ip2", true, 1},
		{"r", "ip1", false, 1},
		{"a", "ip1", true, 2},
		{"r", "ip1", false, 1},
		{"r", "ip1", false, 0},
		{"r", "ip1", false, 0}, // extra release is a no-op
		{"a", "ip1", true, 1},
		{"r", "ip1", false, 0},
		{"r", "ip2", false, 0},
		{"r", "never", false, 0},
	}
	for i, st := range steps {
		if st.op == "a" {
			if got := c.Acquire(st.key); got != st.want {
				t.Fatalf("step %d: Acquire(%s) = %v, want %v", i, st.key, got, st.want)
			}
		} else {
			c.Release(st.key)
		}
		if n := c.Count(st.key); n != st.n {
			t.Fatalf("step %d: Count(%s) = %d, want %d", i, st.key, n, st.n)
		}
	}
	if n := c.Len(); n != 0 {
		t.Fatalf("Len = %d after all releases, want 0 (entries removed at zero)", n)
	}

	for _, u := range []*ConnCounter{NewConnCounter(0), nil} {
		for range 100 {
			if !u.Acquire("k") {
				t.Fatal("unlimited counter refused")
			}
		}
		u.Release("k")
		if u.Len() != 0 || u.Count("k") != 0 {
			t.Fatal("unlimited counter tracks keys")
		}
	}
}

func TestConnCounterConcurrent(t *testing.T) {
	const limit = 10
	c := NewConnCounter(limit)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		held int
		peak int
	)
	for range 16 {
		wg.Go(func() {
			for range 500 {
				if !c.Acquire("ip") {
					continue
				}
				mu.Lock()
				held++
				peak = max(peak, held)
				mu.Unlock()
				mu.Lock()
				held--
				mu.Unlock()
				c.Release("ip")
			}
		})
	}
	wg.Wait()
	if peak > limit {
		t.Fatalf("peak %d holders, limit %d", peak, limit)
	}
	if c.Count("ip") != 0 || c.Len() != 0 {
		t.Fatalf("count %d, len %d after all released", c.Count("ip"), c.Len())
	}
}

func BenchmarkRateLimiterAllow(b *testing.B) {
	l := NewRateLimiter(1e9)
	now := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	for b.Loop() {
		l.Allow("203.0.113.7", now)
	}
}

func BenchmarkBucketTake(b *testing.B) {
	var bk Bucket
	now := int64(1_800_000_000) * int64(time.Second)
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		bk.Take(100, now)
	}
}

package client

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

func TestBackoffCapDoubles(t *testing.T) {
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30}
	for attempt, w := range want {
		if got := backoffCap(attempt, time.Second, 30*time.Second); got != w*time.Second {
			t.Errorf("cap(%d) = %v, want %v", attempt, got, w*time.Second)
		}
	}
	if got := backoffCap(1000, time.Second, 30*time.Second); got != 30*time.Second {
		t.Errorf("cap(1000) = %v", got)
	}
}

func TestBackoffFullJitter(t *testing.T) {
	lo, hi := time.Second, 30*time.Second
	// The extremes of the random source give exactly 0 and the cap.
	top := func(n int64) int64 { return n - 1 }
	zero := func(int64) int64 { return 0 }
	for attempt := range 8 {
		c := backoffCap(attempt, lo, hi)
		if got := backoff(attempt, lo, hi, top); got != c {
			t.Errorf("attempt %d: top of the range %v, want the cap %v", attempt, got, c)
		}
		if got := backoff(attempt, lo, hi, zero); got != 0 {
			t.Errorf("attempt %d: bottom of the range %v, want 0", attempt, got)
		}
	}

	// A seeded source: every value in [0, cap], spread over the whole range.
	r := rand.New(rand.NewPCG(1, 2))
	for attempt := range 8 {
		c := backoffCap(attempt, lo, hi)
		minv, maxv := c, time.Duration(0)
		for range 2000 {
			d := backoff(attempt, lo, hi, r.Int64N)
			if d < 0 || d > c {
				t.Fatalf("attempt %d: %v outside [0, %v]", attempt, d, c)
			}
			minv, maxv = min(minv, d), max(maxv, d)
		}
		if minv > c/20 || maxv < c-c/20 {
			t.Errorf("attempt %d: values in [%v, %v], want them spread over [0, %v]", attempt, minv, maxv, c)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"":       0,
		"3":      3 * time.Second,
		"0":      0,
		"-1":     0,
		"junk":   0,
		"999999": maxRetryAfter,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	}
	for in, want := range cases {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// quickJitter bounds the delay of an "at once" reconnect (close 4001, 4401),
// so that a draining node's clients do not all arrive in the same instant.
const quickJitter = 250 * time.Millisecond

// maxQuick is how many "at once" reconnects may follow each other without
// a healthy connection in between before the normal backoff takes over: a
// server that keeps closing with 4001 or 4401 at once must not be hammered.
const maxQuick = 3

// stableAfter is how long a connection must live to reset the backoff (a
// welcome followed by a message also does).
const stableAfter = 10 * time.Second

// backoffCap is the ceiling of retry number attempt (from 0):
// min(hi, lo*2^attempt).
func backoffCap(attempt int, lo, hi time.Duration) time.Duration {
	c := lo
	for i := 0; i < attempt && c < hi; i++ {
		c *= 2
	}
	return min(c, hi)
}

// backoff is the delay before retry number attempt, with full jitter:
// uniform in [0, backoffCap(attempt)]. rnd(n) returns a value in [0, n).
// Full jitter spreads a fleet's reconnects over the whole window instead
// of synchronising them (LESSONS, "Reconnect storms").
func backoff(attempt int, lo, hi time.Duration, rnd func(n int64) int64) time.Duration {
	return time.Duration(rnd(int64(backoffCap(attempt, lo, hi)) + 1))
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Backoff is the delay before reconnect number attempt (from 0) with the
// clients' policy: full jitter, uniform in [0, min(hi, lo*2^attempt)].
// Exported for load generators that reconnect on their own.
func Backoff(attempt int, lo, hi time.Duration) time.Duration {
	return backoff(attempt, lo, hi, rand.Int64N)
}

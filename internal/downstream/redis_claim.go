package downstream

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// The order guard, takeover and lag of a Redis stream source (redis.go).

// guardScan bounds the pending entries one guard read looks at (the sum of
// the nodes' in-flight bounds, with room to spare).
const guardScan = 20000

// maxCachedTargets bounds the cache of other entries' targets.
const maxCachedTargets = 50000

// computeGuards sets each entry's guard: the group's pending entries
// older than the first one (any consumer's) that name one of its targets.
// When ctx ends first, the entries are marked not to be handled.
func (s *redisSource) computeGuards(ctx context.Context, entries []entry) {
	first := entries[0].id
	var pend []redis.XPendingExt
	ok := s.retryUntil(ctx, "XPENDING", func(ctx context.Context) error {
		var err error
		pend, err = s.c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.opts.stream, Group: s.opts.group, Start: "-", End: "(" + first, Count: guardScan}).Result()
		return err
	})
	if !ok {
		for i := range entries {
			entries[i].guard = []string{first} // never leaves while ctx is over
		}
		return
	}
	if len(pend) == guardScan {
		s.log.Warn("more pending entries than the order guard reads: order across nodes may not hold", "pending_read", guardScan)
	}
	if len(pend) == 0 {
		return
	}
	targets := s.targetsOfPending(ctx, pend)
	// The pending entries of each target, oldest first.
	byTarget := map[string][]string{}
	for _, p := range pend {
		for _, t := range targets[p.ID] {
			byTarget[t] = append(byTarget[t], p.ID)
		}
	}
	for i := range entries {
		e := &entries[i]
		switch len(e.targets) {
		case 0:
		case 1:
			for _, id := range byTarget[e.targets[0]] {
				if id != e.id {
					e.guard = append(e.guard, id)
				}
			}
		default:
			for _, p := range pend {
				if p.ID != e.id && overlaps(targets[p.ID], e.targets) {
					e.guard = append(e.guard, p.ID)
				}
			}
		}
	}
}

// targetsOfPending returns the targets of pending entries, read with
// XRANGE for those not seen yet (an entry deleted from the stream names
// none).
func (s *redisSource) targetsOfPending(ctx context.Context, pend []redis.XPendingExt) map[string][]string {
	out := make(map[string][]string, len(pend))
	var missing []string
	s.mu.Lock()
	for _, p := range pend {
		if t, ok := s.targets[p.ID]; ok {
			out[p.ID] = t
		} else {
			missing = append(missing, p.ID)
		}
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return out
	}
	s.retryUntil(ctx, "XRANGE", func(ctx context.Context) error {
		pipe := s.c.Pipeline()
		cmds := make([]*redis.XMessageSliceCmd, len(missing))
		for i, id := range missing {
			cmds[i] = pipe.XRange(ctx, s.opts.stream, id, id)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i, id := range missing {
			var t []string
			if ms, err := cmds[i].Result(); err == nil && len(ms) == 1 {
				t = toEntry(ms[0]).targets
			}
			out[id] = t
		}
		return nil
	})
	s.mu.Lock()
	if len(s.targets)+len(missing) > maxCachedTargets {
		clear(s.targets)
	}
	for _, id := range missing {
		s.targets[id] = out[id]
	}
	s.mu.Unlock()
	return out
}

// awaitGuard waits until none of the guard's entries (sorted) is pending
// any more; false when ctx ended first. A guard entry idle for claim_idle
// in another consumer's hands (a dead node's) is claimed and handled here
// first, so that no wait depends on the claim loop, which may itself be
// waiting for older entries.
func (s *redisSource) awaitGuard(ctx context.Context, guard []string) bool {
	for try := 0; len(guard) > 0; try++ {
		if ctx.Err() != nil {
			return false
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		pend, err := s.pendingOf(cctx, guard)
		cancel()
		if err == nil {
			still := make(map[string]redis.XPendingExt, len(pend))
			for _, p := range pend {
				still[p.ID] = p
			}
			kept := guard[:0]
			var stale []string
			for _, id := range guard {
				p, ok := still[id]
				if !ok {
					continue
				}
				kept = append(kept, id)
				if p.Consumer != s.consumer && p.Idle >= s.opts.claimIdle && !s.holds(id) {
					stale = append(stale, id)
				}
			}
			guard = kept
			if len(guard) == 0 {
				return true
			}
			if len(stale) > 0 {
				s.claimAndHandle(ctx, stale)
				continue
			}
		}
		if !sleep(ctx, min(5*time.Millisecond<<min(try, 6), 200*time.Millisecond)) {
			return false
		}
	}
	return true
}

// pendingOf returns those of ids that are pending, one XPENDING per id in
// one pipeline: a range from the first to the last would bring every
// entry pending between them, hundreds when the nodes are busy.
func (s *redisSource) pendingOf(ctx context.Context, ids []string) ([]redis.XPendingExt, error) {
	pipe := s.c.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.opts.stream, Group: s.opts.group, Start: id, End: id, Count: 1})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var out []redis.XPendingExt
	for _, c := range cmds {
		p, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		out = append(out, p...)
	}
	return out, nil
}

// claimAndHandle claims entries idle for claim_idle (XCLAIM: only one
// node wins each) and handles those it got, oldest first.
func (s *redisSource) claimAndHandle(ctx context.Context, ids []string) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	msgs, err := s.c.XClaim(cctx, &redis.XClaimArgs{Stream: s.opts.stream, Group: s.opts.group, Consumer: s.consumer, MinIdle: s.opts.claimIdle, Messages: ids}).Result()
	cancel()
	if err != nil {
		return
	}
	for _, m := range msgs {
		if !s.holds(m.ID) {
			s.ordered(ctx, toEntry(m))
		}
	}
}

// ordered handles one entry outside the lanes, after every older pending
// entry of its targets: the node's own pending entries at start and the
// entries it claims. They are older than anything in the lanes, so the
// lanes' entries may wait for them but never the other way round.
func (s *redisSource) ordered(ctx context.Context, e entry) {
	s.hold(e.id)
	defer s.unhold(e.id)
	es := []entry{e}
	s.computeGuards(ctx, es)
	s.process(ctx, es[0])
}

// claimTick is how often a node looks for entries to claim.
var claimTick = time.Second

// claimLoop, every claimTick, claims and handles the entries idle for claim_idle in other consumers' hands.
func (s *redisSource) claimLoop(ctx, hctx context.Context) {
	t := time.NewTicker(min(claimTick, s.opts.claimIdle/2))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start, claimed := "0-0", 0
		for ctx.Err() == nil {
			msgs, next, err := s.c.XAutoClaim(ctx, &redis.XAutoClaimArgs{
				Stream: s.opts.stream, Group: s.opts.group, Consumer: s.consumer,
				MinIdle: s.opts.claimIdle, Start: start, Count: 100,
			}).Result()
			if err != nil {
				break
			}
			for _, m := range msgs {
				if s.holds(m.ID) {
					continue // ours, in hand: its refresh was late
				}
				s.ordered(hctx, toEntry(m))
				claimed++
			}
			if len(msgs) == 0 || next == "0-0" || next == "" {
				break
			}
			start = next
		}
		if claimed > 0 {
			s.log.Info("claimed records idle in other consumers' hands", "records", claimed, "idle", s.opts.claimIdle)
		}
	}
}

// ownPending handles the entries this consumer had read and not
// acknowledged before (a restart with the same node id). Run calls it
// before it reads new entries.
func (s *redisSource) ownPending(ctx, hctx context.Context) {
	start, n := "0", 0
	for try := 0; ctx.Err() == nil; {
		res, err := s.c.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: s.opts.group, Consumer: s.consumer, Streams: []string{s.opts.stream, start}, Count: 100, Block: -1,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			if !sleep(ctx, backoff(try)) {
				return
			}
			try++
			continue
		}
		if len(res) == 0 || len(res[0].Messages) == 0 {
			break
		}
		for _, m := range res[0].Messages {
			start = m.ID
			if s.holds(m.ID) {
				continue // claimed meanwhile by a guard's wait
			}
			s.ordered(hctx, toEntry(m))
			n++
		}
	}
	if n > 0 {
		s.log.Info("handled this consumer's pending records from before", "records", n)
	}
}

// refreshLoop keeps the entries in hand from looking idle to the other
// nodes' claims.
func (s *redisSource) refreshLoop(ctx context.Context) {
	every := s.opts.claimIdle / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ids []string
		s.mu.Lock()
		for id, since := range s.held {
			if time.Since(since) >= every {
				ids = append(ids, id)
			}
		}
		s.mu.Unlock()
		for len(ids) > 0 {
			n := min(len(ids), 500)
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = s.c.XClaimJustID(cctx, &redis.XClaimArgs{Stream: s.opts.stream, Group: s.opts.group, Consumer: s.consumer, Messages: ids[:n]}).Err()
			cancel()
			ids = ids[n:]
		}
	}
}

// lagEvery is the period of the lag gauge's update.
const lagEvery = 2 * time.Second

// consumerForgetAfter: a consumer with nothing pending and idle this long
// is removed from the group (node ids change with every start).
const consumerForgetAfter = time.Hour

// lagLoop sets wsgate_downstream_lag to the group's lag (entries not yet
// delivered) plus its pending entries, and removes consumers long gone.
func (s *redisSource) lagLoop(ctx context.Context) {
	t := time.NewTicker(lagEvery)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		groups, err := s.c.XInfoGroups(cctx, s.opts.stream).Result()
		if err == nil {
			for _, g := range groups {
				if g.Name == s.opts.group {
					s.lag.Set(float64(max(g.Lag, 0) + g.Pending))
				}
			}
		}
		if i%30 == 29 {
			if cs, err := s.c.XInfoConsumers(cctx, s.opts.stream, s.opts.group).Result(); err == nil {
				for _, c := range cs {
					if c.Name != s.consumer && c.Pending == 0 && c.Idle >= consumerForgetAfter {
						_ = s.c.XGroupDelConsumer(cctx, s.opts.stream, s.opts.group, c.Name).Err()
					}
				}
			}
		}
		cancel()
	}
}

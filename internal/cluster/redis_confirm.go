package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Confirmations of reads (RedisOptions.Replicas > 0) are grouped per
// master. Replication is one ordered stream per master, so one write
// confirmed by WAIT covers every read that master answered before the
// write was sent: a read joins the next round of its master, and one
// SET + WAIT runs per round, at most one round in flight per master. A
// reconnect storm of N users with messages to replay costs about two
// rounds of WAIT per master, not N in a row, and while the replicas are
// down (each round waits waitTimeout) it holds one of the pool's
// connections per master, not one per reader.

// confirmRound is one SET + WAIT and the reads waiting for it.
type confirmRound struct {
	key  string // a key of the master's slots: the first waiter's
	done chan struct{}
	n    int64 // replicas that confirmed, once done
	err  error
}

// masterConfirms are the rounds of one master.
type masterConfirms struct {
	mu      sync.Mutex
	running bool
	next    *confirmRound // the round new reads join; nil when none waits
	// Until downUntil the last round found too few replicas (for
	// waitTimeout after it ended): a read is answered ErrNotReplicated
	// at once, and the round it schedules finds out when they are back.
	// A read that was already waiting took 1 to 2 rounds: each step of a
	// handshake waiting as long would spend its deadline on the outage.
	downUntil time.Time
	downN     int64
}

// confirmKey makes sure that what a read made before this call saw on the
// master that holds key is on RedisOptions.Replicas replicas too; what
// the read was is for the error.
func (r *Redis) confirmKey(ctx context.Context, key, what string) error {
	c, err := r.masterFor(ctx, key)
	if err != nil {
		return r.wrap("confirm read", err)
	}
	mc := r.confirmsOf(c)
	mc.mu.Lock()
	rnd := mc.next
	if rnd == nil {
		rnd = &confirmRound{key: key, done: make(chan struct{})}
		mc.next = rnd
	}
	if !mc.running {
		mc.running = true
		go r.runConfirms(c, mc) // ends with the last round (each bounded by its timeout)
	}
	down, downN := time.Now().Before(mc.downUntil), mc.downN
	mc.mu.Unlock()
	if down {
		return fmt.Errorf("%w: %s confirmed by %d of %d replicas (in the last round)", ErrNotReplicated, what, downN, r.opt.Replicas)
	}
	select {
	case <-rnd.done:
	case <-ctx.Done():
		return r.wrap("confirm read", ctx.Err())
	}
	if rnd.err != nil {
		return r.wrap("confirm read", rnd.err)
	}
	if rnd.n < int64(r.opt.Replicas) {
		return fmt.Errorf("%w: %s confirmed by %d of %d replicas", ErrNotReplicated, what, rnd.n, r.opt.Replicas)
	}
	return nil
}

// confirmsOf is the rounds of master c (by address: a cluster client may
// replace its node clients).
func (r *Redis) confirmsOf(c *redis.Client) *masterConfirms {
	addr := c.Options().Addr
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.confirms == nil {
		r.confirms = map[string]*masterConfirms{}
	}
	mc := r.confirms[addr]
	if mc == nil {
		mc = &masterConfirms{}
		r.confirms[addr] = mc
	}
	return mc
}

// runConfirms runs the rounds of mc one after the other while reads join
// them.
func (r *Redis) runConfirms(c *redis.Client, mc *masterConfirms) {
	for {
		mc.mu.Lock()
		rnd := mc.next
		mc.next = nil
		if rnd == nil {
			mc.running = false
			mc.mu.Unlock()
			return
		}
		mc.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout+r.opt.OpTimeout)
		pipe := c.Pipeline()
		pipe.Set(ctx, rnd.key, 1, 10*time.Second)
		wait := redis.NewIntCmd(ctx, "wait", r.opt.Replicas, waitTimeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		_, rnd.err = pipe.Exec(ctx)
		rnd.n = wait.Val()
		cancel()
		mc.mu.Lock()
		if rnd.err == nil && rnd.n < int64(r.opt.Replicas) {
			mc.downUntil, mc.downN = time.Now().Add(waitTimeout), rnd.n
		} else {
			mc.downUntil = time.Time{}
		}
		mc.mu.Unlock()
		close(rnd.done)
	}
}

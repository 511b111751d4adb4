package cluster

import (
	"context"
	"fmt"
	"strings"
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

//
// A WAIT confirms only what the server it runs on holds: after a failover
// the client sends the round to the new master, whose replica (the old
// master, now following it) confirms at once, while the read was answered
// by the old master and may hold a write the failover lost (its seq then
// goes to another message on the new master: the client would take that
// one for a duplicate). So a read is confirmed only by a round on the
// master it was made on: each round reads the master's replication ID
// (INFO, in the round's pipeline), which a promotion always changes, and a
// read notes, before it is sent, the ID the last round found (readMark).
// The same ID before the read and in the round that confirms it means no
// promotion in between: the read was answered by that master.

// confirmRound is one INFO + SET + WAIT and the reads waiting for it.
type confirmRound struct {
	key    string // a key of the master's slots: the first waiter's
	done   chan struct{}
	n      int64  // replicas that confirmed, once done
	replid string // the master's replication ID ("" if unknown or not a master)
	err    error
}

// readMark is what a read notes before it is sent: the master's rounds
// and the replication ID their last round found.
type readMark struct {
	mc     *masterConfirms
	replid string
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
	replid    string // what the last round found; "" before the first
}

// markRead notes, before a read that confirmKey will confirm is sent,
// which master the rounds of key's master last found; with no round yet
// (or the last one found none), it runs one first. Without
// RedisOptions.Replicas it notes nothing.
func (r *Redis) markRead(ctx context.Context, key string) readMark {
	if r.opt.Replicas == 0 {
		return readMark{}
	}
	c, err := r.masterFor(ctx, key)
	if err != nil {
		return readMark{} // confirmKey finds the same error
	}
	mc := r.confirmsOf(c)
	mc.mu.Lock()
	id := mc.replid
	var rnd *confirmRound
	if id == "" {
		rnd = r.joinRoundLocked(c, mc, key)
	}
	mc.mu.Unlock()
	if rnd != nil {
		select {
		case <-rnd.done:
			id = rnd.replid
		case <-ctx.Done():
		}
	}
	return readMark{mc, id}
}

// joinRoundLocked returns the round new reads of mc join, starting the
// rounds if none runs; mc.mu is held.
func (r *Redis) joinRoundLocked(c *redis.Client, mc *masterConfirms, key string) *confirmRound {
	rnd := mc.next
	if rnd == nil {
		rnd = &confirmRound{key: key, done: make(chan struct{})}
		mc.next = rnd
	}
	if !mc.running {
		mc.running = true
		go r.runConfirms(c, mc) // ends with the last round (each bounded by its timeout)
	}
	return rnd
}

// confirmKey makes sure that what a read made after markRead returned mark
// saw on the master that holds key is on RedisOptions.Replicas replicas
// too; what the read was is for the error. A read the master answered
// before a failover is not confirmed (ErrNotReplicated): the caller reads
// again.
func (r *Redis) confirmKey(ctx context.Context, key string, mark readMark, what string) error {
	c, err := r.masterFor(ctx, key)
	if err != nil {
		return r.wrap("confirm read", err)
	}
	mc := r.confirmsOf(c)
	if mark.mc != mc || mark.replid == "" {
		return fmt.Errorf("%w: %s: the master changed since the read", ErrNotReplicated, what)
	}
	mc.mu.Lock()
	rnd := r.joinRoundLocked(c, mc, key)
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
	if rnd.replid != mark.replid {
		return fmt.Errorf("%w: %s: a failover since the read (master replication ID %q, then %q)", ErrNotReplicated, what, mark.replid, rnd.replid)
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
		info := pipe.Info(ctx, "replication")
		pipe.Set(ctx, rnd.key, 1, 10*time.Second)
		wait := redis.NewIntCmd(ctx, "wait", r.opt.Replicas, waitTimeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		_, rnd.err = pipe.Exec(ctx)
		rnd.n = wait.Val()
		rnd.replid = masterReplID(info.Val())
		cancel()
		mc.mu.Lock()
		mc.replid = rnd.replid
		if rnd.err == nil && rnd.n < int64(r.opt.Replicas) {
			mc.downUntil, mc.downN = time.Now().Add(waitTimeout), rnd.n
		} else {
			mc.downUntil = time.Time{}
		}
		mc.mu.Unlock()
		close(rnd.done)
	}
}

// masterReplID is the master_replid of an INFO replication answer, "" when
// the server is not a master (or the answer is not one).
func masterReplID(info string) string {
	var id string
	master := false
	for line := range strings.Lines(info) {
		line = strings.TrimRight(line, "\r\n")
		if line == "role:master" {
			master = true
		}
		if v, ok := strings.CutPrefix(line, "master_replid:"); ok {
			id = v
		}
	}
	if !master {
		return ""
	}
	return id
}

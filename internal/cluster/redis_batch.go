package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher pipelines concurrent calls of one kind: a call made while a
// batch is in flight goes in the next one, so that under load many calls
// share one round trip, and a lone call is sent at once (no timer, no
// added latency). Batches run one after another, in call order.
//
// A call whose caller gave up (its context is done) before its batch is
// sent is answered with that error and never sent; the queue is bounded
// (batchQueueMax calls waiting), beyond which a call is answered
// unavailable at once, as while Redis hangs nothing drains it.
type batcher[T batchReq] struct {
	mu      sync.Mutex
	pending []T
	running bool
}

const (
	batchMax      = 256
	batchQueueMax = 16384
)

var errQueueFull = fmt.Errorf("%w: too many redis calls waiting", ErrUnavailable)

// batchReq is a call queued in a batcher; its reqBase holds the caller's
// context and its answer.
type batchReq interface{ base() *reqBase }

// reqBase is the common part of a batched call: the caller's context and
// the answer, given exactly once (finish).
type reqBase struct {
	ctx  context.Context
	err  error
	done chan struct{}
}

func newReqBase(ctx context.Context) reqBase {
	return reqBase{ctx: ctx, done: make(chan struct{})}
}

func (q *reqBase) base() *reqBase { return q }

func (q *reqBase) finish(err error) {
	q.err = err
	close(q.done)
}

// call queues q with ctx (bounded by OpTimeout) and waits for its answer.
func (b *batcher[T]) call(ctx context.Context, r *Redis, op string, run func([]T), q T) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	*q.base() = newReqBase(ctx)
	if err := b.add(run, q); err != nil {
		return err
	}
	return q.base().wait(op)
}

// wait waits for the call's answer within its context.
func (q *reqBase) wait(op string) error {
	select {
	case <-q.done:
		return q.err
	case <-q.ctx.Done():
		return fmt.Errorf("%w: redis %s: %w", ErrUnavailable, op, q.ctx.Err())
	}
}

// add queues qs together: contiguous and in order, so that they share as
// few round trips as possible; run executes a batch (on the batcher's
// goroutine). When the queue is full, nothing is queued.
func (b *batcher[T]) add(run func([]T), qs ...T) error {
	if len(qs) == 0 {
		return nil
	}
	b.mu.Lock()
	if len(b.pending)+len(qs) > batchQueueMax {
		b.mu.Unlock()
		return errQueueFull
	}
	b.pending = append(b.pending, qs...)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.loop(run)
	}
	return nil
}

func (b *batcher[T]) loop(run func([]T)) {
	for {
		b.mu.Lock()
		var batch []T
		n := 0
		for n < len(b.pending) && len(batch) < batchMax {
			q := b.pending[n]
			n++
			if err := q.base().ctx.Err(); err != nil {
				q.base().finish(fmt.Errorf("%w: redis call given up before it was sent: %w", ErrUnavailable, err))
				continue
			}
			batch = append(batch, q)
		}
		b.pending = append(b.pending[:0], b.pending[n:]...)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if len(batch) > 0 {
			run(batch)
		}
	}
}

// batchCtx bounds a batch's round trip by the latest deadline of its
// calls: nobody waits for it longer.
func batchCtx[T batchReq](batch []T) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, q := range batch {
		if d, ok := q.base().ctx.Deadline(); ok && d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(context.Background(), last)
}

// sendDeadline is the deadline a script compares with Redis's clock
// (luaPastDeadline) for a call sent now: when its caller gives up on this
// attempt, at its context's deadline or the read timeout, whichever is
// first. A script that runs later does nothing.
func sendDeadline(ctx context.Context, now time.Time) int64 {
	d := now.Add(redisReadTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	return d.UnixMilli()
}

// scriptBatcher pipelines concurrent inbox appends.
type scriptBatcher struct{ batcher[*appendReq] }

// appendReq is one message to append (scriptAppend).
type appendReq struct {
	reqBase
	keys    []string // seq, ack, inbox, routes, idempotency record
	opt     [3]int64 // ttlMs, limit, keepMs
	now     int64    // Unix ms
	keyMs   int64    // lifetime of the idempotency record (0: no key)
	payload []byte
	reply   []any // {seq, routes} or {0, error message}
}

func (r *Redis) newAppendReq(a InboxAppend, opt InboxOptions, now time.Time) *appendReq {
	var ttl, keep int64
	if opt.TTL > 0 {
		ttl = max(opt.TTL.Milliseconds(), 1)
		keep = max(opt.TTL, minSeqLifetime).Milliseconds()
	}
	u := a.User
	q := &appendReq{
		keys:    []string{r.k.seq(u), r.k.ack(u), r.k.inbox(u), r.k.routes(u), r.k.seq(u)},
		opt:     [3]int64{ttl, int64(max(opt.Limit, 0)), keep},
		now:     now.UnixMilli(),
		payload: a.Payload,
	}
	if a.Key != "" {
		q.keys[4], q.keyMs = r.k.userIdem(u, a.Key), KeyLifetime.Milliseconds()
	}
	return q
}

// keysArgs are scriptAppend's keys and arguments for appending qs in one
// call sent at now (they share their options).
func appendKeysArgs(qs []*appendReq, now time.Time) ([]string, []any) {
	keys := make([]string, 0, 5*len(qs))
	args := make([]any, 0, 4+3*len(qs))
	args = append(args, qs[0].now, qs[0].opt[0], qs[0].opt[1], qs[0].opt[2])
	for _, q := range qs {
		keys = append(keys, q.keys...)
		args = append(args, q.keyMs, sendDeadline(q.ctx, now), q.payload)
	}
	return keys, args
}

// appendBatch sends the batch as one pipeline: one scriptAppend call for
// every run of messages with the same options (the whole batch, in
// practice), or one call per message on Redis Cluster, where a script's
// keys must share a slot. Appends are not idempotent: the batch is retried
// only when Redis surely did not run it.
func (r *Redis) appendBatch(batch []*appendReq) {
	ctx, cancel := batchCtx(batch)
	defer cancel()
	_, perMessage := r.c.(*redis.ClusterClient)
	type call struct{ reqs []*appendReq }
	var calls []*call
	for _, q := range batch {
		if n := len(calls); n > 0 && !perMessage && calls[n-1].reqs[0].opt == q.opt {
			calls[n-1].reqs = append(calls[n-1].reqs, q)
			continue
		}
		calls = append(calls, &call{reqs: []*appendReq{q}})
	}
	cmds, err := r.evalEach(ctx, "append inbox", false, scriptAppend, len(calls), func(i int) ([]string, []any) {
		return appendKeysArgs(calls[i].reqs, time.Now())
	})
	for i, c := range calls {
		cerr := err
		var parts []any
		if cerr == nil {
			if cerr = cmds[i].Err(); cerr != nil {
				cerr = r.wrap("append inbox", cerr)
			} else if parts, _ = cmds[i].Val().([]any); len(parts) != 2*len(c.reqs) {
				cerr = fmt.Errorf("cluster: redis append: unexpected reply of %d parts for %d messages", len(parts), len(c.reqs))
			}
		}
		for j, q := range c.reqs {
			if cerr == nil {
				q.reply = parts[2*j : 2*j+2 : 2*j+2]
			}
			q.finish(cerr)
		}
	}
}

// publishBatcher pipelines concurrent bus sends (Send and Broadcast) in
// call order: one publisher's messages keep their order.
type publishBatcher struct{ batcher[*publishReq] }

type publishReq struct {
	reqBase
	sharded  bool // SPUBLISH, not PUBLISH (Redis Cluster)
	channels []string
	payload  []byte   // for every channel, or:
	payloads [][]byte // one per channel
}

// publishBatch sends the bus messages of a batch as one pipeline.
func (r *Redis) publishBatch(batch []*publishReq) {
	if r.shard != nil {
		r.publishCluster(batch)
		return
	}
	ctx, cancel := batchCtx(batch)
	defer cancel()
	var channels []string
	var payloads [][]byte
	for _, q := range batch {
		for i, ch := range q.channels {
			channels = append(channels, ch)
			if q.payloads != nil {
				payloads = append(payloads, q.payloads[i])
			} else {
				payloads = append(payloads, q.payload)
			}
		}
	}
	// Not idempotent: a repeat could deliver twice.
	err := r.do(ctx, "send", false, func(ctx context.Context) error {
		return r.publishMany(ctx, channels, payloads)
	})
	for _, q := range batch {
		q.finish(err)
	}
}

// evalEach runs script once per call in one pipeline (EVALSHA), sent
// again while that is safe (idempotent: also after a transient error
// reply; see Redis.do). A call that finds the script not loaded on its
// server (NOSCRIPT: first use, a restarted Redis, a new Cluster master)
// runs again alone with EVAL, which loads it. It returns each call's
// command (whose own error is the call's), or the error that failed them
// all.
func (r *Redis) evalEach(ctx context.Context, op string, idempotent bool, script *redis.Script, n int, keysArgs func(i int) ([]string, []any)) ([]*redis.Cmd, error) {
	return r.evalEachWith(ctx, op, idempotent, script, n, keysArgs, nil)
}

// evalEachWith is evalEach with more commands per call in the same
// pipeline: with(p, i) queues call i's (they must be idempotent when the
// script is: the pipeline may be sent again). Their errors are theirs to
// read; a NOSCRIPT call runs its script again alone, not them.
func (r *Redis) evalEachWith(ctx context.Context, op string, idempotent bool, script *redis.Script, n int, keysArgs func(i int) ([]string, []any), with func(p redis.Pipeliner, i int)) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	err := r.do(ctx, op, idempotent, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range cmds {
				keys, args := keysArgs(i)
				cmds[i] = script.EvalSha(ctx, p, keys, args...)
				if with != nil {
					with(p, i)
				}
			}
			return nil
		})
		var re redis.Error
		if err != nil && errors.As(err, &re) {
			for _, c := range cmds {
				if e := c.Err(); idempotent && e != nil && !isNoScript(e) && unavailable(e) {
					return e // LOADING, READONLY, ...: send the batch again
				}
			}
			return nil // replies with errors are the calls' own
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			keys, args := keysArgs(i)
			cmds[i] = script.Run(ctx, r.c, keys, args...)
		}
	}
	return cmds, nil
}

// bound gives a call without a deadline the backend's OpTimeout, so that a
// caller waiting for a batch is never held longer than a direct call (and
// every batched call has a deadline).
func (r *Redis) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, r.opt.OpTimeout)
}

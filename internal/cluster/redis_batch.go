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
type batcher[T any] struct {
	mu      sync.Mutex
	pending []T
	running bool
}

const batchMax = 256

// add queues q; run executes a batch (on the batcher's goroutine).
func (b *batcher[T]) add(q T, run func([]T)) {
	b.mu.Lock()
	b.pending = append(b.pending, q)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.loop(run)
	}
}

// addAll queues qs together: contiguous and in order, so that they share
// as few round trips as possible.
func (b *batcher[T]) addAll(qs []T, run func([]T)) {
	if len(qs) == 0 {
		return
	}
	b.mu.Lock()
	b.pending = append(b.pending, qs...)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.loop(run)
	}
}

func (b *batcher[T]) loop(run func([]T)) {
	for {
		b.mu.Lock()
		n := min(len(b.pending), batchMax)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		batch := append([]T(nil), b.pending[:n]...)
		b.pending = append(b.pending[:0], b.pending[n:]...)
		b.mu.Unlock()
		run(batch)
	}
}

// scriptBatcher pipelines concurrent inbox appends.
type scriptBatcher struct{ batcher[*appendReq] }

// appendReq is one message to append (scriptAppend).
type appendReq struct {
	keys    []string // seq, ack, inbox, routes, idempotency record
	opt     [3]int64 // ttlMs, limit, keepMs
	now     int64    // Unix ms
	keyMs   int64    // lifetime of the idempotency record (0: no key)
	payload []byte
	reply   []any // {seq, routes} or {0, error message}
	err     error
	done    chan struct{}
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
		done:    make(chan struct{}),
	}
	if a.Key != "" {
		q.keys[4], q.keyMs = r.k.userIdem(u, a.Key), KeyLifetime.Milliseconds()
	}
	return q
}

// keysArgs are scriptAppend's keys and arguments for appending qs in one
// call (they share their options).
func appendKeysArgs(qs []*appendReq) ([]string, []any) {
	keys := make([]string, 0, 5*len(qs))
	args := make([]any, 0, 4+2*len(qs))
	args = append(args, qs[0].now, qs[0].opt[0], qs[0].opt[1], qs[0].opt[2])
	for _, q := range qs {
		keys = append(keys, q.keys...)
		args = append(args, q.keyMs, q.payload)
	}
	return keys, args
}

func (b *scriptBatcher) run(ctx context.Context, r *Redis, q *appendReq) ([]any, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	b.add(q, r.appendBatch)
	select {
	case <-q.done:
		return q.reply, q.err
	case <-ctx.Done():
		// The append may still run; the caller answers 503 and a retry
		// with the same idempotency key is safe.
		return nil, fmt.Errorf("%w: redis append inbox: %w", ErrUnavailable, ctx.Err())
	}
}

// appendBatch sends the batch as one pipeline: one scriptAppend call for
// every run of messages with the same options (the whole batch, in
// practice), or one call per message on Redis Cluster, where a script's
// keys must share a slot. Appends are not idempotent: the batch is retried
// only when Redis surely did not run it.
func (r *Redis) appendBatch(batch []*appendReq) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opt.OpTimeout)
	defer cancel()
	_, perMessage := r.c.(*redis.ClusterClient)
	type call struct {
		reqs []*appendReq
		cmd  *redis.Cmd
	}
	var calls []*call
	for _, q := range batch {
		if n := len(calls); n > 0 && !perMessage && calls[n-1].reqs[0].opt == q.opt {
			calls[n-1].reqs = append(calls[n-1].reqs, q)
			continue
		}
		calls = append(calls, &call{reqs: []*appendReq{q}})
	}
	err := r.do(ctx, "append inbox", false, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range calls {
				keys, args := appendKeysArgs(c.reqs)
				c.cmd = scriptAppend.EvalSha(ctx, p, keys, args...)
			}
			return nil
		})
		var re redis.Error
		if err != nil && errors.As(err, &re) {
			return nil // replies with errors are read one by one below
		}
		return err
	})
	for _, c := range calls {
		cerr := err
		if cerr == nil && isNoScript(c.cmd.Err()) {
			// EVALSHA did not run: EVAL loads the script and runs it.
			keys, args := appendKeysArgs(c.reqs)
			c.cmd = scriptAppend.Run(ctx, r.c, keys, args...)
		}
		var parts []any
		if cerr == nil {
			if cerr = c.cmd.Err(); cerr != nil {
				cerr = r.wrap("append inbox", cerr)
			} else if parts, _ = c.cmd.Val().([]any); len(parts) != 2*len(c.reqs) {
				cerr = fmt.Errorf("cluster: redis append: unexpected reply of %d parts for %d messages", len(parts), len(c.reqs))
			}
		}
		for j, q := range c.reqs {
			if cerr != nil {
				q.err = cerr
			} else {
				q.reply = parts[2*j : 2*j+2 : 2*j+2]
			}
			close(q.done)
		}
	}
}

// publishBatcher pipelines concurrent bus sends (Send and Broadcast) in
// call order: one publisher's messages keep their order.
type publishBatcher struct{ batcher[*publishReq] }

type publishReq struct {
	channels []string
	payload  []byte   // for every channel, or:
	payloads [][]byte // one per channel
	err      error
	done     chan struct{}
}

func (b *publishBatcher) send(ctx context.Context, r *Redis, channels []string, payload []byte) error {
	return b.sendReq(ctx, r, &publishReq{channels: channels, payload: payload, done: make(chan struct{})})
}

func (b *publishBatcher) sendReq(ctx context.Context, r *Redis, q *publishReq) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	b.add(q, r.publishBatch)
	select {
	case <-q.done:
		return q.err
	case <-ctx.Done():
		return fmt.Errorf("%w: redis send: %w", ErrUnavailable, ctx.Err())
	}
}

// publishBatch sends the bus messages of a batch as one pipeline.
func (r *Redis) publishBatch(batch []*publishReq) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opt.OpTimeout)
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
		q.err = err
		close(q.done)
	}
}

// bound gives a call without a deadline the backend's OpTimeout, so that a
// caller waiting for a batch is never held longer than a direct call.
func (r *Redis) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, r.opt.OpTimeout)
}

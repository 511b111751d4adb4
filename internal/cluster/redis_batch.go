package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

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

// scriptBatcher pipelines concurrent runs of scriptAppend.
type scriptBatcher struct{ batcher[*scriptReq] }

type scriptReq struct {
	ctx   context.Context
	keys  []string
	args  []any
	reply any
	err   error
	done  chan struct{}
}

func (b *scriptBatcher) run(ctx context.Context, r *Redis, keys []string, args []any) (any, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	q := &scriptReq{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
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

// appendBatch sends the batch as one pipeline. Appends are not
// idempotent: the batch is retried only when Redis surely did not run it.
func (r *Redis) appendBatch(batch []*scriptReq) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opt.OpTimeout)
	defer cancel()
	cmds := make([]*redis.Cmd, len(batch))
	err := r.do(ctx, "append inbox", false, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, q := range batch {
				cmds[i] = scriptAppend.EvalSha(ctx, p, q.keys, q.args...)
			}
			return nil
		})
		var re redis.Error
		if err != nil && errors.As(err, &re) {
			return nil // replies with errors are read one by one below
		}
		return err
	})
	for i, q := range batch {
		switch {
		case err != nil:
			q.err = err
		case isNoScript(cmds[i].Err()):
			// EVALSHA did not run: EVAL loads the script and runs it.
			q.reply, q.err = scriptAppend.Run(ctx, r.c, q.keys, q.args...).Result()
			if q.err != nil {
				q.err = r.wrap("append inbox", q.err)
			}
		case cmds[i].Err() != nil:
			q.err = r.wrap("append inbox", cmds[i].Err())
		default:
			q.reply = cmds[i].Val()
		}
		close(q.done)
	}
}

// publishBatcher pipelines concurrent bus sends (Send and Broadcast) in
// call order: one publisher's messages keep their order.
type publishBatcher struct{ batcher[*publishReq] }

type publishReq struct {
	channels []string
	payload  []byte
	err      error
	done     chan struct{}
}

func (b *publishBatcher) send(ctx context.Context, r *Redis, channels []string, payload []byte) error {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	q := &publishReq{channels: channels, payload: payload, done: make(chan struct{})}
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
		for _, ch := range q.channels {
			channels = append(channels, ch)
			payloads = append(payloads, q.payload)
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

package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// scriptBatcher pipelines concurrent runs of one script (scriptAppend):
// a call made while a batch is in flight waits for the next one, so many
// publishers share round trips; a lone call is sent at once.
type scriptBatcher struct {
	mu      sync.Mutex
	pending []*scriptReq
	running bool
}

type scriptReq struct {
	ctx   context.Context
	keys  []string
	args  []any
	reply any
	err   error
	done  chan struct{}
}

const scriptBatchMax = 256

func (b *scriptBatcher) run(ctx context.Context, r *Redis, keys []string, args []any) (any, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	q := &scriptReq{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, q)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.loop(r)
	}
	select {
	case <-q.done:
		return q.reply, q.err
	case <-ctx.Done():
		// The append may still run; the caller answers 503 and a retry
		// with the same idempotency key is safe.
		return nil, fmt.Errorf("%w: redis append inbox: %w", ErrUnavailable, ctx.Err())
	}
}

func (b *scriptBatcher) loop(r *Redis) {
	for {
		b.mu.Lock()
		n := min(len(b.pending), scriptBatchMax)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		batch := append([]*scriptReq(nil), b.pending[:n]...)
		b.pending = append(b.pending[:0], b.pending[n:]...)
		b.mu.Unlock()
		r.appendBatch(batch)
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
// call order: under load many publishers share one round trip, and one
// publisher's messages keep their order (batches run one after another).
type publishBatcher struct {
	mu      sync.Mutex
	pending []*publishReq
	running bool
}

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
	b.mu.Lock()
	b.pending = append(b.pending, q)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.loop(r)
	}
	select {
	case <-q.done:
		return q.err
	case <-ctx.Done():
		return fmt.Errorf("%w: redis send: %w", ErrUnavailable, ctx.Err())
	}
}

func (b *publishBatcher) loop(r *Redis) {
	for {
		b.mu.Lock()
		n := min(len(b.pending), scriptBatchMax)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		batch := append([]*publishReq(nil), b.pending[:n]...)
		b.pending = append(b.pending[:0], b.pending[n:]...)
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), r.opt.OpTimeout)
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
		cancel()
		for _, q := range batch {
			q.err = err
			close(q.done)
		}
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

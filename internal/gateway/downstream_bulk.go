package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/protocol"
)

// recordBulk publishes the reliable user messages of the downstream
// records a node handles at once together: one publishBulk (one pipeline
// of inbox appends, one bus envelope per node) for all those waiting when
// the previous one is done, instead of an append call and a bus message
// each. A source's lanes hand it one record per target at a time and wait
// for its answer, so one target's messages are never in two publishes at
// once, and their order is the lanes'.
type recordBulk struct {
	once sync.Once
	in   chan *recordWait
}

// recordWait is one message waiting for its publish.
type recordWait struct {
	req  api.PublishRequest
	cl   class
	res  any // api.PublishResult or {"error": ...}
	done chan struct{}
}

const (
	// recordFlushers publish at once: while one waits for Redis, the
	// next gathers what came meanwhile.
	recordFlushers = 4
	// maxRecordBulk bounds the messages of one publish.
	maxRecordBulk = 512
)

// publish publishes one validated reliable user message with the others
// waiting, and answers it; a ctx that ends first is answered unavailable
// (the record comes again, and its key makes it one message).
func (b *recordBulk) publish(ctx context.Context, n *Node, r api.PublishRequest, cl class) (api.PublishResult, error) {
	b.start(n)
	w := &recordWait{req: r, cl: cl, done: make(chan struct{})}
	select {
	case b.in <- w:
	case <-ctx.Done():
		return api.PublishResult{}, api.Unavailable("publish", ctx.Err())
	case <-n.ctx.Done():
		return api.PublishResult{}, api.Unavailable("publish", n.ctx.Err())
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		return api.PublishResult{}, api.Unavailable("publish", ctx.Err())
	}
	switch res := w.res.(type) {
	case api.PublishResult:
		return res, nil
	case map[string]protocol.ErrorBody:
		e := res["error"]
		return api.PublishResult{}, &api.Error{Status: http.StatusServiceUnavailable, Code: e.Code, Message: e.Message}
	}
	return api.PublishResult{}, api.Unavailable("publish", errors.New("no answer"))
}

// start starts the flushers, once (with the sources, so that they are
// there before the first record).
func (b *recordBulk) start(n *Node) {
	b.once.Do(func() {
		b.in = make(chan *recordWait, maxRecordBulk)
		for range recordFlushers {
			n.goFunc(func() { b.flushLoop(n) })
		}
	})
}

// flushLoop publishes what waits, until the node stops (the sources stop
// before it: nothing waits then).
func (b *recordBulk) flushLoop(n *Node) {
	batch := make([]*recordWait, 0, maxRecordBulk)
	for {
		select {
		case w := <-b.in:
			batch = append(batch[:0], w)
		case <-n.ctx.Done():
			return
		}
	more:
		for len(batch) < maxRecordBulk {
			select {
			case w := <-b.in:
				batch = append(batch, w)
			default:
				break more
			}
		}
		reqs := make([]api.PublishRequest, len(batch))
		classes := make([]class, len(batch))
		idx := make([]int, len(batch))
		results := make([]any, len(batch))
		for i, w := range batch {
			reqs[i], classes[i], idx[i] = w.req, w.cl, i
		}
		ctx, cancel := context.WithTimeout(n.ctx, recordDeadline)
		n.publishBulk(ctx, reqs, classes, idx, results)
		cancel()
		for i, w := range batch {
			w.res = results[i]
			close(w.done)
		}
	}
}

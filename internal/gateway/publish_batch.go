package gateway

import (
	"context"
	"slices"
	"sync"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/protocol"
)

// batchParallel bounds the targets a batch publishes to at once.
const batchParallel = 64

// PublishBatch publishes every message of a batch whose decoding did not
// fail (errs[i] == nil; errs may be nil): each result is an api.PublishResult
// or {"error":...}, in the batch order. User messages without an
// idempotency key or trace context go together (publishBulk: one
// pipeline of inbox appends, one bus envelope per node). The rest (rooms,
// broadcasts, messages with an idempotency key or a traceparent, and
// every message to a user that has one of those in the batch) go through
// Publish: messages to the same target one after the other, in order;
// different targets in parallel, so that their backend round trips
// overlap (and the Redis backend pipelines them).
func (n *Node) PublishBatch(ctx context.Context, reqs []api.PublishRequest, errs []error) []any {
	results := make([]any, len(reqs))
	groups := map[protocol.Target][]int{}
	var order []protocol.Target
	classes := make([]class, len(reqs))
	bulk := map[protocol.Target]bool{}
	for i := range reqs {
		var err error
		if errs != nil {
			err = errs[i]
		}
		req := &reqs[i]
		if err == nil {
			n.applyNamespace(req)
			classes[i], err = validate(req)
		}
		if err != nil {
			results[i] = map[string]protocol.ErrorBody{"error": api.ErrorBody(err)}
			continue
		}
		ok, seen := bulk[req.Target]
		if !seen {
			order = append(order, req.Target)
			ok = true
		}
		bulk[req.Target] = ok && req.Target.Type == protocol.TargetUser && req.IdempotencyKey == "" && req.Traceparent == "" && req.Except == "" && req.Key == ""
		groups[req.Target] = append(groups[req.Target], i)
	}
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	var together []int
	for _, t := range order {
		idx := groups[t]
		if bulk[t] {
			together = append(together, idx...)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		f := func() {
			defer func() { <-sem; wg.Done() }()
			for _, i := range idx {
				res, err := n.Publish(ctx, reqs[i])
				if err != nil {
					results[i] = map[string]protocol.ErrorBody{"error": api.ErrorBody(err)}
				} else {
					results[i] = res
				}
			}
		}
		if !n.goFunc(f) {
			f() // shutting down: the answers are errors, quickly
		}
	}
	if len(together) > 0 {
		slices.Sort(together) // batch order
		n.publishBulk(ctx, reqs, classes, together, results)
	}
	wg.Wait()
	return results
}

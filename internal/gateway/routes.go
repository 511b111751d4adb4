package gateway

import (
	"context"
	"slices"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// removeRoute queues the route of an ended connection for removal. A
// burst of disconnects (a drain, a network blip) becomes a few pipelined
// calls instead of one round trip per connection.
func (n *Node) removeRoute(r cluster.Route) {
	select {
	case n.removals <- r:
	default:
		// Queue full: remove it from here.
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		start := time.Now()
		err := n.backend.RemoveRoute(ctx, r.User, r.ConnID)
		n.observe("route", start, err)
	}
}

// removeLoop removes queued routes in batches of up to 1,000; at
// shutdown it removes what is still queued.
func (n *Node) removeLoop() {
	batch := make([]cluster.Route, 0, 1000)
	for {
		var first cluster.Route
		select {
		case first = <-n.removals:
		case <-n.ctx.Done():
			for {
				select {
				case r := <-n.removals:
					batch = append(batch, r)
					continue
				default:
				}
				break
			}
			n.removeBatch(batch)
			return
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < cap(batch) {
			select {
			case r := <-n.removals:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		n.removeBatch(batch)
	}
}

func (n *Node) removeBatch(batch []cluster.Route) {
	if len(batch) == 0 {
		return
	}
	// Not n.ctx: removals still run while the node shuts down.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	start := time.Now()
	err := n.backend.RemoveRoutes(ctx, batch)
	n.observe("route", start, err)
	if err != nil {
		// Until they are removed they count (presence, limits): try
		// again while the backend is away, for up to the route TTL
		// (when they expire anyway).
		n.log.Warn("route removal failed; retrying in the background", "routes", len(batch), "err", err)
		again := slices.Clone(batch)
		n.goFunc(func() { n.retryRemoval(again) })
	}
}

// retryRemoval removes routes whose removal failed, with backoff, until it
// succeeds, the route TTL has passed or the node stops.
func (n *Node) retryRemoval(routes []cluster.Route) {
	end := time.Now().Add(n.cfg.RouteTTL)
	delay := 250 * time.Millisecond
	for time.Now().Before(end) {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(delay):
		}
		ctx, cancel := context.WithTimeout(n.ctx, 4*time.Second)
		err := n.backend.RemoveRoutes(ctx, routes)
		cancel()
		if err == nil {
			return
		}
		delay = min(2*delay, 5*time.Second)
	}
}

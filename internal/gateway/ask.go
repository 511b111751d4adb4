package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/cluster"
)

// Requests that must reach another node (closing connections for the
// disconnect API or the single device policy, a drain) are not left to
// Pub/Sub, which may lose a message: the asking node sends the request
// with an id, the asked node acts and answers kindDone with that id (to
// the asking node), and until that answer comes the request is sent
// again every askRetry, as long as it is still needed (the node is alive
// and has not done it by other means). Acting on a request twice does
// nothing more than acting once.

// askRetry is how long a request waits for its answer before it is sent
// again.
const askRetry = 500 * time.Millisecond

// askTable holds the requests waiting for their answer.
type askTable struct {
	mu      sync.Mutex
	waiting map[string]chan struct{} // request id -> closed on the answer
}

func (a *askTable) add(id string) chan struct{} {
	ch := make(chan struct{})
	a.mu.Lock()
	if a.waiting == nil {
		a.waiting = map[string]chan struct{}{}
	}
	a.waiting[id] = ch
	a.mu.Unlock()
	return ch
}

// end ends a request: its answer came (a kindDone), or the asker gave up.
// An answer to a request that has ended (answered twice, or given up) is
// ignored.
func (a *askTable) end(id string) {
	a.mu.Lock()
	ch, ok := a.waiting[id]
	delete(a.waiting, id)
	a.mu.Unlock()
	if ok {
		close(ch)
	}
}

// sendTo sends one envelope to node's channel, within the backend's
// timeout; a failed send is counted and left to the caller's retry.
func (n *Node) sendTo(ctx context.Context, node string, env []byte) {
	sctx, cancel := n.bctx(ctx)
	start := time.Now()
	err := n.backend.Send(sctx, []string{node}, env)
	n.observe("bus", start, err)
	cancel()
}

// ask sends e to node until the node answers (true), the request is no
// longer needed or ctx ends (false).
func (n *Node) ask(ctx context.Context, node string, e envelope, needed func(context.Context) bool) bool {
	e.Req, e.From = n.newID(), n.cfg.NodeID
	done := n.asks.add(e.Req)
	defer n.asks.end(e.Req)
	env := encodeEnvelope(e, nil)
	t := time.NewTimer(askRetry)
	defer t.Stop()
	for {
		n.sendTo(ctx, node, env)
		select {
		case <-done:
			return true
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if !needed(ctx) {
			return false
		}
		select {
		case <-done: // came while checking
			return true
		default:
		}
		n.log.Debug("no answer from a node; asking again", "to", node, "kind", e.Kind, "req", e.Req)
		t.Reset(askRetry)
	}
}

// answer tells the node that sent request e that it is done. An answer
// that is lost makes the asker send the request again, and this node
// answer again.
func (n *Node) answer(e envelope) {
	if e.Req == "" || e.From == "" {
		return // from a node that does not wait for answers
	}
	n.sendAnswer(e.From, encodeEnvelope(envelope{Kind: kindDone, Req: e.Req}, nil))
}

// sendAnswer sends an answer envelope to the node that asked, in the
// background (a lost answer is asked for again).
func (n *Node) sendAnswer(to string, env []byte) {
	n.goFunc(func() {
		ctx, cancel := n.bctx(n.ctx)
		defer cancel()
		start := time.Now()
		err := n.backend.Send(ctx, []string{to}, env)
		n.observe("bus", start, err)
	})
}

// replyTable holds the requests forwarded to another node that wait for
// an answer carrying a result (a post, a page of connections), by
// request id.
type replyTable[T any] struct {
	mu      sync.Mutex
	waiting map[string]chan T
}

func (p *replyTable[T]) add(req string) chan T {
	ch := make(chan T, 1)
	p.mu.Lock()
	if p.waiting == nil {
		p.waiting = map[string]chan T{}
	}
	p.waiting[req] = ch
	p.mu.Unlock()
	return ch
}

func (p *replyTable[T]) remove(req string) {
	p.mu.Lock()
	delete(p.waiting, req)
	p.mu.Unlock()
}

// deliver hands the answer to the waiting request (none: an answer that
// came twice, or too late).
func (p *replyTable[T]) deliver(req string, res T) {
	p.mu.Lock()
	ch := p.waiting[req]
	delete(p.waiting, req)
	p.mu.Unlock()
	if ch != nil {
		ch <- res
	}
}

// awaitReply sends env, a request whose answer comes on ch, to node every
// askRetry until the answer comes (got), node is dead (dead), or ctx or
// wait ends (neither).
func awaitReply[T any](ctx context.Context, n *Node, node string, env []byte, ch chan T, wait time.Duration) (res T, got, dead bool) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	retry := time.NewTicker(askRetry)
	defer retry.Stop()
	for {
		n.sendTo(ctx, node, env)
		select {
		case res = <-ch:
			return res, true, false
		case <-ctx.Done():
			return res, false, false
		case <-deadline.C:
			return res, false, false
		case <-retry.C:
		}
		lctx, cancel := n.bctx(ctx)
		_, live := n.nodeLive(lctx, node)
		cancel()
		if !live {
			return res, false, true
		}
		select {
		case res = <-ch:
			return res, true, false
		default:
		}
	}
}

// nodeLive reports whether node has a fresh heartbeat, and its record.
// When the backend cannot tell, the node counts as live (the asker keeps
// trying).
func (n *Node) nodeLive(ctx context.Context, node string) (cluster.NodeInfo, bool) {
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		return cluster.NodeInfo{ID: node}, true
	}
	for _, x := range nodes {
		if x.ID == node {
			return x, !allocator.Stale(x, time.Now(), n.staleAfter())
		}
	}
	return cluster.NodeInfo{}, false
}

// closeConns closes the user's connections ids (by node) with code, on
// whichever node they are, and returns how many were confirmed closed
// (or gone already) before wait ends. Connections of nodes that did not
// confirm by then are still asked for, in the background, until they
// are gone or their node is dead.
func (n *Node) closeConns(wait context.Context, user string, byNode map[string][]string, code int, reason string) int {
	confirmed := 0
	results := make(chan int, len(byNode))
	asked := 0
	for node, ids := range byNode {
		if node == n.cfg.NodeID {
			n.closeLocal(user, ids, code, reason)
			confirmed += len(ids)
			continue
		}
		asked++
		e := envelope{Kind: kindKick, User: user, Conns: ids, Code: code, Reason: reason}
		started := n.goFunc(func() {
			if n.ask(n.ctx, node, e, n.routesLeft(node, user, ids)) {
				results <- len(ids)
			} else {
				results <- 0
			}
		})
		if !started {
			results <- 0
		}
	}
	for ; asked > 0; asked-- {
		select {
		case k := <-results:
			confirmed += k
		case <-wait.Done():
			return confirmed
		}
	}
	return confirmed
}

// closeLocal closes this node's connections of user named by ids
// (those not here any more are gone already).
func (n *Node) closeLocal(user string, ids []string, code int, reason string) {
	for _, c := range n.hub.userConns(user) {
		if slices.Contains(ids, c.connID()) {
			c.close(code, reason)
		}
	}
}

// routesLeft is the need of a close request: its node is alive and one of
// the connections still has its route.
func (n *Node) routesLeft(node, user string, ids []string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		ctx, cancel := n.bctx(ctx)
		defer cancel()
		if _, live := n.nodeLive(ctx, node); !live {
			return false
		}
		routes, err := n.backend.UserRoutes(ctx, user)
		if err != nil {
			return true
		}
		return slices.ContainsFunc(routes, func(r cluster.Route) bool { return r.Node == node && slices.Contains(ids, r.ConnID) })
	}
}

// drainNeeded is the need of a drain request: the node is alive and does
// not say draining yet.
func (n *Node) drainNeeded(node string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		ctx, cancel := n.bctx(ctx)
		defer cancel()
		rec, live := n.nodeLive(ctx, node)
		return live && rec.Status != cluster.StatusDraining
	}
}

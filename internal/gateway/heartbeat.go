package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/fleet"
)

// heartbeatLoop keeps the node's record fresh, notices a backend that lost
// its data (and re-registers everything), refreshes routes and room
// interest in batches, and removes the records of nodes that died.
func (n *Node) heartbeatLoop() {
	t := time.NewTicker(n.cfg.HeartbeatInterval)
	defer t.Stop()
	refreshEvery := n.cfg.RouteTTL / 3
	lastRefresh := time.Now()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.HeartbeatInterval+2*time.Second)
		start := time.Now()
		n.recordMu.Lock()
		if n.retired {
			n.recordMu.Unlock()
			cancel()
			return
		}
		lost, err := n.backend.Heartbeat(ctx, n.info())
		n.recordMu.Unlock()
		n.observe("heartbeat", start, err)
		wasHealthy := n.healthy.Swap(err == nil)
		if err != nil {
			if wasHealthy {
				n.log.Warn("cluster backend unreachable; serving local connections, new ones refused until it is back", "err", err)
			}
			cancel()
			continue
		}
		if !wasHealthy {
			n.log.Info("cluster backend reachable again")
		}
		if lost || !wasHealthy || time.Since(lastRefresh) >= refreshEvery {
			if lost {
				n.log.Warn("cluster backend lost this node's state; registering routes and rooms again")
			}
			tick := time.Now()
			if err := n.reRegister(ctx); err == nil {
				lastRefresh = tick
			}
			if lost || !wasHealthy {
				// Bus messages may have been lost while the backend was
				// away: every connection catches up from its inbox (after
				// lowering a seq the backend may have forgotten).
				n.goFunc(func() { n.recoverConnections(lost) })
			}
		}
		n.checkOwnPresence(ctx, lost)
		n.retryPresence()
		n.cleanupDeadNodes(ctx)
		cancel()
	}
}

// reRegister writes every local route and room interest again, in batches.
func (n *Node) reRegister(ctx context.Context) error {
	conns := n.hub.all()
	routes := make([]cluster.Route, 0, len(conns))
	written := make([]*conn, 0, len(conns))
	for _, c := range conns {
		c.mu.Lock()
		live := c.state <= stOpen
		c.mu.Unlock()
		if live {
			routes = append(routes, c.route())
			written = append(written, c)
		}
	}
	start := time.Now()
	var err error
	for i := 0; i < len(routes) && err == nil; i += 1000 {
		err = n.backend.AddRoutes(ctx, routes[i:min(i+1000, len(routes))], n.cfg.RouteTTL)
	}
	n.observe("route", start, err)
	// A connection that ended meanwhile may have had its route removed
	// before the write above stored it again: remove it once more, after.
	for i, c := range written {
		c.mu.Lock()
		ended := c.state == stClosed
		c.mu.Unlock()
		if ended {
			n.removeRoute(routes[i])
		}
	}
	if err != nil {
		n.log.Warn("route refresh failed", "err", err)
		return err
	}
	return n.declareInterestCtx(ctx, n.hub.localRooms())
}

// recoverConnections runs once the backend is back after an outage.
// Reliable messages published meanwhile are in the inboxes, but their bus
// envelopes may be lost: each connection reads its inbox after its last
// seq. After a data loss a user's seq counter may have restarted, so a
// connection that remembers a higher seq is first lowered to it (it would
// take the new messages for duplicates). At most 32 users at a time.
func (n *Node) recoverConnections(lost bool) {
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for _, c := range n.hub.all() {
		if n.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		started := n.goFunc(func() {
			defer func() { <-sem; wg.Done() }()
			if lost {
				ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
				last, err := n.backend.LastSeq(ctx, c.user)
				cancel()
				if err != nil {
					return
				}
				c.mu.Lock()
				c.sess.LowerInbox(last)
				c.mu.Unlock()
			}
			c.resync(nil)
			c.resyncRooms()
		})
		if !started { // shutting down
			<-sem
			wg.Done()
			break
		}
	}
	wg.Wait()
}

// staleAfter and goneAfter are this node's fleet.StaleAfter and
// fleet.GoneAfter.
func (n *Node) staleAfter() time.Duration { return fleet.StaleAfter(n.cfg.HeartbeatInterval) }

func (n *Node) goneAfter() time.Duration {
	return fleet.GoneAfter(n.cfg.HeartbeatInterval, n.cfg.RouteTTL)
}

// cleanupDeadNodes removes the records of nodes silent for longer than the
// route TTL (their routes have expired by then).
func (n *Node) cleanupDeadNodes(ctx context.Context) {
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		return
	}
	n.stats.add(time.Now(), nodes, n.cfg.NodeID, n.staleAfter())
	limit := n.goneAfter().Milliseconds()
	now := time.Now().UnixMilli()
	stale := map[string]bool{}
	newlyStale := false
	for _, x := range nodes {
		if x.ID != n.cfg.NodeID && now-x.Heartbeat > n.staleAfter().Milliseconds() {
			stale[x.ID] = true
			newlyStale = newlyStale || !n.staleNodes[x.ID]
		}
	}
	n.staleNodes = stale
	if newlyStale {
		// A node that died between a reliable message's append and its
		// bus send leaves the message in the inbox only: the local
		// connections of its users catch up now, not at the next message.
		n.catchUpBehind()
	}
	if n.events != nil {
		n.events.sweepDead(ctx, nodes)
	}
	n.sweepDeadPresence(ctx, nodes)
	for _, x := range nodes {
		if x.ID != n.cfg.NodeID && now-x.Heartbeat > limit {
			n.log.Info("removing the record of a dead node", "dead_node", x.ID, "silent_ms", now-x.Heartbeat)
			_ = n.backend.RemoveNode(ctx, x.ID)
		}
	}
}

// warmupLoop raises the node's weight in steps (10, 30, 50, 70, 100 %)
// over WSGATE_WARMUP, then makes it active.
func (n *Node) warmupLoop() {
	steps := []int32{10, 30, 50, 70, 100}
	each := n.cfg.Warmup / time.Duration(len(steps)-1)
	for _, w := range steps[1:] {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(each):
		}
		n.weight.Store(w)
	}
	if n.Status() == cluster.StatusWarming {
		n.setStatus(cluster.StatusActive)
		n.log.Info("warm-up done; node active")
	}
}

func (n *Node) notReadyReason() string {
	switch {
	case n.draining.Load():
		return "draining"
	case !n.healthy.Load():
		return "cluster backend unreachable"
	case n.Status() == cluster.StatusWarming:
		return "warming up"
	}
	return "not ready"
}

package gateway

import (
	"context"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/fleet"
	"github.com/wsgate/wsgate/protocol"
)

// Drain moves every connection off this node (contract §7): readiness
// off and new handshakes refused, `draining` in the cluster, then each
// connection gets a redirect to another active node and close 4001, at
// most WSGATE_DRAIN_RATE per second; at WSGATE_DRAIN_TIMEOUT the rest are
// closed with 1001. The node record is removed at the end and Drained()
// is closed. Calling it again does nothing.
func (n *Node) Drain(trigger string) {
	n.drainOnce.Do(func() { n.drain(trigger) })
}

func (n *Node) drain(trigger string) {
	log := n.log.With("trigger", trigger)
	n.draining.Store(true)
	n.setStatus(cluster.StatusDraining)
	total := n.hub.count()
	log.Info("draining", "connections", total, "rate", n.cfg.DrainRate, "timeout", n.cfg.DrainTimeout)
	ctx, cancel := context.WithTimeout(n.ctx, 4*time.Second)
	if err := n.backend.RegisterNode(ctx, n.info()); err != nil {
		log.Warn("could not mark the node draining in the cluster", "err", err)
	}
	cancel()

	redirected, done := fleet.Drain[*conn](n.ctx, drainee{n}, fleet.DrainOptions{
		Rate: n.cfg.DrainRate, Timeout: n.cfg.DrainTimeout, Log: log,
		Remaining: func(left int) { n.metrics.DrainRemaining.Set(float64(left)) },
	})
	if !done {
		return
	}
	ctx, cancel = context.WithTimeout(context.Background(), 4*time.Second)
	n.retire(ctx)
	cancel()
	log.Info("drain finished", "redirected", redirected)
	close(n.drained)
}

// drainee is the node as fleet.Drain moves its connections.
type drainee struct{ n *Node }

func (d drainee) Open() []*conn                                { return d.n.openConns() }
func (d drainee) Held() int                                    { return d.n.hub.count() }
func (d drainee) Targets() []cluster.NodeInfo                  { return d.n.drainTargets() }
func (d drainee) Redirect(c *conn, targets []cluster.NodeInfo) { d.n.redirect(c, targets) }

func (d drainee) CloseRest(conns []*conn) {
	for _, c := range conns {
		c.close(protocol.CloseGoingAway, "node shutting down")
	}
	d.n.waitEmpty(3 * time.Second)
}

// openConns lists connections not yet closing.
func (n *Node) openConns() []*conn {
	var out []*conn
	for _, c := range n.hub.all() {
		c.mu.Lock()
		if c.state <= stOpen {
			out = append(out, c)
		}
		c.mu.Unlock()
	}
	return out
}

func (n *Node) waitEmpty(d time.Duration) {
	end := time.Now().Add(d)
	for n.hub.count() > 0 && time.Now().Before(end) {
		time.Sleep(20 * time.Millisecond)
	}
}

// drainTargets lists the other nodes able to take connections.
func (n *Node) drainTargets() []cluster.NodeInfo {
	ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
	defer cancel()
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		return nil
	}
	var out []cluster.NodeInfo
	for _, x := range nodes {
		if x.ID != n.cfg.NodeID {
			out = append(out, x)
		}
	}
	return out
}

// redirect sends c to the allocator's choice among targets (close 4001),
// or closes it with 1001 when there is none.
func (n *Node) redirect(c *conn, targets []cluster.NodeInfo) {
	choice, ok := n.alloc.Choose(targets, time.Now(), n.staleAfter(), nil)
	if !ok {
		c.close(protocol.CloseGoingAway, "node shutting down")
		return
	}
	b, _ := protocol.Encode(c.format, protocol.Redirect{Type: protocol.TypeRedirect, URL: choice.URL, Reason: "draining", RetryAfterMS: 0})
	c.send(c.dataFrame(b))
	c.close(protocol.CloseDraining, "draining")
}

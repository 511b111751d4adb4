package gateway

import (
	"runtime/debug"
	"time"

	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/protocol"
)

// sweepLoop is the node's one timer: once a second it walks every
// connection and sends due pings, closes connections silent for longer
// than the pong timeout, whose token expired (warning 30 s before), whose catch-up did not finish in catchUpMax, whose socket has not taken
// a write for 10 s, or whose close handshake did not finish. One pass over
// 15,000 connections costs well under a millisecond, and no connection
// owns a timer.
func (n *Node) sweepLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	pongTimeout := int64(n.cfg.PongTimeout / time.Second)
	interval := int64(n.cfg.PingInterval / time.Second)
	if interval < 1 {
		interval = 1
	}
	var released, prev uint64
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now().Unix()
		if a := n.acceptor.Load(); a != nil {
			a.expire(now)
		}
		n.expirePartial(now)
		n.expirePosts(now)
		for _, c := range n.hub.all() {
			n.sweepOne(c, now, interval, pongTimeout)
		}
		if every := n.catchUpEvery.Load(); every > 0 && now%every == 0 {
			n.catchUpBehind()
		}
		// After a burst of connects (a deploy, a reconnect storm) the heap
		// holds the handshakes' garbage and Go returns it to the kernel
		// only slowly: once the burst is over, give it back at once, so
		// that RSS follows the connections actually held.
		cur := n.accepted.Load()
		if cur-released >= 1000 && cur == prev {
			released = cur
			debug.FreeOSMemory()
		}
		prev = cur
	}
}

func (n *Node) sweepOne(c *conn, now, interval, pongTimeout int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stClosed:
		return
	case stClosing:
		if now-c.closingSince >= 2 {
			c.teardownLocked("close handshake timed out")
		}
		return
	case stResuming:
		return
	}
	if c.pendingSince != 0 && now-c.pendingSince >= 10 {
		c.n.metrics.Dropped.WithLabelValues(metrics.DropSlowClose).Inc()
		c.teardownLocked("socket took no data for 10s")
		return
	}
	if c.sess.CatchUpAge(now) >= catchUpMax {
		// The client did not take the missing messages in time (or the
		// inbox did not answer): resume brings them.
		c.n.metrics.Dropped.WithLabelValues(metrics.DropSlowClose).Inc()
		c.closeLocked(protocol.CloseSlowConsumer)
		return
	}
	if now-c.lastRead > pongTimeout && !isHTTPStream(c.tp) {
		// (An HTTP stream's client sends nothing on it: its socket has
		// TCP_USER_TIMEOUT instead, see serveHTTPStream.)
		c.closeWithReasonLocked(protocol.CloseGoingAway, "no pong within the pong timeout")
		return
	}
	if c.exp != 0 && now >= c.exp {
		c.closeLocked(protocol.CloseTokenExpired)
		return
	}
	c.warnExpiringLocked(now)
	if c.tr != nil {
		c.tr.Idle()
	}
	if now >= c.nextPing {
		c.nextPing = now + interval
		if len(c.outq) < c.n.cfg.SendQueue {
			c.outq = append(c.outq, c.pingFrameLocked())
			c.kickLocked()
		}
	}
}

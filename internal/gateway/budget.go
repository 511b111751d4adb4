package gateway

import (
	"github.com/wsgate/wsgate/protocol"
)

// The partial-frame budget (WSGATE_PARTIAL_FRAME_BUDGET) bounds the bytes
// a node holds for client frames and fragmented messages that have begun
// but not ended, over all its connections. Each connection alone is
// bounded by WSGATE_MAX_MESSAGE_BYTES and by the 10 s to finish a frame;
// the budget bounds a fleet of tricklers that each stay under both.
//
// When a read takes the total over the budget, the connections holding
// the most partial bytes are closed with 1008 until the total is back
// under it: a trickler fleet grows the largest partials, so they go
// first, while a bystander whose frame arrived in one read holds nothing
// and is never chosen. A closed connection's reader keeps no partial data
// from then on, and the connection is gone within 2 s (the close
// handshake's limit).

// accountPartial brings the connection's share of the budget up to date
// after a read (reader only), and enforces the budget when it grew.
func (c *conn) accountPartial() {
	c.mu.Lock()
	if c.state == stClosed || c.shed {
		c.rbuf, c.frag = nil, nil
	}
	held := int64(cap(c.rbuf))
	if c.frag != nil {
		held += int64(cap(c.frag.data))
	}
	c.mu.Unlock()
	old := c.held.Swap(held)
	total := c.n.partialBytes.Add(held - old)
	c.n.metrics.PartialBytes.Set(float64(total))
	if budget := int64(c.n.cfg.PartialFrameBudget); budget > 0 && held > old && total > budget {
		c.n.shedPartial(budget)
	}
}

// shedPartial closes the connections holding the most partial bytes with
// 1008 until the node's total is within budget.
func (n *Node) shedPartial(budget int64) {
	n.shedMu.Lock()
	defer n.shedMu.Unlock()
	for n.partialBytes.Load() > budget {
		var victim *conn
		var most int64
		n.partial.Range(func(k, _ any) bool {
			if c := k.(*conn); c.held.Load() > most {
				victim, most = c, c.held.Load()
			}
			return true
		})
		if victim == nil {
			return
		}
		victim.mu.Lock()
		victim.shed = true
		victim.closeWithReasonLocked(protocol.ClosePolicy, "partial-frame budget of the node exceeded")
		victim.mu.Unlock()
		// Its bytes leave the count now: its reader drops them at its next
		// read, its teardown at the latest.
		n.partialBytes.Add(-victim.held.Swap(0))
	}
}

package gateway

import (
	"sync/atomic"
	"time"

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

// partialState is kept, in Node.partial, for each connection that holds
// an unfinished frame or message, and only then.
type partialState struct {
	since int64        // Unix s the unfinished frame or message began
	held  atomic.Int64 // bytes of its rbuf and frag counted in the budget
}

// accountPartial brings the connection's entry and share of the budget up
// to date after a read (reader only; was: it held partial data before),
// and enforces the budget when its share grew. Only connections that
// hold or held partial data touch the node's map. A closing connection
// keeps no partial data: it waits for a close frame only, and the budget
// may have chosen it.
func (c *conn) accountPartial(was bool) {
	c.mu.Lock()
	if c.state >= stClosing {
		c.rbuf, c.frag = nil, nil
	}
	c.mu.Unlock()
	is := c.holdsPartial()
	if !is && !was {
		return
	}
	var ps *partialState
	if v, ok := c.n.partial.Load(c); ok {
		ps = v.(*partialState)
	} else if is {
		ps = &partialState{since: time.Now().Unix()}
		c.n.partial.Store(c, ps)
	} else {
		return
	}
	var held int64
	if is {
		held = int64(cap(c.rbuf))
		if c.frag != nil {
			held += int64(cap(c.frag.data))
		}
		if c.tr != nil {
			held += int64(cap(c.tr.RPart))
		}
	}
	old := ps.held.Swap(held)
	total := c.n.partialBytes.Add(held - old)
	c.n.metrics.PartialBytes.Set(float64(total))
	if !is {
		c.n.partial.Delete(c)
		return
	}
	if budget := int64(c.n.cfg.PartialFrameBudget); budget > 0 && held > old && total > budget {
		c.n.shedPartial(budget)
	}
}

// releasePartial takes an ended connection's share out of the budget.
func (n *Node) releasePartial(c *conn) {
	if v, ok := n.partial.Load(c); ok {
		n.partialBytes.Add(-v.(*partialState).held.Swap(0))
	}
}

// shedPartial closes the connections holding the most partial bytes with
// 1008 until the node's total is within budget.
func (n *Node) shedPartial(budget int64) {
	n.shedMu.Lock()
	defer n.shedMu.Unlock()
	for n.partialBytes.Load() > budget {
		var victim *conn
		var vs *partialState
		var most int64
		n.partial.Range(func(k, v any) bool {
			if ps := v.(*partialState); ps.held.Load() > most {
				victim, vs, most = k.(*conn), ps, ps.held.Load()
			}
			return true
		})
		if victim == nil {
			return
		}
		victim.close(protocol.ClosePolicy, "partial-frame budget of the node exceeded")
		// Its bytes leave the count now: its reader drops them at its next
		// read (it is closing), its teardown at the latest.
		n.partialBytes.Add(-vs.held.Swap(0))
	}
}

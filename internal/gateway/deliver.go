package gateway

import (
	"encoding/json"
	"runtime"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// delivery is one message on its way to this node's connections. Its
// frames are encoded once per format and shared by every recipient.
type delivery struct {
	msgJSON []byte // the message object in JSON
	class   class
	seq     int64
	pubAt   int64 // Unix ns of the publish, for the latency histogram

	textOnce sync.Once
	text     []byte
	binOnce  sync.Once
	bin      []byte
}

func newDelivery(msgJSON []byte, cl class, seq, pubAt int64) *delivery {
	return &delivery{msgJSON: msgJSON, class: cl, seq: seq, pubAt: pubAt}
}

// frame returns the WebSocket frame for format f, or nil if the message
// cannot be expressed in it.
func (d *delivery) frame(f protocol.Format) []byte {
	if f == protocol.JSON {
		d.textOnce.Do(func() { d.text = wsframe.Frame(wsframe.OpText, d.msgJSON) })
		return d.text
	}
	d.binOnce.Do(func() {
		var m protocol.Message
		if err := json.Unmarshal(d.msgJSON, &m); err != nil {
			return
		}
		b, err := protocol.EncodeMessage(protocol.MsgPack, &m)
		if err != nil {
			return
		}
		d.bin = wsframe.Frame(wsframe.OpBinary, b)
	})
	return d.bin
}

// deliverAll hands d to each connection.
func (n *Node) deliverAll(conns []*conn, d *delivery) {
	if len(conns) < fanOutBatch {
		for _, c := range conns {
			c.deliver(d)
		}
	} else {
		n.fanOut(conns, d)
	}
}

// A fan-out to at least fanOutBatch connections queues the message on all
// of them first and writes them a moment later (coalesceDelay) from one
// goroutine per core, instead of handing each connection to the writer
// pool. A message that arrives meanwhile (the next broadcast) joins the
// same writev: under sustained broadcast a socket write carries several
// frames, which is what brings the cost per delivered message below one
// system call.
const (
	fanOutBatch   = 256
	coalesceDelay = 2 * time.Millisecond
)

type flushBatch struct{ conns []*conn }

func (n *Node) fanOut(conns []*conn, d *delivery) {
	b := &flushBatch{}
	for _, c := range conns {
		c.mu.Lock()
		c.fb = b
		wait := c.deliverLocked(d)
		c.fb = nil
		c.mu.Unlock()
		if wait {
			go c.waitNotify(d)
		}
	}
	if len(b.conns) == 0 {
		return
	}
	time.AfterFunc(coalesceDelay, func() {
		parts := max(1, min(runtime.GOMAXPROCS(0), len(b.conns)/fanOutBatch))
		per := (len(b.conns) + parts - 1) / parts
		for i := 0; i < len(b.conns); i += per {
			chunk := b.conns[i:min(i+per, len(b.conns))]
			go func() {
				for _, c := range chunk {
					c.flush()
				}
			}()
		}
	})
}

// deliver queues d on c, keeping reliable messages in seq order without
// duplicates or holes (see deliverLocked).
func (c *conn) deliver(d *delivery) {
	c.mu.Lock()
	wait := c.deliverLocked(d)
	c.mu.Unlock()
	if wait {
		go c.waitNotify(d)
	}
}

// deliverLocked queues d and returns true when a (non-reliable) notify
// message must wait for room.
//
// Reliable messages follow the connection's position, lastSeq: the
// highest seq actually queued for the socket, which nothing else moves. A
// seq at or below it is a duplicate (replay and live overlap, two routes)
// and is dropped; lastSeq+1 is queued if the queue has room. Anything else
// (a seq beyond lastSeq+1: a message still on its way or lost by the bus;
// a full queue, whatever the class) puts the connection into catch-up
// mode, which holds the later live messages and fills the sequence in
// order (catchUp). Only a chat message that finds the queue full closes
// the connection instead (4008: resume brings the rest), as the class
// says (contract 4.5).
func (c *conn) deliverLocked(d *delivery) bool {
	switch c.state {
	case stResuming:
		x := c.extra()
		x.held = append(x.held, d)
		return false
	case stClosing, stClosed:
		return false
	}
	if d.seq == 0 {
		return c.queueLiveLocked(d)
	}
	if c.x != nil && c.x.catchUp {
		c.holdLocked(d)
		return false
	}
	if d.seq <= c.lastSeq {
		return false
	}
	if d.seq > c.lastSeq+1 {
		c.startCatchUpLocked(d, true)
		return false
	}
	if c.roomLocked() {
		c.queueReliableLocked(d)
		c.kickLocked()
		return false
	}
	c.n.metrics.SendQueueFull.Inc()
	switch d.class {
	case classRealtime:
		c.n.metrics.Dropped.WithLabelValues(metrics.DropQueueFull).Inc()
	case classNotify:
		c.n.metrics.Dropped.WithLabelValues(metrics.DropNotifyWait).Inc()
	default:
		c.n.metrics.Dropped.WithLabelValues(metrics.DropSlowClose).Inc()
		c.closeLocked(protocol.CloseSlowConsumer)
		return false
	}
	// The live delivery is skipped, not the message: catch-up queues it
	// once there is room, before anything later.
	c.startCatchUpLocked(d, false)
	return false
}

// queueLiveLocked queues non-reliable d under the class rules; it returns
// true when a notify message must wait for room.
func (c *conn) queueLiveLocked(d *delivery) bool {
	fr := d.frame(c.format)
	if fr == nil {
		c.n.metrics.Dropped.WithLabelValues(metrics.DropEncode).Inc()
		return false
	}
	ok, wait := c.enqueueLocked(fr, d.class)
	if ok {
		c.markLocked(fr, d.pubAt)
	}
	return wait
}

// roomLocked reports whether the send queue takes one more message. A
// full queue whose socket is not full is written first: the writer has
// just not run yet, which does not make the client slow.
func (c *conn) roomLocked() bool {
	if len(c.outq) >= c.n.cfg.SendQueue && !c.waitOut && c.state == stOpen {
		c.writeOutLocked()
	}
	return len(c.outq) < c.n.cfg.SendQueue
}

// queueReliableLocked queues reliable d, next in sequence, and moves the
// connection's position to it. A message that cannot be expressed in the
// connection's format is skipped (counted).
func (c *conn) queueReliableLocked(d *delivery) {
	c.lastSeq = d.seq
	fr := d.frame(c.format)
	if fr == nil {
		c.n.metrics.Dropped.WithLabelValues(metrics.DropEncode).Inc()
		return
	}
	c.outq = append(c.outq, fr)
	c.markLocked(fr, d.pubAt)
	c.n.metrics.Delivered.Inc()
}

// waitNotify retries a notify message for up to 100 ms (contract §4.5).
// The full queue was counted once, when the message first met it.
func (c *conn) waitNotify(d *delivery) {
	fr := d.frame(c.format)
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		c.mu.Lock()
		ok := c.state == stOpen && c.roomLocked()
		if ok {
			c.outq = append(c.outq, fr)
			c.markLocked(fr, d.pubAt)
			c.n.metrics.Delivered.Inc()
			c.kickLocked()
		}
		closed := c.state >= stClosing
		c.mu.Unlock()
		if ok || closed {
			return
		}
	}
	c.n.metrics.Dropped.WithLabelValues(metrics.DropNotifyWait).Inc()
}

// Catch-up bounds. A connection stays in catch-up mode at most
// catchUpMax (checked by the sweep) and holds at most heldMax live
// messages meanwhile; beyond either it is closed with 4008, and resume
// brings the rest from the inbox.
const catchUpMax = 5 // seconds

func (c *conn) heldMax() int { return c.n.cfg.SendQueue + c.n.cfg.InboxLimit }

// holdLocked keeps a live reliable message for the running catch-up.
func (c *conn) holdLocked(d *delivery) {
	x := c.x
	if len(x.held) >= c.heldMax() {
		c.n.metrics.Dropped.WithLabelValues(metrics.DropSlowClose).Inc()
		c.closeLocked(protocol.CloseSlowConsumer)
		return
	}
	x.held = append(x.held, d)
}

// startCatchUpLocked enters catch-up mode with d held; hole is true when
// messages before d are missing and must be read from the inbox.
func (c *conn) startCatchUpLocked(d *delivery, hole bool) {
	x := c.extra()
	if d != nil {
		x.held = append(x.held, d)
	}
	x.needRead = x.needRead || hole
	if x.catchUp {
		return
	}
	x.catchUp = true
	x.since = time.Now().Unix()
	go c.catchUp()
}

// catchUp fills the connection's reliable sequence: it reads the inbox
// from the connection's position when something is missing (retrying
// while the backend fails), queues the missing messages in order as the
// queue has room (waiting for the client to drain rather than piling
// replays onto the queue), sends a gap frame for what the inbox trimmed,
// then releases the live messages held meanwhile, reading again if a hole
// is still there. It ends when the sequence is whole and nothing is held,
// or when the connection closes (the sweep closes it with 4008 after
// catchUpMax).
func (c *conn) catchUp() {
	delay := 50 * time.Millisecond
	for {
		c.mu.Lock()
		if c.state >= stClosing || c.x == nil || !c.x.catchUp {
			c.mu.Unlock()
			return
		}
		switch c.advanceLocked() {
		case stepDone:
			c.x.catchUp, c.x.since = false, 0
			c.x.held, c.x.pending = nil, nil
			c.mu.Unlock()
			return
		case stepRoom:
			ch := c.x.room
			if ch == nil {
				ch = make(chan struct{})
				c.x.room = ch
			}
			c.mu.Unlock()
			select {
			case <-ch:
			case <-c.n.ctx.Done():
				return
			}
			continue
		}
		// stepRead
		since := c.lastSeq
		c.mu.Unlock()
		ctx, cancel := c.n.bctx(c.n.ctx)
		rd, err := c.n.backend.ReadInbox(ctx, c.user, since, c.n.inboxOpts())
		cancel()
		if err != nil {
			c.logger().Info("inbox catch-up failed; retrying", "err", err, "in", delay)
			select {
			case <-time.After(delay):
			case <-c.n.ctx.Done():
				return
			}
			delay = min(2*delay, time.Second)
			continue
		}
		delay = 50 * time.Millisecond
		c.mu.Lock()
		if c.state < stClosing && c.x != nil && c.x.catchUp && c.lastSeq == since {
			c.applyReadLocked(rd)
		}
		c.mu.Unlock()
	}
}

// applyReadLocked takes an inbox read made from lastSeq: a gap frame for
// what was trimmed, a jump over what another connection of the user
// acknowledged (gone from the inbox), and the messages still to queue.
func (c *conn) applyReadLocked(rd cluster.InboxRead) {
	x := c.x
	if rd.GapFrom > 0 && rd.GapTo >= rd.GapFrom && rd.GapTo > c.lastSeq {
		from := max(rd.GapFrom, c.lastSeq+1)
		gap, _ := protocol.Encode(c.format, protocol.Gap{Type: protocol.TypeGap, From: from, To: rd.GapTo, Missed: rd.GapTo - from + 1})
		c.outq = append(c.outq, c.dataFrame(gap))
		c.lastSeq = rd.GapTo
	}
	if len(rd.Messages) == 0 || rd.Messages[0].Seq > c.lastSeq+1 {
		c.lastSeq = max(c.lastSeq, rd.Acked)
	}
	x.pending = rd.Messages
	x.readTo = max(x.readTo, rd.LastSeq)
	x.needRead = false
	c.kickLocked()
}

type catchUpStep uint8

const (
	stepDone catchUpStep = iota // the sequence is whole and nothing is held
	stepRoom                    // the queue is full: wait for the client
	stepRead                    // a message is missing: read the inbox
)

// advanceLocked queues, in seq order, what catch-up has: the messages read
// from the inbox, then the live messages held, as far as the queue has
// room and the sequence has no hole.
func (c *conn) advanceLocked() catchUpStep {
	x := c.x
	defer c.kickLocked()
	for len(x.pending) > 0 {
		m := x.pending[0]
		if m.Seq <= c.lastSeq {
			x.pending = x.pending[1:]
			continue
		}
		if !c.roomLocked() {
			return stepRoom
		}
		x.pending = x.pending[1:]
		c.queueInboxLocked(m)
	}
	x.pending = nil
	for len(x.held) > 0 {
		d := x.held[0]
		if d.seq == 0 {
			// Held while resuming: the class rules apply as usual.
			x.held = x.held[1:]
			if c.queueLiveLocked(d) {
				go c.waitNotify(d)
			}
			continue
		}
		if d.seq <= c.lastSeq {
			x.held = x.held[1:]
			continue
		}
		if d.seq > c.lastSeq+1 {
			if d.seq-1 > x.readTo {
				return stepRead
			}
			// Read past already: the missing ones were acknowledged by
			// another connection of the user and left the inbox.
			c.lastSeq = d.seq - 1
		}
		if !c.roomLocked() {
			return stepRoom
		}
		x.held = x.held[1:]
		c.queueReliableLocked(d)
	}
	x.held = nil
	if x.needRead {
		return stepRead
	}
	return stepDone
}

// resync reads the inbox from the connection's position and queues what
// is missing, as a catch-up does, and returns when that catch-up ended (or
// at once when one is running: it reads too).
func (c *conn) resync() {
	c.mu.Lock()
	if c.state != stOpen {
		c.mu.Unlock()
		return
	}
	x := c.extra()
	x.needRead = true
	if x.catchUp {
		c.mu.Unlock()
		return
	}
	x.catchUp, x.since = true, time.Now().Unix()
	c.mu.Unlock()
	c.catchUp()
}

// wakeCatchUpLocked lets a catch-up waiting for room go on: called when
// the queue drained and when the connection closes.
func (c *conn) wakeCatchUpLocked() {
	if c.x != nil && c.x.room != nil {
		close(c.x.room)
		c.x.room = nil
	}
}

// releaseLocked goes on after a resume: the live messages held while it
// ran are queued in order through catch-up, which also fills any hole
// they show.
func (c *conn) releaseLocked(held []*delivery) {
	if len(held) == 0 {
		return
	}
	x := c.extra()
	x.held = append(held, x.held...)
	if x.catchUp {
		return
	}
	if c.advanceLocked() != stepDone {
		c.startCatchUpLocked(nil, false)
		return
	}
	x.held = nil
}

// queueInboxLocked queues one replayed inbox message above lastSeq.
func (c *conn) queueInboxLocked(m cluster.InboxMessage) {
	fr, err := c.n.inboxFrame(c.format, m)
	c.lastSeq = m.Seq
	if err != nil {
		c.logger().Warn("unreadable inbox message skipped", "seq", m.Seq, "err", err)
		return
	}
	c.outq = append(c.outq, fr)
	c.n.metrics.Delivered.Inc()
}

// queueReplayLocked queues the replay of a resume: every message above
// lastSeq. Replays are bounded by the inbox limit, so they may exceed the
// send queue.
func (c *conn) queueReplayLocked(msgs []cluster.InboxMessage) {
	for _, m := range msgs {
		if m.Seq > c.lastSeq {
			c.queueInboxLocked(m)
		}
	}
	c.kickLocked()
}

// inboxFrame rebuilds the frame of a stored reliable message with its seq.
func (n *Node) inboxFrame(f protocol.Format, m cluster.InboxMessage) ([]byte, error) {
	var msg protocol.Message
	if err := json.Unmarshal(m.Payload, &msg); err != nil {
		return nil, err
	}
	msg.Seq = m.Seq
	b, err := protocol.EncodeMessage(f, &msg)
	if err != nil {
		return nil, err
	}
	if f == protocol.MsgPack {
		return wsframe.Frame(wsframe.OpBinary, b), nil
	}
	return wsframe.Frame(wsframe.OpText, b), nil
}

func (n *Node) inboxOpts() cluster.InboxOptions {
	return cluster.InboxOptions{Limit: n.cfg.InboxLimit, TTL: n.cfg.InboxTTL}
}

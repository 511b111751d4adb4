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
	if len(conns) > 0 && d.pubAt > 0 {
		n.metrics.DeliveryLatency.Observe(float64(time.Now().UnixNano()-d.pubAt) / 1e9)
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
// duplicates: a seq at or below the last one queued is dropped; a seq
// beyond the next one means something is missing (another publisher's
// message still on its way, or lost by the bus), and the connection
// catches up from the inbox before going on.
func (c *conn) deliver(d *delivery) {
	c.mu.Lock()
	wait := c.deliverLocked(d)
	c.mu.Unlock()
	if wait {
		go c.waitNotify(d)
	}
}

// deliverLocked returns true when a notify message must wait for room.
func (c *conn) deliverLocked(d *delivery) bool {
	switch c.state {
	case stResuming:
		x := c.extra()
		x.held = append(x.held, d)
		return false
	case stClosing, stClosed:
		return false
	}
	if d.seq > 0 {
		if c.x != nil && c.x.catchUp {
			c.x.held = append(c.x.held, d)
			return false
		}
		if d.seq <= c.lastSeq {
			return false // duplicate (replay and live overlap, or two routes)
		}
		if d.seq > c.lastSeq+1 {
			x := c.extra()
			x.catchUp = true
			x.held = append(x.held, d)
			go c.catchUp()
			return false
		}
		c.lastSeq = d.seq
	}
	fr := d.frame(c.format)
	if fr == nil {
		c.n.metrics.Dropped.WithLabelValues(metrics.DropEncode).Inc()
		return false
	}
	_, wait := c.enqueueLocked(fr, d.class)
	return wait
}

// waitNotify retries a notify message for up to 100 ms (contract §4.5).
func (c *conn) waitNotify(d *delivery) {
	fr := d.frame(c.format)
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		c.mu.Lock()
		ok, wait := c.enqueueLocked(fr, classNotify)
		c.mu.Unlock()
		if ok || !wait {
			return
		}
	}
	c.n.metrics.Dropped.WithLabelValues(metrics.DropNotifyWait).Inc()
}

// catchUp fills a hole in the reliable sequence from the inbox, then
// releases what was held meanwhile.
//
// A failed read is retried (the backend is often just coming back when a
// hole appears: the bus lost the message during the same outage), with
// live messages held meanwhile; only after catchUpRetries, or once the
// held messages fill the send queue, does the connection go on without
// the missing ones.
func (c *conn) catchUp() {
	delay := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		since := c.lastSeq
		c.mu.Unlock()
		ctx, cancel := c.n.bctx(c.n.ctx)
		rd, err := c.n.backend.ReadInbox(ctx, c.user, since, c.n.inboxOpts())
		cancel()
		c.mu.Lock()
		if c.state >= stClosing || c.x == nil {
			c.mu.Unlock()
			return
		}
		if err != nil && attempt < catchUpRetries && len(c.x.held) < c.n.cfg.SendQueue && c.n.ctx.Err() == nil {
			c.mu.Unlock()
			c.logger().Info("inbox catch-up failed; retrying", "err", err, "in", delay)
			select {
			case <-time.After(delay):
			case <-c.n.ctx.Done():
			}
			delay = min(2*delay, 2*time.Second)
			continue
		}
		if err != nil {
			c.logger().Warn("inbox catch-up failed; delivering what arrived", "err", err)
		} else {
			c.queueInboxLocked(rd.Messages)
		}
		held := c.x.held
		c.x.held, c.x.catchUp = nil, false
		c.releaseLocked(held)
		c.mu.Unlock()
		return
	}
}

// catchUpRetries bounds the retries of a failed catch-up (about 13 s).
const catchUpRetries = 10

// releaseLocked queues held deliveries in order after a resume or a
// catch-up. A hole that remains (the message was acknowledged by another
// connection or trimmed) is accepted rather than chased again.
func (c *conn) releaseLocked(held []*delivery) {
	for _, d := range held {
		if d.seq > 0 {
			if d.seq <= c.lastSeq {
				continue
			}
			c.lastSeq = d.seq
		}
		if fr := d.frame(c.format); fr != nil {
			if _, wait := c.enqueueLocked(fr, d.class); wait {
				go c.waitNotify(d)
			}
		}
	}
}

// queueInboxLocked queues replayed inbox messages above lastSeq. Replays
// are bounded by the inbox limit, so they may exceed the send queue.
func (c *conn) queueInboxLocked(msgs []cluster.InboxMessage) {
	for _, m := range msgs {
		if m.Seq <= c.lastSeq {
			continue
		}
		fr, err := c.n.inboxFrame(c.format, m)
		if err != nil {
			c.logger().Warn("unreadable inbox message skipped", "seq", m.Seq, "err", err)
			continue
		}
		c.outq = append(c.outq, fr)
		c.n.metrics.Delivered.Inc()
		c.lastSeq = m.Seq
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

package gateway

import (
	"cmp"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/internal/session"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// delivery is one message on its way to this node's connections. Its
// frames are encoded once per format and shared by every recipient.
type delivery struct {
	msgJSON []byte // the message object in JSON
	class   class
	seq     int64
	room    string // a reliable room message: seq is the room's ("" for the inbox)
	except  string // the connection that does not get it ("": none)
	pubAt   int64  // Unix ns of the publish, for the latency histogram
	ckey    string // conflation identity of a keyed realtime message (conflate.go); "" for none

	textOnce sync.Once
	text     []byte
	binOnce  sync.Once
	bin      []byte
	ztext    zframe // compressed variants, for deflate connections (deflate.go)
	zbin     zframe
	sseOnce  sync.Once // the frames of the HTTP transports (stream.go)
	sse      []byte
	ndOnce   sync.Once
	nd       []byte
	pOnce    sync.Once // the Pusher frame (pusher.go)
	pusher   []byte
}

func newDelivery(msgJSON []byte, cl class, seq, pubAt int64) *delivery {
	return &delivery{msgJSON: msgJSON, class: cl, seq: seq, pubAt: pubAt}
}

// newRoomDelivery is a reliable room message with the room's seq.
func newRoomDelivery(msgJSON []byte, cl class, room string, seq, pubAt int64) *delivery {
	return &delivery{msgJSON: msgJSON, class: cl, seq: seq, room: room, pubAt: pubAt}
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
			c.n.goFunc(func() { c.waitNotify(d) })
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
			flush := func() {
				for _, c := range chunk {
					c.flush()
				}
			}
			if !n.goFunc(flush) {
				flush() // shutting down: the connections are gone or going
			}
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
		c.n.goFunc(func() { c.waitNotify(d) })
	}
}

// excepts reports whether c is the connection the message spares.
// A Pusher connection is also spared by its socket_id (its user), as the
// Pusher HTTP API names it.
func (d *delivery) excepts(c *conn) bool {
	return d.except != "" && (d.except == c.connID() || c.tp == tpPusher && d.except == c.user)
}

// Seq is the message's seq, 0 when it is not reliable (session.Message).
func (d *delivery) Seq() int64 { return d.seq }

// Room is the reliable room whose seq the message has, "" for the inbox
// (session.Message).
func (d *delivery) Room() string { return d.room }

// stream is one reliable sequence of a connection: the user's inbox or a
// reliable room (internal/session).
type stream = session.Stream[*delivery]

// deliverLocked queues d and returns true when a (non-reliable) notify
// message must wait for room.
//
// Reliable messages follow their stream's position in the connection's
// session (internal/session): a duplicate is dropped, the next one is
// queued if the queue has room, anything else puts the stream into
// catch-up (catchUp). A full queue leaves the message's class to decide:
// only a chat message closes the connection (4008: resume brings the
// rest), as the class says (contract 4.5); the live delivery of the
// others is skipped, not the message, which the catch-up queues once
// there is room.
func (c *conn) deliverLocked(d *delivery) bool {
	switch c.state {
	case stResuming:
		c.sess.Hold(d)
		return false
	case stClosing, stClosed:
		return false
	}
	if d.seq == 0 {
		if d.excepts(c) {
			return false
		}
		return c.queueLiveLocked(d)
	}
	switch c.sess.Deliver(c.driver(), d) {
	case session.Queued:
		c.kickLocked()
		return false
	case session.Taken:
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
	c.sess.Defer(c.driver(), d)
	return false
}

// connDriver is the connection as its session's driver
// (session.Driver): its methods run under c.mu.
type connDriver conn

func (c *conn) driver() *connDriver { return (*connDriver)(c) }

func (dr *connDriver) Room() bool { return (*conn)(dr).roomLocked() }

func (dr *connDriver) Member(room string) bool {
	return dr.n.hub.member(dr.user, room) || dr.n.hub.connMember((*conn)(dr), room)
}

func (dr *connDriver) Now() int64 { return time.Now().Unix() }

func (dr *connDriver) HeldMax(s *stream) int { return (*conn)(dr).heldMax(s) }

// QueueLive queues reliable d, next in its stream s (nil: the inbox). A
// message that cannot be expressed in the connection's format is
// skipped (counted).
func (dr *connDriver) QueueLive(s *stream, d *delivery) {
	c := (*conn)(dr)
	if d.excepts(c) {
		return // its place in the stream is taken, without a frame
	}
	fr := d.frameFor(c)
	if c.tp == tpSSE {
		fr = c.reliableFrameLocked(d.msgJSON)
	}
	if fr == nil {
		c.n.metrics.Dropped.WithLabelValues(metrics.DropEncode).Inc()
		return
	}
	c.outq = append(c.outq, fr)
	c.markLocked(fr, d.pubAt)
	c.n.metrics.Delivered.Inc()
}

// QueueStored queues one message read from the inbox or a room's history.
func (dr *connDriver) QueueStored(s *stream, m session.Stored) {
	c := (*conn)(dr)
	b, err := c.n.inboxPayload(c.format, m)
	if err != nil {
		c.logger().Warn("unreadable stored message skipped", "room", s.Room(), "seq", m.Seq, "err", err)
		return
	}
	fr := c.dataFrame(b)
	if c.tp == tpSSE {
		fr = c.reliableFrameLocked(b)
	}
	c.outq = append(c.outq, fr)
	c.n.metrics.Delivered.Inc()
}

func (dr *connDriver) QueueGap(s *stream, from, to int64) {
	c := (*conn)(dr)
	c.outq = append(c.outq, c.gapFrameLocked(s, from, to))
}

// QueuePlain queues a message that is not reliable, held while the
// connection resumed: the class rules apply as usual.
func (dr *connDriver) QueuePlain(d *delivery) {
	c := (*conn)(dr)
	if c.queueLiveLocked(d) {
		c.n.goFunc(func() { c.waitNotify(d) })
	}
}

func (dr *connDriver) CatchUp(s *stream) { go (*conn)(dr).catchUp(s) }

// Overflow closes a connection whose catch-up holds too many messages.
func (dr *connDriver) Overflow() {
	c := (*conn)(dr)
	c.n.metrics.Dropped.WithLabelValues(metrics.DropSlowClose).Inc()
	c.closeLocked(protocol.CloseSlowConsumer)
}

// resyncRooms reads every reliable room the connection follows from its
// position (after the backend came back: bus messages may be lost).
func (c *conn) resyncRooms() {
	c.mu.Lock()
	rooms := c.sess.RoomStreams()
	c.mu.Unlock()
	for _, s := range rooms {
		c.resync(s)
	}
}

// queueLiveLocked queues non-reliable d under the class rules; it returns
// true when a notify message must wait for room.
func (c *conn) queueLiveLocked(d *delivery) bool {
	fr := d.frameFor(c)
	if fr == nil {
		c.n.metrics.Dropped.WithLabelValues(metrics.DropEncode).Inc()
		return false
	}
	ok, wait := c.enqueueLocked(fr, d)
	if ok {
		c.markLocked(fr, d.pubAt)
		if d.ckey != "" {
			c.keyLocked(fr, d.ckey)
		}
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

// waitNotify retries a notify message for up to 100 ms (contract §4.5),
// woken as the catch-ups are: whenever the queue falls below its bound,
// and when the connection closes. The full queue was counted once, when
// the message first met it.
func (c *conn) waitNotify(d *delivery) {
	fr := d.frameFor(c)
	limit := time.NewTimer(c.n.notifyWait)
	defer limit.Stop()
	for {
		c.mu.Lock()
		ok := c.state == stOpen && c.roomLocked()
		if ok {
			c.outq = append(c.outq, fr)
			c.markLocked(fr, d.pubAt)
			c.n.metrics.Delivered.Inc()
			c.kickLocked()
		}
		closed := c.state >= stClosing
		var wake chan struct{}
		if !ok && !closed {
			wake = c.roomWaitLocked()
		}
		c.mu.Unlock()
		if ok || closed {
			return
		}
		select {
		case <-wake:
		case <-c.n.ctx.Done():
			return
		case <-limit.C:
			c.n.metrics.Dropped.WithLabelValues(metrics.DropNotifyWait).Inc()
			return
		}
	}
}

// Catch-up bounds. A stream stays in catch-up mode at most catchUpMax
// (checked by the sweep) and holds at most heldMax live messages
// meanwhile; beyond either the connection is closed with 4008, and resume
// brings the rest from the inbox or the room's history.
const catchUpMax = 5 // seconds

func (c *conn) heldMax(s *stream) int {
	if s.Room() != "" {
		return c.n.cfg.SendQueue + c.n.cfg.RoomHistoryLimit
	}
	return c.n.cfg.SendQueue + c.n.cfg.InboxLimit
}

// catchUp runs the catch-up of stream s (session.Advance): it reads the
// inbox or the room's history from the stream's position when something
// is missing (retrying while the backend fails), waits for the client to
// drain the queue rather than piling replays onto it, and ends when the
// sequence is whole and nothing is held, or when the connection closes
// (the sweep closes it with 4008 after catchUpMax).
func (c *conn) catchUp(s *stream) {
	delay := 50 * time.Millisecond
	for {
		c.mu.Lock()
		if c.state >= stClosing || !c.sess.CatchingUp(s) {
			c.mu.Unlock()
			return
		}
		step := c.sess.Advance(c.driver(), s)
		c.kickLocked()
		switch step {
		case session.Done:
			c.mu.Unlock()
			return
		case session.Wait:
			ch := c.roomWaitLocked()
			c.mu.Unlock()
			select {
			case <-ch:
			case <-c.n.ctx.Done():
				return
			}
			continue
		}
		// session.ReadFrom
		since := c.sess.Pos(s)
		c.mu.Unlock()
		rd, err := c.n.readStream(c.user, s.Room(), since)
		if err != nil {
			if errors.Is(err, cluster.ErrNotReplicated) {
				// The wait is the replicas', not the client's: the sweep
				// does not close the connection for it (contract 22),
				// while heldMax still bounds what is held meanwhile.
				c.mu.Lock()
				c.sess.Touch(s, time.Now().Unix())
				c.mu.Unlock()
			}
			c.logger().Info("catch-up read failed; retrying", "room", s.Room(), "err", err, "in", delay)
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
		if c.state < stClosing && c.sess.Apply(c.driver(), s, since, sessionRead(rd)) {
			c.kickLocked()
		}
		c.mu.Unlock()
	}
}

// readStream reads a stream after since: the user's inbox, or a room's
// history.
func (n *Node) readStream(user, room string, since int64) (cluster.InboxRead, error) {
	ctx, cancel := n.bctx(n.ctx)
	defer cancel()
	if room == "" {
		return n.backend.ReadInbox(ctx, user, since, n.inboxOpts())
	}
	return n.backend.ReadRoom(ctx, room, since, 0, n.historyOpts(room))
}

// sessionRead is rd as the session takes it.
func sessionRead(rd cluster.InboxRead) session.Read {
	r := session.Read{GapFrom: rd.GapFrom, GapTo: rd.GapTo, LastSeq: rd.LastSeq, Acked: rd.Acked}
	if len(rd.Messages) > 0 {
		r.Messages = make([]session.Stored, len(rd.Messages))
		for i, m := range rd.Messages {
			r.Messages[i] = session.Stored{Seq: m.Seq, Payload: m.Payload}
		}
	}
	return r
}

// gapFrameLocked is the gap frame of stream s (nil: the inbox) for
// from..to.
func (c *conn) gapFrameLocked(s *stream, from, to int64) []byte {
	g := protocol.Gap{Type: protocol.TypeGap, From: from, To: to, Missed: to - from + 1}
	if s.Room() != "" {
		g.Target = &protocol.Target{Type: protocol.TargetRoom, ID: s.Room()}
	}
	b, _ := protocol.Encode(c.format, g)
	return c.dataFrame(b)
}

// resync reads stream s (nil: the inbox) from the connection's position
// and queues what is missing, as a catch-up does, and returns when that
// catch-up ended (or at once when one is running: it reads too).
func (c *conn) resync(s *stream) {
	c.mu.Lock()
	if c.state != stOpen {
		c.mu.Unlock()
		return
	}
	if s == nil {
		s = c.sess.Inbox()
	}
	run := c.sess.Resync(c.driver(), s)
	c.mu.Unlock()
	if run {
		c.catchUp(s)
	}
}

// roomWaitLocked is the channel closed when the queue next falls below its
// bound or the connection closes (wakeCatchUpLocked).
func (c *conn) roomWaitLocked() chan struct{} {
	x := c.extra()
	if x.room == nil {
		x.room = make(chan struct{})
	}
	return x.room
}

// wakeCatchUpLocked lets the catch-ups waiting for room go on: called
// when the queue drained and when the connection closes.
func (c *conn) wakeCatchUpLocked() {
	if c.x != nil && c.x.room != nil {
		close(c.x.room)
		c.x.room = nil
	}
}

// replayLocked queues the replay of a resume of stream s (nil: the inbox)
// read after since, or starts its catch-up when the replicas did not
// confirm the read (WSGATE_RELIABLE_REPLICAS): the connection is open,
// non-reliable messages flow, and the replay comes once the replicas
// confirm it (contract 22).
func (c *conn) replayLocked(s *stream, since int64, rd cluster.InboxRead, unconfirmed bool) {
	c.sess.Replay(c.driver(), s, since, sessionRead(rd), unconfirmed)
	if !unconfirmed {
		c.kickLocked()
	}
}

// inboxPayload rebuilds a stored reliable message with its seq, encoded
// in format f.
func (n *Node) inboxPayload(f protocol.Format, m session.Stored) ([]byte, error) {
	var msg protocol.Message
	if err := json.Unmarshal(m.Payload, &msg); err != nil {
		return nil, err
	}
	msg.Seq = m.Seq
	return protocol.EncodeMessage(f, &msg)
}

func (n *Node) inboxOpts() cluster.InboxOptions {
	return cluster.InboxOptions{Limit: n.cfg.InboxLimit, TTL: n.cfg.InboxTTL}
}

// historyOpts bound a reliable room's history: its namespace's bounds,
// else the node's.
func (n *Node) historyOpts(room string) cluster.InboxOptions {
	ns := n.ns(room)
	return cluster.InboxOptions{Limit: cmp.Or(ns.HistoryLimit, n.cfg.RoomHistoryLimit), TTL: cmp.Or(ns.HistoryTTL, n.cfg.RoomHistoryTTL)}
}

package gateway

import (
	"encoding/json"
	"errors"
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
	room    string // a reliable room message: seq is the room's ("" for the inbox)
	pubAt   int64  // Unix ns of the publish, for the latency histogram

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
// Reliable messages follow their stream's position (the user's inbox, or
// the reliable room the message belongs to): the highest seq of that
// stream actually queued for the socket, which nothing else moves. A seq
// at or below it is a duplicate (replay and live overlap, two routes) and
// is dropped; position+1 is queued if the queue has room. Anything else
// (a seq beyond position+1: a message still on its way or lost by the
// bus; a full queue, whatever the class) puts the stream into catch-up
// mode, which holds the stream's later live messages and fills its
// sequence in order (catchUp). Only a chat message that finds the queue
// full closes the connection instead (4008: resume brings the rest), as
// the class says (contract 4.5).
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
	var s *stream // nil: the inbox of a connection never caught up
	if d.room != "" {
		// A reliable room the connection does not follow yet was plain
		// (seq 0) when it followed the room (at connect, join, or a
		// membership from another node, which all start a stream for a
		// reliable room): every seq of it is owed, from 1, also when
		// the first ones reach the node after a later one. Unless the
		// user left the room since this delivery found the member.
		if s = c.followedLocked(d.room); s == nil {
			return false
		}
	} else if c.x != nil {
		s = &c.x.inbox
	}
	if s != nil && s.catchUp {
		c.holdLocked(s, d)
		return false
	}
	pos := c.posLocked(s)
	if d.seq <= *pos {
		return false
	}
	if d.seq > *pos+1 {
		c.startCatchUpLocked(c.orInbox(s), d, true)
		return false
	}
	if c.roomLocked() {
		c.queueReliableLocked(s, d)
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
	c.startCatchUpLocked(c.orInbox(s), d, false)
	return false
}

// posLocked is the position of stream s (nil: the inbox).
func (c *conn) posLocked(s *stream) *int64 {
	if s == nil || s.room == "" {
		return &c.lastSeq
	}
	return &s.last
}

// orInbox is s, or the inbox stream when s is nil.
func (c *conn) orInbox(s *stream) *stream {
	if s == nil {
		return &c.extra().inbox
	}
	return s
}

// roomStreamLocked returns the connection's stream of a reliable room,
// starting it at base when the connection did not follow the room yet.
func (c *conn) roomStreamLocked(room string, base int64) *stream {
	x := c.extra()
	s := x.rooms[room]
	if s == nil {
		if x.rooms == nil {
			x.rooms = map[string]*stream{}
		}
		s = &stream{room: room, last: max(base, 0)}
		x.rooms[room] = s
	}
	return s
}

// followedLocked is the connection's stream of a reliable room its user
// is a member of, started at 0 when it has none yet (see deliverLocked);
// nil when the user is no member (left the room).
func (c *conn) followedLocked(room string) *stream {
	if c.x != nil && c.x.rooms[room] != nil {
		return c.x.rooms[room]
	}
	if !c.n.hub.member(c.user, room) {
		return nil
	}
	return c.roomStreamLocked(room, 0)
}

// detachedLocked reports whether s is a room stream the connection no
// longer follows (the user left the room): nothing of it is queued.
func (c *conn) detachedLocked(s *stream) bool {
	return s.room != "" && (c.x == nil || c.x.rooms[s.room] != s)
}

// name is the stream's room ("" for the inbox; s may be nil).
func (s *stream) name() string {
	if s == nil {
		return ""
	}
	return s.room
}

// resyncRooms reads every reliable room the connection follows from its
// position (after the backend came back: bus messages may be lost).
func (c *conn) resyncRooms() {
	c.mu.Lock()
	var rooms []*stream
	if c.x != nil {
		for _, s := range c.x.rooms {
			rooms = append(rooms, s)
		}
	}
	c.mu.Unlock()
	for _, s := range rooms {
		c.resync(s)
	}
}

// forgetRoomLocked stops following a room the user left, also a stream
// still catching up (its catch-up ends without queueing anything more):
// once the leave is answered no frame of the room follows, and a later
// join starts from its own position (its since, or the room's seq), not
// from this one.
func (c *conn) forgetRoomLocked(room string) {
	if c.x == nil {
		return
	}
	if s := c.x.rooms[room]; s != nil {
		s.catchUp, s.needRead, s.since = false, false, 0
		s.held, s.pending = nil, nil
		delete(c.x.rooms, room)
	}
}

// streamsLocked calls fn for each stream of the connection.
func (c *conn) streamsLocked(fn func(s *stream)) {
	if c.x == nil {
		return
	}
	fn(&c.x.inbox)
	for _, s := range c.x.rooms {
		fn(s)
	}
}

// dropHeldLocked forgets every held and pending message (the connection
// closes: resume brings them).
func (c *conn) dropHeldLocked() {
	if c.x == nil {
		return
	}
	c.x.held = nil
	c.streamsLocked(func(s *stream) { s.held, s.pending = nil, nil })
}

// catchUpAgeLocked is how long (seconds) the oldest running catch-up of
// the connection has lasted, 0 when none runs.
func (c *conn) catchUpAgeLocked(now int64) int64 {
	var age int64
	c.streamsLocked(func(s *stream) {
		if s.catchUp {
			age = max(age, now-s.since)
		}
	})
	return age
}

// queueLiveLocked queues non-reliable d under the class rules; it returns
// true when a notify message must wait for room.
func (c *conn) queueLiveLocked(d *delivery) bool {
	fr := d.frameFor(c)
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

// queueReliableLocked queues reliable d, next in its stream s (nil: the
// inbox), and moves the stream's position to it. A message that cannot be
// expressed in the connection's format is skipped (counted).
func (c *conn) queueReliableLocked(s *stream, d *delivery) {
	*c.posLocked(s) = d.seq
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

// waitNotify retries a notify message for up to 100 ms (contract §4.5).
// The full queue was counted once, when the message first met it.
func (c *conn) waitNotify(d *delivery) {
	fr := d.frameFor(c)
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

// Catch-up bounds. A stream stays in catch-up mode at most catchUpMax
// (checked by the sweep) and holds at most heldMax live messages
// meanwhile; beyond either the connection is closed with 4008, and resume
// brings the rest from the inbox or the room's history.
const catchUpMax = 5 // seconds

func (c *conn) heldMax(s *stream) int {
	if s.room != "" {
		return c.n.cfg.SendQueue + c.n.cfg.RoomHistoryLimit
	}
	return c.n.cfg.SendQueue + c.n.cfg.InboxLimit
}

// holdLocked keeps a live reliable message for the running catch-up of s.
func (c *conn) holdLocked(s *stream, d *delivery) {
	if len(s.held) >= c.heldMax(s) {
		c.n.metrics.Dropped.WithLabelValues(metrics.DropSlowClose).Inc()
		c.closeLocked(protocol.CloseSlowConsumer)
		return
	}
	s.held = append(s.held, d)
}

// startCatchUpLocked enters catch-up mode on s with d held; hole is true
// when messages before d are missing and must be read.
func (c *conn) startCatchUpLocked(s *stream, d *delivery, hole bool) {
	if d != nil {
		s.held = append(s.held, d)
	}
	s.needRead = s.needRead || hole
	if s.catchUp {
		return
	}
	s.catchUp = true
	s.since = time.Now().Unix()
	go c.catchUp(s)
}

// catchUp fills stream s: it reads the inbox or the room's history from
// the stream's position when something is missing (retrying while the
// backend fails), queues the missing messages in order as the queue has
// room (waiting for the client to drain rather than piling replays onto
// the queue), sends a gap frame for what was trimmed, then releases the
// live messages held meanwhile, reading again if a hole is still there.
// It ends when the sequence is whole and nothing is held, or when the
// connection closes (the sweep closes it with 4008 after catchUpMax).
func (c *conn) catchUp(s *stream) {
	delay := 50 * time.Millisecond
	for {
		c.mu.Lock()
		if c.state >= stClosing || !s.catchUp || c.detachedLocked(s) {
			c.mu.Unlock()
			return
		}
		switch c.advanceLocked(s) {
		case stepDone:
			s.catchUp, s.since = false, 0
			s.held, s.pending = nil, nil
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
		since := *c.posLocked(s)
		c.mu.Unlock()
		rd, err := c.n.readStream(c.user, s.room, since)
		if err != nil {
			if errors.Is(err, cluster.ErrNotReplicated) {
				// The wait is the replicas', not the client's: the sweep
				// does not close the connection for it (contract 22),
				// while heldMax still bounds what is held meanwhile.
				c.mu.Lock()
				if s.catchUp {
					s.since = time.Now().Unix()
				}
				c.mu.Unlock()
			}
			c.logger().Info("catch-up read failed; retrying", "room", s.room, "err", err, "in", delay)
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
		if c.state < stClosing && s.catchUp && !c.detachedLocked(s) && *c.posLocked(s) == since {
			c.applyReadLocked(s, rd)
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
	return n.backend.ReadRoom(ctx, room, since, 0, n.historyOpts())
}

// gapFrameLocked is the gap frame of stream s for from..to.
func (c *conn) gapFrameLocked(s *stream, from, to int64) []byte {
	g := protocol.Gap{Type: protocol.TypeGap, From: from, To: to, Missed: to - from + 1}
	if s.name() != "" {
		g.Target = &protocol.Target{Type: protocol.TargetRoom, ID: s.room}
	}
	b, _ := protocol.Encode(c.format, g)
	return c.dataFrame(b)
}

// applyReadLocked takes a read made from the position of s: a gap frame
// for what was trimmed, a jump over what another connection of the user
// acknowledged (gone from the inbox), and the messages still to queue.
func (c *conn) applyReadLocked(s *stream, rd cluster.InboxRead) {
	pos := c.posLocked(s)
	if s.room != "" && rd.LastSeq < *pos {
		// Above the room's seq (a join since beyond it, or the history
		// was lost): the room's seq is the base now (contract 12).
		*pos = rd.LastSeq
	}
	if rd.GapFrom > 0 && rd.GapTo >= rd.GapFrom && rd.GapTo > *pos {
		from := max(rd.GapFrom, *pos+1)
		c.outq = append(c.outq, c.gapFrameLocked(s, from, rd.GapTo))
		*pos = rd.GapTo
	}
	if len(rd.Messages) == 0 || rd.Messages[0].Seq > *pos+1 {
		*pos = max(*pos, rd.Acked)
	}
	s.pending = rd.Messages
	s.readTo = max(s.readTo, rd.LastSeq)
	s.needRead = false
	c.kickLocked()
}

type catchUpStep uint8

const (
	stepDone catchUpStep = iota // the sequence is whole and nothing is held
	stepRoom                    // the queue is full: wait for the client
	stepRead                    // a message is missing: read the inbox or history
)

// advanceLocked queues, in seq order, what the catch-up of s has: the
// messages read, then the live messages held, as far as the queue has room
// and the sequence has no hole.
func (c *conn) advanceLocked(s *stream) catchUpStep {
	defer c.kickLocked()
	pos := c.posLocked(s)
	for len(s.pending) > 0 {
		m := s.pending[0]
		if m.Seq <= *pos {
			s.pending = s.pending[1:]
			continue
		}
		if !c.roomLocked() {
			return stepRoom
		}
		s.pending = s.pending[1:]
		c.queueStoredLocked(s, m)
	}
	s.pending = nil
	for len(s.held) > 0 {
		d := s.held[0]
		if d.seq <= *pos {
			s.held = s.held[1:]
			continue
		}
		if d.seq > *pos+1 {
			if d.seq-1 > s.readTo {
				return stepRead
			}
			// Read past already: the missing ones were acknowledged by
			// another connection of the user and left the inbox.
			*pos = d.seq - 1
		}
		if !c.roomLocked() {
			return stepRoom
		}
		s.held = s.held[1:]
		c.queueReliableLocked(s, d)
	}
	s.held = nil
	if s.needRead {
		return stepRead
	}
	return stepDone
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
	s = c.orInbox(s)
	if c.detachedLocked(s) {
		c.mu.Unlock()
		return
	}
	s.needRead = true
	if s.catchUp {
		c.mu.Unlock()
		return
	}
	s.catchUp, s.since = true, time.Now().Unix()
	c.mu.Unlock()
	c.catchUp(s)
}

// wakeCatchUpLocked lets the catch-ups waiting for room go on: called
// when the queue drained and when the connection closes.
func (c *conn) wakeCatchUpLocked() {
	if c.x != nil && c.x.room != nil {
		close(c.x.room)
		c.x.room = nil
	}
}

// releaseLocked goes on after a resume: the live messages held while it
// ran are queued in order, each reliable one through its stream's
// catch-up, which also fills any hole they show.
func (c *conn) releaseLocked(held []*delivery) {
	var touched []*stream
	for _, d := range held {
		if d.seq == 0 {
			// The class rules apply as usual.
			if c.queueLiveLocked(d) {
				go c.waitNotify(d)
			}
			continue
		}
		s := &c.extra().inbox
		if d.room != "" {
			// Plain at the resume's read, as in deliverLocked.
			if s = c.followedLocked(d.room); s == nil {
				continue
			}
		}
		if len(s.held) == 0 && !s.catchUp {
			touched = append(touched, s)
		}
		s.held = append(s.held, d)
	}
	for _, s := range touched {
		if c.advanceLocked(s) != stepDone {
			c.startCatchUpLocked(s, nil, false)
			continue
		}
		s.held = nil
	}
}

// queueStoredLocked queues one message read from the inbox or a room's
// history, above the position of s.
func (c *conn) queueStoredLocked(s *stream, m cluster.InboxMessage) {
	b, err := c.n.inboxPayload(c.format, m)
	*c.posLocked(s) = m.Seq
	if err != nil {
		c.logger().Warn("unreadable stored message skipped", "room", s.name(), "seq", m.Seq, "err", err)
		return
	}
	fr := c.dataFrame(b)
	if c.tp == tpSSE {
		fr = c.reliableFrameLocked(b)
	}
	c.outq = append(c.outq, fr)
	c.n.metrics.Delivered.Inc()
}

// queueReplayLocked queues the replay of a resume of stream s: a gap
// frame for what is gone after since, then every message above the
// position. Replays are bounded by the inbox or history limit, so they
// may exceed the send queue.
func (c *conn) queueReplayLocked(s *stream, since int64, rd cluster.InboxRead) {
	if rd.GapFrom > 0 && rd.GapTo >= rd.GapFrom && rd.GapTo > since {
		c.outq = append(c.outq, c.gapFrameLocked(s, max(rd.GapFrom, since+1), rd.GapTo))
		pos := c.posLocked(s)
		*pos = max(*pos, rd.GapTo)
	}
	for _, m := range rd.Messages {
		if m.Seq > *c.posLocked(s) {
			c.queueStoredLocked(s, m)
		}
	}
	c.kickLocked()
}

// queueReplayOrCatchUpLocked queues the replay of a resume of stream s
// (nil: the inbox), or, when the replicas did not confirm what the resume
// read (WSGATE_RELIABLE_REPLICAS), starts the stream's catch-up from its
// position: the connection is open, non-reliable messages flow, and the
// replay comes once the replicas confirm it (contract 22).
func (c *conn) queueReplayOrCatchUpLocked(s *stream, since int64, rd cluster.InboxRead, unconfirmed bool) {
	if unconfirmed {
		c.startCatchUpLocked(c.orInbox(s), nil, true)
		return
	}
	c.queueReplayLocked(s, since, rd)
}

// inboxPayload rebuilds a stored reliable message with its seq, encoded
// in format f.
func (n *Node) inboxPayload(f protocol.Format, m cluster.InboxMessage) ([]byte, error) {
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

// historyOpts bound a reliable room's history.
func (n *Node) historyOpts() cluster.InboxOptions {
	return cluster.InboxOptions{Limit: n.cfg.RoomHistoryLimit, TTL: n.cfg.RoomHistoryTTL}
}

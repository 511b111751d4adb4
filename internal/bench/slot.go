package bench

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

// slot is one simulated client: a user, its connection of the moment and
// what it received. One goroutine per slot dials and reconnects; the
// connection's reader (the event loop, or that goroutine: see loop.go) is
// the only one to touch the reader state (set, dups, unacked, redirect)
// while the connection lives, and hands it over with the connection's end.
//
// Memory per slot: this struct, the wsConn (no buffer between frames: the
// event loop has one for all, a client.Conn borrows one from a pool), the
// goroutine's stack and the seqSet window (a few words).
type slot struct {
	r      *runner
	n      int
	user   string
	stream *stream // the messages this slot must get; nil = none
	bcast  *stream // soak: the broadcasts, counted apart (bset)

	tick *tickReader // ticker: a slow reader (ticker.go); nil: every message counts

	conn atomic.Pointer[wsConn]

	// Reader state (the connection's reader only).
	set      seqSet
	bset     seqSet // soak: broadcasts received
	dups     uint64
	unacked  int
	lastAck  time.Time
	redirect string

	lastSeq atomic.Int64 // highest reliable seq received (resume point)
	acked   atomic.Int64 // highest seq acknowledged

	connected atomic.Bool // connected at least once
	cycle     atomic.Bool // churn: reopen at once after this close
	victim    atomic.Bool // storm: dropped, not reconnected yet
}

// ackEvery and ackDelay: a cumulative ack after so many reliable messages
// or so long after the previous one, like the client's defaults.
const (
	ackEvery = 32
	ackDelay = time.Second
)

// healthyAfter is how long a connection must live (or receive a message)
// to reset the backoff, as in the client.
const healthyAfter = 10 * time.Second

// run is the slot's goroutine: first connection, then reconnections (with
// the client's backoff after a drop, at once after a churn cycle) until
// the run stops.
func (s *slot) run() {
	r := s.r
	defer r.wg.Done()
	initial := true
	attempt, quick := 0, 0
	var wait time.Duration
	for {
		if !sleepCtx(r.dialCtx, wait) || r.stopping.Load() {
			if initial {
				r.initialFinished(false)
			}
			return
		}
		c, err := s.dial(r.dialCtx)
		if err != nil {
			if initial && r.cfg.RetryInitial && retryable(err) {
				wait = backoffDelay(attempt) // the failure is counted; try again
				attempt++
				continue
			}
			if initial {
				r.initialFinished(false)
				return
			}
			var he *client.HandshakeError
			if errors.As(err, &he) && !he.Retryable() {
				r.gaveUp.Add(1)
				return // 400, 401, 403: retrying cannot help
			}
			wait = backoffDelay(attempt)
			attempt++
			continue
		}
		s.conn.Store(c)
		r.open.Add(1)
		storeMax(&r.peakOpen, r.open.Load())
		switch {
		case initial:
			initial = false
			s.connected.Store(true)
			r.initialFinished(true)
		case s.cycle.Swap(false):
			r.churnReopened()
		default:
			r.reconnected(s)
		}
		if r.stopping.Load() {
			s.sayGoodbye(c)
		}

		res := s.serve(c)
		code, healthy := res.code, res.healthy

		s.conn.Store(nil)
		c.Close()
		r.open.Add(-1)
		r.countClose(code)
		if r.stopping.Load() {
			return
		}
		if s.cycle.Load() {
			wait = 0 // churn: reopen at once
			continue
		}
		r.drops.Add(1)
		if healthy {
			attempt, quick = 0, 0
		}
		switch protocol.CloseAction(code) {
		case protocol.ActionStop:
			r.gaveUp.Add(1)
			return
		case protocol.ActionNow, protocol.ActionRefreshToken:
			if quick < 3 {
				quick++
				wait = quickDelay()
				break
			}
			fallthrough
		default:
			wait = backoffDelay(attempt)
			attempt++
		}
	}
}

// read is the goroutine reader (wss:// connections, --reader goroutine):
// it reads the frames of one connection with client.Conn.ReadRaw (no copy,
// no allocation) until it ends, and returns the close code (1006 when the
// connection broke without one) and whether the connection was healthy
// (lived 10 s or got a message).
func (s *slot) read(c *wsConn) (code int, healthy bool) {
	start := time.Now()
	got := false
	for {
		format, p, err := c.cc.ReadRaw()
		if err != nil {
			healthy = got || time.Since(start) >= healthyAfter
			var ce *client.CloseError
			if errors.As(err, &ce) {
				return ce.Code, healthy
			}
			return 1006, healthy
		}
		if s.handle(c, format, p) {
			got = true
		}
	}
}

// handle accounts one server message (payload p in format) and reports
// whether it was a pushed message. The frame is peeked at
// (protocol.PeekServer, no allocation); only the rare frames whose other
// fields matter (gap, redirect) and the ones PeekServer leaves to the full
// decoder go through protocol.DecodeServer, so that the bench's CPU per
// frame stays far below the gateway's.
func (s *slot) handle(c *wsConn, format protocol.Format, p []byte) bool {
	if pk, err := protocol.PeekServer(format, p); err == nil {
		switch pk.Type {
		case protocol.TypeMessage:
			s.onMessage(c, pk.Seq, pk.Data, format == protocol.MsgPack, format, p)
			return true
		case protocol.TypePong:
			s.onPong(c, pk.TS)
			return false
		case protocol.TypeError:
			s.r.errorFrames.Add(1)
			return false
		case protocol.TypeReply:
			if s.r.cfg.Scenario != ScenarioSend {
				return false
			}
			// ok and the error code: decode in full below.
		case protocol.TypeGap, protocol.TypeRedirect:
			// Their other fields matter: decode in full below.
		default:
			return false // welcome, reply, unknown types: nothing to count
		}
	}
	f, err := protocol.DecodeServer(format, p)
	if err != nil {
		s.r.badFrames.Add(1)
		return false
	}
	switch f.Type {
	case protocol.TypeMessage:
		s.onMessage(c, f.Seq, f.Data, false, format, p)
		return true
	case protocol.TypeGap:
		s.r.gapFrames.Add(1)
		s.r.gapMissed.Add(f.Missed)
		if f.To > s.lastSeq.Load() {
			s.lastSeq.Store(f.To)
		}
	case protocol.TypeRedirect:
		s.redirect = f.URL
	case protocol.TypeReply:
		if s.r.cfg.Scenario == ScenarioSend {
			var code, msg string
			if f.Error != nil {
				code, msg = f.Error.Code, f.Error.Message
			}
			s.onReply(f.ID, f.OK, code, msg)
		}
	case protocol.TypeError:
		s.r.errorFrames.Add(1)
	case protocol.TypePong:
		s.onPong(c, f.TS)
	}
	return false
}

// onPong closes the connection when the pong answers the goodbye ping.
func (s *slot) onPong(c *wsConn, ts float64) {
	if ts == goodbyeTS {
		_ = c.WriteClose(protocol.CloseNormal, "bench done")
	}
}

// onMessage accounts one pushed message: latency from the publish
// timestamp in its data, distinct or duplicate by its stream index, seq
// order and acknowledgement for reliable ones. data is the message's
// data, in MessagePack when mpData (a peeked MessagePack frame), else
// JSON; frame is the whole frame, for the sample of a foreign message.
func (s *slot) onMessage(c *wsConn, seq int64, data []byte, mpData bool, format protocol.Format, frame []byte) {
	now := time.Now().UnixNano()
	r := s.r
	r.frames.Add(1)
	if seq > 0 {
		s.onSeq(c, seq)
	}
	var p payload
	var ok bool
	if mpData {
		p, ok = parseDataMsgpack(data)
	} else {
		p, ok = parseData(data)
	}
	if !ok || string(p.run) != r.runID {
		if r.foreign.Add(1) == 1 {
			r.foreignSample.Store(foreignSample(format, frame))
		}
		return
	}
	if s.bcast != nil && p.stream == s.bcast.id {
		s.onBroadcast(p, now)
		return
	}
	if s.tick != nil {
		s.onTick(c, p, now)
		return
	}
	r.lat.Record(time.Duration(now - p.ts))
	if s.stream == nil || p.stream != s.stream.id {
		r.misrouted.Add(1)
		return
	}
	isNew, tracked := s.set.add(p.idx)
	switch {
	case !tracked:
		r.untracked.Add(1)
	case isNew:
		r.gotOne()
	default:
		s.dups++
		r.dups.Add(1)
	}
}

// foreignSample is the text kept of the first foreign message: its event
// and JSON data.
func foreignSample(format protocol.Format, frame []byte) string {
	f, err := protocol.DecodeServer(format, frame)
	if err != nil {
		return trim(string(frame), 200)
	}
	return trim(f.Event+" "+string(f.Data), 200)
}

// onSeq checks the order of reliable messages and acknowledges them in
// batches (contract §4.3).
func (s *slot) onSeq(c *wsConn, seq int64) {
	if seq <= s.lastSeq.Load() {
		s.r.outOfOrder.Add(1)
		return
	}
	s.lastSeq.Store(seq)
	s.unacked++
	if s.unacked >= ackEvery || time.Since(s.lastAck) >= ackDelay {
		s.ack(c)
	}
}

// ack sends a cumulative ack of lastSeq if it was not sent yet. Called by
// the reader and, at the end, by closeAll; WriteFrame is safe for both.
func (s *slot) ack(c *wsConn) {
	seq := s.lastSeq.Load()
	for {
		a := s.acked.Load()
		if seq <= a {
			return
		}
		if s.acked.CompareAndSwap(a, seq) {
			break
		}
	}
	s.unacked = 0
	s.lastAck = time.Now()
	_ = c.WriteFrame(&protocol.ClientFrame{Type: protocol.TypeAck, Seq: seq})
}

// goodbyeTS marks the ping that follows the final ack.
const goodbyeTS = -1

// sayGoodbye ends the connection politely: close 1000, after a final ack
// of the reliable messages received. The close waits for the pong of a
// ping sent after the ack, because a close frame right behind an ack
// can overtake it on the gateway (the ack is then lost and the messages
// are replayed to the next connection of the user); the reader closes
// when the pong comes. The reader returns when the server's echo comes.
func (s *slot) sayGoodbye(c *wsConn) {
	if s.r.cfg.Reliable {
		seq := s.lastSeq.Load()
		if a := s.acked.Load(); seq > a && s.acked.CompareAndSwap(a, seq) {
			ts := float64(goodbyeTS)
			if c.WriteFrame(&protocol.ClientFrame{Type: protocol.TypeAck, Seq: seq}) == nil &&
				c.WriteFrame(&protocol.ClientFrame{Type: protocol.TypePing, TS: &ts}) == nil {
				return // the reader closes on the pong
			}
		}
	}
	_ = c.WriteClose(protocol.CloseNormal, "bench done")
}

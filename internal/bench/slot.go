package bench

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

// slot is one simulated client: a user, its connection of the moment and
// what it received. One goroutine per slot dials, reads every frame and
// reconnects; nothing else touches its reader state (set, dups, unacked).
//
// Memory per slot: this struct, the client.Conn (no buffer between
// frames), the goroutine's stack and the seqSet window (a few words).
type slot struct {
	r      *runner
	n      int
	user   string
	stream *stream // the messages this slot must get; nil = none

	conn atomic.Pointer[client.Conn]

	// Reader state (slot goroutine only).
	set      seqSet
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

		code, healthy := s.read(c)

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

// read handles the frames of one connection until it ends; it returns the
// close code (1006 when the connection broke without one) and whether the
// connection was healthy (lived 10 s or got a message).
func (s *slot) read(c *client.Conn) (code int, healthy bool) {
	start := time.Now()
	got := false
	for {
		f, err := c.ReadFrame()
		if err != nil {
			if errors.Is(err, client.ErrBadFrame) {
				s.r.badFrames.Add(1)
				continue
			}
			healthy = got || time.Since(start) >= healthyAfter
			var ce *client.CloseError
			if errors.As(err, &ce) {
				return ce.Code, healthy
			}
			return 1006, healthy
		}
		switch f.Type {
		case protocol.TypeMessage:
			got = true
			s.onMessage(c, f)
		case protocol.TypeGap:
			s.r.gapFrames.Add(1)
			s.r.gapMissed.Add(f.Missed)
			if f.To > s.lastSeq.Load() {
				s.lastSeq.Store(f.To)
			}
		case protocol.TypeRedirect:
			s.redirect = f.URL
		case protocol.TypeError:
			s.r.errorFrames.Add(1)
		case protocol.TypePong:
			if f.TS == goodbyeTS {
				_ = c.WriteClose(protocol.CloseNormal, "bench done")
			}
		}
	}
}

// onMessage accounts one pushed message: latency from the publish
// timestamp in its data, distinct or duplicate by its stream index, seq
// order and acknowledgement for reliable ones.
func (s *slot) onMessage(c *client.Conn, f *protocol.ServerFrame) {
	now := time.Now().UnixNano()
	r := s.r
	r.frames.Add(1)
	if f.Seq > 0 {
		s.onSeq(c, f.Seq)
	}
	p, ok := parseData(f.Data)
	if !ok || string(p.run) != r.runID {
		if r.foreign.Add(1) == 1 {
			r.foreignSample.Store(trim(string(f.Event)+" "+string(f.Data), 200))
		}
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

// onSeq checks the order of reliable messages and acknowledges them in
// batches (contract §4.3).
func (s *slot) onSeq(c *client.Conn, seq int64) {
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
func (s *slot) ack(c *client.Conn) {
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
func (s *slot) sayGoodbye(c *client.Conn) {
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

package session

// Step is what a catch-up does next (Advance).
type Step uint8

const (
	// Done: the sequence is whole and nothing is held; the catch-up
	// ended.
	Done Step = iota
	// Wait: the send queue is full; Advance again once it drains.
	Wait
	// ReadFrom: a message is missing; read the stream after its
	// position (Pos), Apply the read, and Advance again.
	ReadFrom
)

// A catch-up runs in the driver, outside the connection's lock:
//
//	for CatchingUp(st) {
//		switch Advance(st) {
//		case Done: return
//		case Wait: wait for the queue to drain
//		case ReadFrom: since := Pos(st); read after since; Apply(st, since, read)
//		}
//	}
//
// retrying a read that fails. The driver bounds its length with
// CatchUpAge, and Touch restarts that clock for a wait that is not the
// client's.

// CatchingUp reports whether the catch-up of st is to go on: the session
// is not closed and the stream is followed and catching up.
func (s *Session[M]) CatchingUp(st *Stream[M]) bool {
	return !s.closed && st.catchUp && !s.detached(st)
}

// Advance queues, in seq order, what the catch-up of st has: the
// messages read, then the live messages held, as far as the queue has
// room and the sequence has no hole; it says what comes next.
func (s *Session[M]) Advance(d Driver[M], st *Stream[M]) Step {
	if s.closed || s.detached(st) {
		return Done
	}
	pos := s.pos(st)
	for len(st.pending) > 0 {
		m := st.pending[0]
		if m.Seq <= *pos {
			st.pending = st.pending[1:]
			continue
		}
		if !d.Room() {
			return Wait
		}
		if s.closed {
			return Done
		}
		st.pending = st.pending[1:]
		*pos = m.Seq
		d.QueueStored(st, m)
	}
	st.pending = nil
	for len(st.held) > 0 {
		m := st.held[0]
		if m.Seq() <= *pos {
			st.held = st.held[1:]
			continue
		}
		if m.Seq() > *pos+1 {
			if m.Seq()-1 > st.readTo {
				return ReadFrom
			}
			// Read past already: the missing ones were acknowledged by
			// another connection of the user and left the inbox.
			*pos = m.Seq() - 1
		}
		if !d.Room() {
			return Wait
		}
		if s.closed {
			return Done
		}
		st.held = st.held[1:]
		s.queueLive(d, st, m)
	}
	st.held = nil
	if st.needRead {
		return ReadFrom
	}
	st.catchUp, st.since = false, 0
	return Done
}

// Apply takes a read of st made after since for its catch-up: a gap
// frame for what was trimmed, a jump over what another connection of
// the user acknowledged (gone from the inbox), and the messages to queue
// (Advance). A read that is stale (the position moved since, the
// catch-up ended, the session closed) is ignored; Apply reports whether
// it took the read.
func (s *Session[M]) Apply(d Driver[M], st *Stream[M], since int64, rd Read) bool {
	if !s.CatchingUp(st) || *s.pos(st) != since {
		return false
	}
	pos := s.pos(st)
	if st.room != "" && rd.LastSeq < *pos {
		// Above the room's seq (a join since beyond it, or the history
		// was lost): the room's seq is the base now (contract 12).
		*pos = rd.LastSeq
	}
	if rd.GapFrom > 0 && rd.GapTo >= rd.GapFrom && rd.GapTo > *pos {
		d.QueueGap(st, max(rd.GapFrom, *pos+1), rd.GapTo)
		*pos = rd.GapTo
	}
	if len(rd.Messages) == 0 || rd.Messages[0].Seq > *pos+1 {
		*pos = max(*pos, rd.Acked)
	}
	st.pending = rd.Messages
	st.readTo = max(st.readTo, rd.LastSeq)
	st.needRead = false
	return true
}

// Resync asks for a read of st (nil: the inbox) from its position, as a
// catch-up does (the bus may have lost messages). It reports whether the
// caller is to run the catch-up: none was running (one running reads
// too).
func (s *Session[M]) Resync(d Driver[M], st *Stream[M]) bool {
	if s.closed {
		return false
	}
	st = s.orInbox(st)
	if s.detached(st) {
		return false
	}
	st.needRead = true
	if st.catchUp {
		return false
	}
	st.catchUp, st.since = true, d.Now()
	return true
}

// Touch restarts the clock of st's running catch-up at now: what it waits
// for is not the client (CatchUpAge).
func (s *Session[M]) Touch(st *Stream[M], now int64) {
	if st.catchUp {
		st.since = now
	}
}

package session

// Result is what Deliver did with a live message.
type Result uint8

const (
	// Taken: dropped (a duplicate, a room the user left, a closed
	// session), held, or left to the stream's catch-up; nothing new to
	// write.
	Taken Result = iota
	// Queued: queued, the driver writes it.
	Queued
	// Full: the message is next in its stream but the send queue is
	// full; nothing changed. The driver applies the message's class:
	// closing the connection, or Defer.
	Full
)

// Deliver takes m, a live reliable message (m.Seq() > 0) of an open
// connection, and keeps its stream in seq order without duplicates or
// holes (see the package doc).
func (s *Session[M]) Deliver(d Driver[M], m M) Result {
	if s.closed {
		return Taken
	}
	var st *Stream[M] // nil: the inbox of a session that never caught up
	if room := m.Room(); room != "" {
		if st = s.followed(d, room); st == nil {
			return Taken
		}
	} else if s.x != nil {
		st = &s.x.inbox
	}
	if st != nil && st.catchUp {
		s.hold(d, st, m)
		return Taken
	}
	pos := s.pos(st)
	if m.Seq() <= *pos {
		return Taken
	}
	if m.Seq() > *pos+1 {
		st = s.orInbox(st)
		st.held = append(st.held, m)
		s.startCatchUp(d, st, true)
		return Taken
	}
	if !d.Room() {
		return Full
	}
	if s.closed {
		return Taken
	}
	s.queueLive(d, st, m)
	return Queued
}

// Defer skips the live delivery of m, which Deliver found Full, not the
// message: the stream's catch-up queues it once there is room, before
// anything later.
func (s *Session[M]) Defer(d Driver[M], m M) {
	if s.closed {
		return
	}
	st := s.Inbox()
	if room := m.Room(); room != "" {
		if st = s.Stream(room); st == nil {
			return
		}
	}
	st.held = append(st.held, m)
	s.startCatchUp(d, st, false)
}

// Hold keeps m, a live message of a connection still resuming, for
// Release.
func (s *Session[M]) Hold(m M) {
	if s.closed {
		return
	}
	x := s.ext()
	x.held = append(x.held, m)
}

// Release goes on after a resume (after ResumeInbox and ResumeRoom): the
// live messages held while it ran are queued in arrival order, a
// reliable one through its stream's catch-up, which also fills any hole
// they show; one that is not reliable through QueuePlain. It reports
// whether it advanced a stream (queued what it could).
func (s *Session[M]) Release(d Driver[M]) bool {
	if s.x == nil || s.closed {
		return false
	}
	held := s.x.held
	s.x.held = nil
	var touched []*Stream[M]
	for _, m := range held {
		if s.closed {
			return false
		}
		if m.Seq() == 0 {
			d.QueuePlain(m)
			continue
		}
		st := s.Inbox()
		if room := m.Room(); room != "" {
			// Plain at the resume's read, as in Deliver.
			if st = s.followed(d, room); st == nil {
				continue
			}
		}
		if len(st.held) == 0 && !st.catchUp {
			touched = append(touched, st)
		}
		st.held = append(st.held, m)
	}
	for _, st := range touched {
		if s.Advance(d, st) != Done {
			s.startCatchUp(d, st, false)
		}
	}
	return len(touched) > 0
}

// hold keeps a live message for the running catch-up of st.
func (s *Session[M]) hold(d Driver[M], st *Stream[M], m M) {
	if len(st.held) >= d.HeldMax(st) {
		d.Overflow()
		return
	}
	st.held = append(st.held, m)
}

// queueLive queues m, next in st (nil: the inbox), and moves the
// position to it.
func (s *Session[M]) queueLive(d Driver[M], st *Stream[M], m M) {
	*s.pos(st) = m.Seq()
	d.QueueLive(st, m)
}

// startCatchUp enters catch-up mode on st; hole is true when messages
// before those held are missing and must be read.
func (s *Session[M]) startCatchUp(d Driver[M], st *Stream[M], hole bool) {
	st.needRead = st.needRead || hole
	if st.catchUp {
		return
	}
	st.catchUp = true
	st.since = d.Now()
	d.CatchUp(st)
}

// ResumeInbox starts the inbox of a connection opened with since (when
// hasSince) or from its device's acknowledgement (rd.Acked), and queues
// the replay of rd, read after since (see Replay). With since=N the
// connection gets only seqs above N, also when N is above anything
// assigned yet (contract 4.3).
func (s *Session[M]) ResumeInbox(d Driver[M], since int64, hasSince bool, rd Read, unconfirmed bool) {
	base := rd.Acked
	if hasSince {
		base = since
	}
	s.inbox = base
	s.Replay(d, nil, since, rd, unconfirmed)
	s.inbox = max(s.inbox, base, rd.GapTo)
}

// ResumeRoom starts the stream of a reliable room at base, for a resume.
func (s *Session[M]) ResumeRoom(room string, base int64) *Stream[M] {
	st := s.Follow(room, base)
	st.last = base
	return st
}

// Replay queues the replay of a resume of st (nil: the inbox) read after
// since: a gap frame for what is gone after since, then every message
// above the position. Replays are bounded by the inbox or history limit,
// so they may exceed the send queue. When the read is unconfirmed (the
// replicas did not confirm it) the stream catches up from its position
// instead.
func (s *Session[M]) Replay(d Driver[M], st *Stream[M], since int64, rd Read, unconfirmed bool) {
	if s.closed {
		return
	}
	if unconfirmed {
		s.startCatchUp(d, s.orInbox(st), true)
		return
	}
	if rd.GapFrom > 0 && rd.GapTo >= rd.GapFrom && rd.GapTo > since {
		d.QueueGap(st, max(rd.GapFrom, since+1), rd.GapTo)
		pos := s.pos(st)
		*pos = max(*pos, rd.GapTo)
	}
	for _, m := range rd.Messages {
		if pos := s.pos(st); m.Seq > *pos {
			*pos = m.Seq
			d.QueueStored(st, m)
		}
	}
}

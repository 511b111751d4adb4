package session

import (
	"maps"
	"slices"
)

// Message is a live message as the session sees it.
type Message interface {
	// Seq is the message's seq in its stream, 0 for a message that is
	// not reliable.
	Seq() int64
	// Room is the reliable room whose seq Seq is, "" for the inbox.
	Room() string
}

// Stored is a message read from the inbox or a room's history.
type Stored struct {
	Seq     int64
	Payload []byte
}

// Read is a read of a stream after a seq: the inbox or a room's history.
type Read struct {
	Messages []Stored // kept messages above the seq read from, in seq order
	GapFrom  int64    // when GapTo >= GapFrom > 0: seqs GapFrom..GapTo were trimmed
	GapTo    int64
	LastSeq  int64 // the stream's highest seq
	Acked    int64 // the inbox: every seq up to it was acknowledged (gone from it)
}

// Driver is the connection that runs a session: it queues what the
// session emits and runs the catch-ups. Its methods are called under the
// connection's lock, from the session's methods.
type Driver[M Message] interface {
	// Room reports whether the send queue takes one more frame.
	Room() bool
	// Member reports whether the user is a member of room (asked for a
	// room message whose stream the session has not started).
	Member(room string) bool
	// Now is the time, Unix seconds.
	Now() int64
	// HeldMax is how many live messages st may hold while it catches up.
	HeldMax(st *Stream[M]) int

	// QueueLive queues m, the next message of st (nil: the inbox), whose
	// position is m's seq already.
	QueueLive(st *Stream[M], m M)
	// QueueStored queues m, read from st, whose position is m's seq
	// already.
	QueueStored(st *Stream[M], m Stored)
	// QueueGap queues a gap frame of st for from..to.
	QueueGap(st *Stream[M], from, to int64)
	// QueuePlain queues m, a message that is not reliable held while the
	// connection resumed, under its class's rules.
	QueuePlain(m M)

	// CatchUp starts running the catch-up of st (see Advance), in the
	// background: the session is in the middle of an event.
	CatchUp(st *Stream[M])
	// Overflow closes the connection as a slow consumer (4008): a
	// catch-up holds more than HeldMax messages. It may call Close.
	Overflow()
}

// Session is the reliable state of one connection. See the package doc.
type Session[M Message] struct {
	inbox  int64 // the inbox's position (kept here: an idle session needs no x)
	closed bool
	x      *extra[M]
}

// extra is what only a busy session needs.
type extra[M Message] struct {
	inbox Stream[M]             // the inbox's catch-up (its position is Session.inbox)
	rooms map[string]*Stream[M] // the reliable rooms followed, by name
	held  []M                   // live messages held while resuming, in arrival order
}

// Stream is one reliable sequence of a connection: the user's inbox or a
// reliable room. Its fields are the session's.
type Stream[M Message] struct {
	room string // "" for the inbox
	last int64  // a room's position: the highest seq queued (the inbox's is Session.inbox)

	catchUp  bool     // a catch-up is filling the sequence
	needRead bool     // a message is missing: read the inbox or history
	since    int64    // Unix s the catch-up began (the driver bounds it, see CatchUpAge)
	readTo   int64    // the stream's last seq at the last read: every seq up to it was read, reported as a gap or acknowledged
	pending  []Stored // read, not queued yet
	held     []M      // live messages held while catching up, in arrival order
}

// Room is the stream's room, "" for the inbox (st may be nil: the inbox).
func (st *Stream[M]) Room() string {
	if st == nil {
		return ""
	}
	return st.room
}

func (st *Stream[M]) idle() bool {
	return st.room == "" && st.last == 0 && !st.catchUp && !st.needRead && st.since == 0 && st.readTo == 0 &&
		len(st.pending) == 0 && len(st.held) == 0
}

func (s *Session[M]) ext() *extra[M] {
	if s.x == nil {
		s.x = &extra[M]{}
	}
	return s.x
}

// Idle reports whether the session holds nothing an idle one would not
// but the inbox's position.
func (s *Session[M]) Idle() bool {
	return s.x == nil || (s.x.inbox.idle() && len(s.x.rooms) == 0 && len(s.x.held) == 0)
}

// Compact lets go of what an idle session does not need.
func (s *Session[M]) Compact() {
	if s.x != nil && s.Idle() {
		s.x = nil
	}
}

// Pos is the position of st (nil: the inbox): the highest seq queued.
func (s *Session[M]) Pos(st *Stream[M]) int64 { return *s.pos(st) }

// LowerInbox lowers the inbox's position to last when it is above (the
// user's seqs restarted after a data loss).
func (s *Session[M]) LowerInbox(last int64) {
	s.inbox = min(s.inbox, last)
}

func (s *Session[M]) pos(st *Stream[M]) *int64 {
	if st == nil || st.room == "" {
		return &s.inbox
	}
	return &st.last
}

// Inbox is the inbox's stream.
func (s *Session[M]) Inbox() *Stream[M] { return &s.ext().inbox }

func (s *Session[M]) orInbox(st *Stream[M]) *Stream[M] {
	if st == nil {
		return s.Inbox()
	}
	return st
}

// Stream is the stream of a reliable room followed, nil when none.
func (s *Session[M]) Stream(room string) *Stream[M] {
	if s.x == nil {
		return nil
	}
	return s.x.rooms[room]
}

// Rooms calls fn for each reliable room followed and its position, in no
// particular order.
func (s *Session[M]) Rooms(fn func(st *Stream[M], pos int64)) {
	if s.x == nil {
		return
	}
	for _, st := range s.x.rooms {
		fn(st, st.last)
	}
}

// RoomStreams is the streams of the reliable rooms followed.
func (s *Session[M]) RoomStreams() []*Stream[M] {
	if s.x == nil {
		return nil
	}
	return slices.Collect(maps.Values(s.x.rooms))
}

// Follow returns the stream of a reliable room, starting it at base
// when the connection did not follow the room yet (a stream followed
// keeps its position).
func (s *Session[M]) Follow(room string, base int64) *Stream[M] {
	x := s.ext()
	st := x.rooms[room]
	if st == nil {
		if x.rooms == nil {
			x.rooms = map[string]*Stream[M]{}
		}
		st = &Stream[M]{room: room, last: max(base, 0)}
		x.rooms[room] = st
	}
	return st
}

// followed is the stream of a reliable room the user is a member of,
// started at 0 when there is none yet: the room was plain (seq 0) when
// the connection followed it (every join path starts a stream for a
// reliable room), so every seq of it is owed, from 1, also when the first
// ones come after a later one. nil when the user is no member (left the
// room since the message found the member).
func (s *Session[M]) followed(d Driver[M], room string) *Stream[M] {
	if st := s.Stream(room); st != nil {
		return st
	}
	if !d.Member(room) {
		return nil
	}
	return s.Follow(room, 0)
}

// detached reports whether st is a room stream no longer followed (the
// user left the room): nothing of it is queued.
func (s *Session[M]) detached(st *Stream[M]) bool {
	return st.room != "" && (s.x == nil || s.x.rooms[st.room] != st)
}

// Forget stops following a room the user left, also a stream still
// catching up (its catch-up ends without queueing anything more): once
// the leave is answered no frame of the room follows, and a later
// Follow starts from its own base, not from this position.
func (s *Session[M]) Forget(room string) {
	if s.x == nil {
		return
	}
	if st := s.x.rooms[room]; st != nil {
		st.catchUp, st.needRead, st.since = false, false, 0
		st.held, st.pending = nil, nil
		delete(s.x.rooms, room)
	}
}

// DropUntouched forgets st, a stream Follow started, when it is still the
// room's and nothing moved it (no catch-up, nothing held).
func (s *Session[M]) DropUntouched(st *Stream[M]) {
	if s.x != nil && s.x.rooms[st.room] == st && !st.catchUp && len(st.held) == 0 {
		delete(s.x.rooms, st.room)
	}
}

// streams calls fn for each stream of the session.
func (s *Session[M]) streams(fn func(st *Stream[M])) {
	if s.x == nil {
		return
	}
	fn(&s.x.inbox)
	for _, st := range s.x.rooms {
		fn(st)
	}
}

// Close ends the session: what is held is forgotten (resume brings it),
// the catch-ups end, and nothing is emitted after it.
func (s *Session[M]) Close() {
	s.closed = true
	if s.x == nil {
		return
	}
	s.x.held = nil
	s.streams(func(st *Stream[M]) { st.held, st.pending = nil, nil })
}

// CatchUpAge is how long (seconds) the oldest running catch-up has
// lasted at now, 0 when none runs.
func (s *Session[M]) CatchUpAge(now int64) int64 {
	var age int64
	s.streams(func(st *Stream[M]) {
		if st.catchUp {
			age = max(age, now-st.since)
		}
	})
	return age
}

// Holding is how many live messages are held for Release.
func (s *Session[M]) Holding() int {
	if s.x == nil {
		return 0
	}
	return len(s.x.held)
}

package session

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProperty runs thousands of seeded random interleavings of what a
// connection meets (see harness) through a Session against a model store
// and checks, on what the session emits, the invariants of contract 4.3
// and 12:
//
//   - per stream, the seqs of messages and gap frames strictly increase
//     (no duplicate, no reordering: a live message never comes before a
//     held or missing earlier one), and none is at or below the start
//     (since, the join's seq);
//   - a gap frame covers only seqs the store no longer keeps;
//   - nothing is emitted after Close, nor for a room after its leave
//     (until it is joined again);
//   - messages that are not reliable, held while resuming, come in
//     arrival order;
//   - once things settle (bus delivered, reads answered, queue drained,
//     the node's check run for the streams that lost a message on the
//     bus), every seq of each stream from its
//     start to the store's top was delivered or covered by exactly one
//     gap frame, or acknowledged by every device (the inbox);
//   - a catch-up ends once the sequence is whole.
//
// A failure names the seed; replay it with
//
//	go test -run TestProperty ./internal/session/ -session.seed=N -v
//
// (or SESSION_SEED=N), which prints the case's events. -session.cases
// (or SESSION_CASES)
// sets how many cases run (default 20000, 2000 with -short).
//
// The delivery bugs found so far, put back one at a time in the session
// code (testdata/bugs/*.patch, `git apply` then this test), each fail
// here; see testdata/bugs/README.md for what each one is and how it
// failed.
func TestProperty(t *testing.T) {
	seed := *seedFlag
	if v, err := strconv.ParseUint(os.Getenv("SESSION_SEED"), 10, 64); err == nil {
		seed = v
	}
	if seed != 0 {
		h := newHarness(seed, true)
		err := h.run()
		t.Log("\n" + strings.Join(h.trace, "\n"))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return
	}
	n := *casesFlag
	if v, err := strconv.Atoi(os.Getenv("SESSION_CASES")); err == nil && v > 0 {
		n = v
	}
	if n == 0 {
		n = 20000
		if testing.Short() {
			n = 2000
		}
	}
	base := uint64(time.Now().UnixNano())
	start := time.Now()
	for i := range n {
		seed := base + uint64(i)
		if err := newHarness(seed, false).run(); err != nil {
			t.Fatalf("seed %d (case %d of this run): %v\nreplay: go test -run TestProperty ./internal/session/ -session.seed=%d -v", seed, i+1, err, seed)
		}
	}
	el := time.Since(start)
	t.Logf("%d cases in %v (%.0f a second)", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
}

var (
	seedFlag  = flag.Uint64("session.seed", 0, "replay one seed of TestProperty, printing its events")
	casesFlag = flag.Int("session.cases", 0, "how many cases TestProperty runs")
)

// msg is a live message: reliable (seq > 0, of the inbox or a room) or
// not (seq 0, id for its order).
type msg struct {
	seq   int64
	room  string
	id    int
	chat  bool // its class closes the connection when the queue is full
	plain bool
}

func (m *msg) Seq() int64   { return m.seq }
func (m *msg) Room() string { return m.room }

func (m *msg) String() string {
	if m.plain {
		return fmt.Sprintf("plain#%d", m.id)
	}
	return fmt.Sprintf("%s:%d", name(m.room), m.seq)
}

func name(room string) string {
	if room == "" {
		return "inbox"
	}
	return room
}

// store is the model of one stream's kept messages: seqs 1..top were
// published, those up to gone are no longer kept: acknowledged by every
// device up to acked (the inbox), trimmed (limit, TTL) above.
type store struct {
	top, gone, acked int64
}

// read is what the backend answers for a read after since (as
// cluster.Memory: the gap counted from the acknowledgement).
func (s *store) read(since int64) Read {
	since = max(since, 0)
	rd := Read{LastSeq: s.top, Acked: s.acked}
	if from, to := max(since, s.acked)+1, s.gone; to >= from && from >= 1 {
		rd.GapFrom, rd.GapTo = from, to
	}
	for q := max(since, s.gone) + 1; q <= s.top; q++ {
		rd.Messages = append(rd.Messages, Stored{Seq: q})
	}
	return rd
}

// epoch is what the connection has emitted of one stream since it
// followed it.
type epoch struct {
	start  int64 // seqs above it are owed
	last   int64 // the highest seq emitted (a message or a gap's end)
	gapped []int64
	got    map[int64]bool
}

func newEpoch(start int64) *epoch { return &epoch{start: start, last: start, got: map[int64]bool{}} }

// runner is a catch-up the driver runs (Driver.CatchUp, Resync).
type runner struct {
	st      *Stream[*msg]
	reading bool
	since   int64
}

// harness drives one Session as the gateway does, with a model store, a
// bus that loses, duplicates and reorders, a send queue the client
// drains, and the node's catch-up checks.
type harness struct {
	r       *rand.Rand
	tracing bool
	trace   []string

	s        Session[*msg]
	stores   map[string]*store // "" is the inbox
	rooms    []string
	member   map[string]bool
	epochs   map[string]*epoch // nil: not followed
	bus      []*msg
	queue    int
	capacity int
	heldMax  int
	now      int64
	resuming bool
	closed   bool
	runners  []*runner

	lost      map[string]bool // a message of the stream was lost on the bus
	plainIDs  int
	heldPlain []int // ids of plain messages held while resuming, in order
	err       error
}

func newHarness(seed uint64, tracing bool) *harness {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := &harness{
		r: r, tracing: tracing,
		stores: map[string]*store{}, member: map[string]bool{}, epochs: map[string]*epoch{}, lost: map[string]bool{},
		capacity: 1 + r.IntN(6), heldMax: 2 + r.IntN(30), now: 1000,
	}
	h.rooms = []string{"a", "b"}[:1+r.IntN(2)]
	for _, name := range append([]string{""}, h.rooms...) {
		st := &store{top: int64(r.IntN(8))}
		if name != "" && r.IntN(3) == 0 {
			st.top = 0 // a plain room: its first reliable message comes later
		}
		st.gone = int64(r.IntN(int(st.top) + 1))
		if name == "" {
			st.acked = int64(r.IntN(int(st.gone) + 1))
		}
		h.stores[name] = st
	}
	for _, room := range h.rooms {
		h.member[room] = r.IntN(4) != 0
	}
	return h
}

func (h *harness) logf(format string, args ...any) {
	if h.tracing {
		h.trace = append(h.trace, fmt.Sprintf(format, args...))
	}
}

func (h *harness) fail(format string, args ...any) {
	if h.err == nil {
		h.err = fmt.Errorf(format, args...)
		h.logf("FAIL: %v", h.err)
	}
}

// The Driver.

func (h *harness) Room() bool {
	if !h.closed && h.r.IntN(200) == 0 {
		// The inline write the gateway's Room may make fails: the
		// connection is torn down in the middle of the event.
		h.logf("  write fails: close")
		h.close()
	}
	return h.queue < h.capacity
}

func (h *harness) Member(room string) bool { return h.member[room] }
func (h *harness) Now() int64              { return h.now }
func (h *harness) HeldMax(*Stream[*msg]) int {
	return h.heldMax
}

func (h *harness) QueueLive(st *Stream[*msg], m *msg) {
	h.logf("  live %v", m)
	if st.Room() != m.room {
		h.fail("%v queued on the stream of %s", m, name(st.Room()))
	}
	h.emit(st, m.seq, m.seq, false)
}

func (h *harness) QueueStored(st *Stream[*msg], m Stored) {
	h.logf("  stored %s:%d", name(st.Room()), m.Seq)
	h.emit(st, m.Seq, m.Seq, false)
}

func (h *harness) QueueGap(st *Stream[*msg], from, to int64) {
	h.logf("  gap %s:%d-%d", name(st.Room()), from, to)
	if to < from {
		h.fail("gap %s:%d-%d is empty", name(st.Room()), from, to)
	}
	if s := h.stores[st.Room()]; to > s.gone {
		h.fail("gap %s:%d-%d covers kept messages (gone up to %d)", name(st.Room()), from, to, s.gone)
	}
	h.emit(st, from, to, true)
}

func (h *harness) QueuePlain(m *msg) {
	h.logf("  plain %v", m)
	if h.closed {
		h.fail("%v queued after close", m)
	}
	if len(h.heldPlain) == 0 || h.heldPlain[0] != m.id {
		h.fail("%v released out of its arrival order (%v)", m, h.heldPlain)
	} else {
		h.heldPlain = h.heldPlain[1:]
	}
	h.queuePlain(m)
}

// queuePlain is the class rules of a message that is not reliable: a
// full queue drops it, or closes the connection for a chat message.
func (h *harness) queuePlain(m *msg) {
	if h.queue < h.capacity {
		h.queue++
		return
	}
	if m.chat {
		h.logf("  queue full, chat: close")
		h.close()
	}
}

func (h *harness) CatchUp(st *Stream[*msg]) {
	h.logf("  catch-up of %s starts", name(st.Room()))
	h.runners = append(h.runners, &runner{st: st})
}

func (h *harness) Overflow() {
	h.logf("  overflow: close")
	h.close()
}

// emit checks one frame of st covering from..to (a message: from == to).
func (h *harness) emit(st *Stream[*msg], from, to int64, gap bool) {
	room := st.Room()
	what := fmt.Sprintf("%s:%d", name(room), from)
	if gap {
		what = fmt.Sprintf("gap %s:%d-%d", name(room), from, to)
	}
	h.queue++
	if h.closed {
		h.fail("%s queued after close", what)
		return
	}
	if room != "" && (!h.member[room] || h.s.Stream(room) != st) {
		h.fail("%s queued for a room left", what)
		return
	}
	e := h.epochs[room]
	if e == nil {
		h.fail("%s queued for a stream not followed", what)
		return
	}
	if from <= e.last {
		h.fail("%s at or below %d, the last seq emitted or the start (duplicate or out of order)", what, e.last)
		return
	}
	if to > h.stores[room].top {
		h.fail("%s above the stream's top %d", what, h.stores[room].top)
	}
	e.last = to
	if gap {
		e.gapped = append(e.gapped, from, to)
		return
	}
	e.got[from] = true
}

func (h *harness) close() {
	if h.closed {
		return
	}
	h.closed = true
	h.s.Close()
}

// run plays one case: a resume, a random stretch of events, then
// settling and the completeness check.
func (h *harness) run() error {
	h.connect()
	steps := 20 + h.r.IntN(120)
	for i := 0; i < steps && h.err == nil; i++ {
		h.step()
	}
	if h.err == nil && !h.closed {
		h.settle()
	}
	if h.err == nil && !h.closed {
		h.checkWhole()
	}
	return h.err
}

// connect is the handshake: the inbox read with since (or from the
// device's acknowledgement), the rooms' seqs and room_since reads, live
// messages held meanwhile, then the replays and the release.
func (h *harness) connect() {
	h.resuming = true
	in := h.stores[""]
	var since, base int64
	hasSince := true
	switch h.r.IntN(3) {
	case 0: // no since: from the acknowledgement
		base, hasSince = in.acked, false
	case 1:
		since = int64(h.r.IntN(int(in.top) + 3)) // also above inbox_seq
		base = since
	default:
		since = int64(h.r.IntN(int(in.top) + 1))
		base = since
	}
	rd, unconfirmed := in.read(since), h.r.IntN(8) == 0
	if unconfirmed {
		rd = Read{LastSeq: in.top, Acked: in.acked} // as Connect answers: no messages, no gap
	}
	h.logf("connect: inbox since %d base %d read %+v unconfirmed %v", since, base, rd, unconfirmed)
	type roomResume struct {
		base, since int64
		rd          Read
		read        bool
		unconfirmed bool
	}
	resumes := map[string]roomResume{}
	for _, room := range h.rooms {
		if !h.member[room] {
			continue
		}
		s := h.stores[room]
		if s.top == 0 {
			h.epochs[room] = newEpoch(0) // followed plain: owed from 1
			h.logf("connect: %s plain", room)
			continue
		}
		rr := roomResume{base: s.top}
		if h.r.IntN(2) == 0 {
			rr.since = int64(h.r.IntN(int(s.top) + 1))
			if rr.since < s.top {
				rr.base, rr.read = rr.since, true
				rr.rd = s.read(rr.since)
			}
		}
		if h.r.IntN(8) == 0 {
			rr.rd, rr.read, rr.unconfirmed = Read{}, true, true
			if rr.since == 0 || rr.since >= s.top {
				rr.since = s.top
			}
		}
		resumes[room] = rr
		h.epochs[room] = newEpoch(rr.base)
		h.logf("connect: %s %+v", room, rr)
	}
	h.epochs[""] = newEpoch(base)
	for range h.r.IntN(6) {
		h.step()
	}
	h.resuming = false
	if h.closed || h.err != nil {
		return
	}
	h.logf("open")
	h.s.ResumeInbox(h, since, hasSince, rd, unconfirmed)
	for _, room := range h.rooms {
		rr, ok := resumes[room]
		if !ok || h.closed {
			continue
		}
		st := h.s.ResumeRoom(room, rr.base)
		if rr.read {
			h.s.Replay(h, st, rr.since, rr.rd, rr.unconfirmed)
		}
	}
	h.s.Release(h)
}

// step is one random event.
func (h *harness) step() {
	switch k := h.r.IntN(100); {
	case k < 22:
		h.publish()
	case k < 45:
		h.deliverOne()
	case k < 65:
		h.runOne(true)
	case k < 77:
		h.drain()
	case k < 83:
		h.trim()
	case k < 88:
		h.resync()
	case k < 92:
		h.leaveOrJoin()
	case k < 95:
		h.tick()
	case k < 96:
		if h.r.IntN(4) == 0 {
			h.logf("client closes")
			h.close()
		}
	default:
		h.ack()
	}
}

// publish appends a message to a stream (or sends a plain one) and puts
// it on the bus: lost, once, or twice.
func (h *harness) publish() {
	if h.r.IntN(6) == 0 {
		h.plainIDs++
		m := &msg{plain: true, id: h.plainIDs, chat: h.r.IntN(3) == 0}
		h.logf("publish %v", m)
		h.bus = append(h.bus, m)
		return
	}
	names := append([]string{""}, h.rooms...)
	room := names[h.r.IntN(len(names))]
	s := h.stores[room]
	s.top++
	m := &msg{seq: s.top, room: room, chat: h.r.IntN(3) == 0}
	switch k := h.r.IntN(10); {
	case k == 0:
		h.logf("publish %v (lost on the bus)", m)
		h.lost[room] = true
	case k == 1:
		h.logf("publish %v (twice on the bus)", m)
		h.bus = append(h.bus, m, m)
	default:
		h.logf("publish %v", m)
		h.bus = append(h.bus, m)
	}
}

// deliverOne hands one message of the bus, any of them, to the
// connection as the gateway's deliverLocked does.
func (h *harness) deliverOne() {
	if len(h.bus) == 0 {
		return
	}
	i := h.r.IntN(len(h.bus))
	if h.r.IntN(3) != 0 {
		i = 0 // mostly in order
	}
	m := h.bus[i]
	h.bus = append(h.bus[:i], h.bus[i+1:]...)
	h.deliver(m)
}

func (h *harness) deliver(m *msg) {
	h.logf("deliver %v", m)
	switch {
	case h.closed:
		return
	case h.resuming:
		if m.plain {
			h.heldPlain = append(h.heldPlain, m.id)
		}
		h.s.Hold(m)
		return
	case m.plain:
		h.queuePlain(m) // outside the session
		return
	}
	if h.s.Deliver(h, m) != Full {
		return
	}
	if m.chat {
		h.logf("  queue full, chat: close")
		h.close()
		return
	}
	h.logf("  queue full: defer")
	h.s.Defer(h, m)
}

// runOne moves one catch-up on by a step, as the gateway's catchUp
// loop does; a read may fail (retried).
func (h *harness) runOne(mayFail bool) {
	if len(h.runners) == 0 {
		return
	}
	i := h.r.IntN(len(h.runners))
	ru := h.runners[i]
	end := func() { h.runners = append(h.runners[:i], h.runners[i+1:]...) }
	if ru.reading {
		ru.reading = false
		if mayFail && h.r.IntN(6) == 0 {
			h.logf("read of %s after %d fails", name(ru.st.Room()), ru.since)
			return
		}
		rd := h.stores[ru.st.Room()].read(ru.since)
		h.logf("read of %s after %d: %+v", name(ru.st.Room()), ru.since, rd)
		if !h.closed {
			h.s.Apply(h, ru.st, ru.since, rd)
		}
		return
	}
	if h.closed || !h.s.CatchingUp(ru.st) {
		h.logf("catch-up of %s ends", name(ru.st.Room()))
		end()
		return
	}
	h.logf("advance %s", name(ru.st.Room()))
	switch h.s.Advance(h, ru.st) {
	case Done:
		h.logf("  done")
		end()
	case Wait:
		h.logf("  wait for room")
	case ReadFrom:
		ru.reading, ru.since = true, h.s.Pos(ru.st)
		h.logf("  read from %d", ru.since)
	}
}

// drain is the client reading frames off the queue.
func (h *harness) drain() {
	h.queue = max(0, h.queue-1-h.r.IntN(4))
}

// trim drops the oldest kept messages of a stream (limit or TTL).
func (h *harness) trim() {
	names := append([]string{""}, h.rooms...)
	room := names[h.r.IntN(len(names))]
	s := h.stores[room]
	s.gone = min(s.top, s.gone+1+int64(h.r.IntN(3)))
	h.logf("trim %s: gone up to %d", name(room), s.gone)
}

// ack is every device of the user acknowledging the inbox up to a seq.
func (h *harness) ack() {
	s := h.stores[""]
	if s.top == 0 {
		return
	}
	s.acked = max(s.acked, int64(h.r.IntN(int(s.top)+1)))
	s.gone = max(s.gone, s.acked)
	h.logf("every device acked up to %d", s.acked)
}

// resync is one of the node's catch-up checks (a bus loss notice, the
// safety net): a stream behind its stream's seq reads from its position.
func (h *harness) resync() {
	if h.closed || h.resuming {
		return
	}
	names := append([]string{""}, h.rooms...)
	room := names[h.r.IntN(len(names))]
	h.resyncOf(room, false)
}

func (h *harness) resyncOf(room string, behind bool) {
	var st *Stream[*msg]
	if room == "" {
		if behind && h.s.Pos(nil) >= h.stores[""].top {
			return
		}
		st = h.s.Inbox()
	} else {
		if !h.member[room] || h.stores[room].top == 0 {
			return
		}
		// A member with no stream followed the room plain: from 0.
		st = h.s.Follow(room, 0)
		if behind && h.s.Pos(st) >= h.stores[room].top {
			return
		}
	}
	h.logf("resync %s", name(room))
	if h.s.Resync(h, st) {
		h.runners = append(h.runners, &runner{st: st})
	}
}

// leaveOrJoin is a leave of a room followed, or a join (with since or
// without) of one that is not.
func (h *harness) leaveOrJoin() {
	if h.closed || h.resuming {
		return
	}
	room := h.rooms[h.r.IntN(len(h.rooms))]
	s := h.stores[room]
	if h.member[room] {
		h.logf("leave %s", room)
		h.member[room] = false
		h.s.Forget(room)
		h.epochs[room] = nil
		return
	}
	h.member[room] = true
	if s.top > 0 && h.r.IntN(2) == 0 {
		since := int64(h.r.IntN(int(s.top) + 1))
		h.logf("join %s since %d", room, since)
		h.epochs[room] = newEpoch(since)
		st := h.s.Follow(room, since)
		if h.s.Resync(h, st) {
			h.runners = append(h.runners, &runner{st: st})
		}
		return
	}
	h.logf("join %s at its seq %d", room, s.top)
	h.epochs[room] = newEpoch(s.top)
	if s.top > 0 {
		h.s.Follow(room, s.top)
	}
}

// tick moves the clock; the sweep closes a catch-up older than 5 s.
func (h *harness) tick() {
	h.now += int64(1 + h.r.IntN(2))
	if !h.closed && !h.resuming && h.s.CatchUpAge(h.now) >= 5 {
		h.logf("sweep: catch-up too old, close")
		h.close()
	}
}

// settle delivers the bus, answers every read, drains the queue and
// runs the node's catch-up checks until nothing moves.
func (h *harness) settle() {
	h.logf("settle")
	h.capacity = 1 << 30
	for round := 0; ; round++ {
		if round > 100 {
			h.fail("no quiescence after 100 rounds: %d catch-ups run", len(h.runners))
			return
		}
		for guard := 0; len(h.bus) > 0 || len(h.runners) > 0; guard++ {
			if guard > 100000 || h.err != nil || h.closed {
				if guard > 100000 {
					h.fail("a catch-up does not end")
				}
				return
			}
			h.queue = 0
			if len(h.bus) > 0 {
				m := h.bus[0]
				h.bus = h.bus[1:]
				h.deliver(m)
				continue
			}
			h.runOne(false)
		}
		if h.err != nil || h.closed {
			return
		}
		// The node's check after a loss notice, for the streams that
		// lost a message on the bus: nothing else may need it (the
		// all-users safety net comes after 30 s, not "within a few
		// seconds").
		for _, room := range append([]string{""}, h.rooms...) {
			if h.lost[room] {
				h.resyncOf(room, true)
			}
		}
		if len(h.runners) == 0 {
			return
		}
	}
}

// checkWhole checks that every seq owed was delivered or reported.
func (h *harness) checkWhole() {
	for _, room := range append([]string{""}, h.rooms...) {
		e := h.epochs[room]
		if e == nil {
			continue
		}
		s := h.stores[room]
		gapped := func(q int64) bool {
			for i := 0; i < len(e.gapped); i += 2 {
				if e.gapped[i] <= q && q <= e.gapped[i+1] {
					return true
				}
			}
			return false
		}
		for q := e.start + 1; q <= s.top; q++ {
			if !e.got[q] && !gapped(q) && !(room == "" && q <= s.acked) {
				h.fail("%s:%d never delivered nor reported by a gap (start %d, top %d)", name(room), q, e.start, s.top)
				return
			}
		}
	}
	if len(h.heldPlain) > 0 {
		h.fail("plain messages held while resuming never released: %v", h.heldPlain)
	}
	if !h.s.Idle() && h.s.CatchUpAge(h.now+1000) > 0 {
		h.fail("a catch-up still runs after settling")
	}
}

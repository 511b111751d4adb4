package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// Bus envelopes: one JSON header line, then (for messages) the message
// object exactly as clients receive it, so the receiving node neither
// re-encodes nor parses the payload for JSON connections.
const (
	kindMessage    = "m"
	kindMessages   = "mb"     // several messages for this node (a batch publish): records follow
	kindKick       = "kick"   // close the user's connections (disconnect API, single device policy)
	kindMembership = "room"   // the user joined or left a room
	kindDrain      = "drain"  // this node must drain
	kindDone       = "done"   // answer to a request (kick or drain with a request id)
	kindPost       = "post"   // client frames posted to an HTTP stream connection of this node (connpost.go)
	kindPosted     = "posted" // the answer to a kindPost: Code is the HTTP status
	kindConns      = "conns"  // list this node's connections (conns.go); body: the query
	kindConnsPage  = "cpage"  // the answer to a kindConns; body: the page
	kindPresence   = "pres"   // a room presence change: Conn of User joined (Join) or left Room at presence seq Seq; body: info
)

// busReliableRoom is the bus target type of a reliable room message (the
// message's own target says "room"). A node of the version before
// reliable rooms knows no such target type and delivers the message to
// nobody, instead of taking its room seq for a user seq; plain room
// messages keep the type "room", which every version reads (see
// docs/reliability.md, rolling upgrades).
const busReliableRoom = "rroom"

// busTargetType is the bus target type of a message to a target of type t
// with seq (reliable when > 0).
func busTargetType(t string, seq int64) string {
	if t == protocol.TargetRoom && seq > 0 {
		return busReliableRoom
	}
	return t
}

// newBusDelivery is the delivery of a message read from the bus (or
// routed to this node) with bus target type t: a reliable room message
// follows its room's sequence, anything else as newDelivery.
func newBusDelivery(t, id string, body []byte, cl class, seq, pubAt int64) *delivery {
	if (t == busReliableRoom || t == protocol.TargetRoom) && seq > 0 {
		return newRoomDelivery(body, cl, id, seq, pubAt)
	}
	return newDelivery(body, cl, seq, pubAt)
}

// busTarget is the target of a message with bus target type t.
func busTarget(t, id string) protocol.Target {
	if t == busReliableRoom {
		t = protocol.TargetRoom
	}
	return protocol.Target{Type: t, ID: id}
}

type envelope struct {
	Kind   string `json:"k"`
	TType  string `json:"t,omitempty"`
	TID    string `json:"i,omitempty"`
	Class  uint8  `json:"c,omitempty"`
	Seq    int64  `json:"s,omitempty"`
	PubAt  int64  `json:"p,omitempty"`
	Origin string `json:"o,omitempty"`

	User string `json:"u,omitempty"`
	Room string `json:"r,omitempty"`
	Join bool   `json:"j,omitempty"`
	// A join's room seq as the joining node read it (membership): the
	// member's connections follow the room from there. Nil from a node of
	// an earlier version.
	RoomSeq *int64   `json:"rs,omitempty"`
	Except  string   `json:"x,omitempty"`    // kick: spare this connection; message: the connection that does not get it
	Conn    string   `json:"conn,omitempty"` // kick: only this connection
	Conns   []string `json:"cs,omitempty"`   // kick: only these connections
	Code    int      `json:"code,omitempty"`
	Reason  string   `json:"why,omitempty"`

	// A request (kick, drain) with an id wants an answer: kindDone with
	// the same id, sent to From (see ask.go).
	Req  string `json:"q,omitempty"`
	From string `json:"f,omitempty"`

	// Deadline (Unix ms; 0 = none): the publisher answered its caller an
	// error if the send had not completed by then, so a receiver drops an
	// envelope that arrives later (it was sent from a Redis socket that
	// hung, after the caller was told "unavailable").
	Deadline int64 `json:"d,omitempty"`

	// TP is the W3C traceparent of a traced message (kindMessage).
	TP string `json:"tp,omitempty"`
	// Key is a realtime message's conflation key (kindMessage; contract
	// 19). A node of an earlier version ignores it: no conflation there.
	Key string `json:"ck,omitempty"`

	// Session is the mac of a post's session (kindPost); Taken, the frames
	// a post's owner took (kindPosted).
	Session string `json:"ss,omitempty"`
	Taken   int    `json:"n,omitempty"`

	// At is a presence removal's seq (kindPresence, left); UserConns the
	// user's connections present after the change.
	At        int64 `json:"at,omitempty"`
	UserConns int64 `json:"uc,omitempty"`
}

func encodeEnvelope(e envelope, body []byte) []byte {
	h, _ := json.Marshal(e)
	out := make([]byte, 0, len(h)+1+len(body))
	out = append(out, h...)
	out = append(out, '\n')
	return append(out, body...)
}

// A batch envelope (kindMessages) carries the messages of one batch
// publish for one node: after its header line, one record per message, in
// publish order, each a line of text and the message object:
//
//	<target type> <class> <seq> <pubAt ns> <body bytes> <target id>\n<body>
//
// Names hold no control characters (protocol.ValidName), so a target id
// never contains the newline; it is last on the line, so it may contain
// spaces. One envelope instead of one per message saves a PUBLISH, a read
// and an envelope decode per message on both nodes.
var batchHeader = func() []byte {
	h, _ := json.Marshal(envelope{Kind: kindMessages})
	return append(h, '\n')
}()

// appendRecord appends one message record to a batch envelope.
func appendRecord(dst []byte, t protocol.Target, cl class, seq, pubAt int64, body []byte) []byte {
	dst = append(dst, t.Type...)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(cl), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, seq, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, pubAt, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, ' ')
	dst = append(dst, t.ID...)
	dst = append(dst, '\n')
	return append(dst, body...)
}

// recordSize bounds the bytes appendRecord adds for a message.
func recordSize(t protocol.Target, body []byte) int {
	return 72 + len(t.Type) + len(t.ID) + len(body)
}

// busRecord is one message of a batch envelope.
type busRecord struct {
	target protocol.Target
	class  class
	seq    int64
	pubAt  int64
	body   []byte
}

// nextRecord parses the record at the start of b and returns the rest.
func nextRecord(b []byte) (rec busRecord, rest []byte, ok bool) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return rec, nil, false
	}
	line := b[:nl]
	var f [5][]byte
	for i := range f {
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			return rec, nil, false
		}
		f[i], line = line[:sp], line[sp+1:]
	}
	cl, err1 := strconv.ParseUint(string(f[1]), 10, 8)
	seq, err2 := strconv.ParseInt(string(f[2]), 10, 64)
	pubAt, err3 := strconv.ParseInt(string(f[3]), 10, 64)
	size, err4 := strconv.Atoi(string(f[4]))
	body := b[nl+1:]
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || size < 0 || size > len(body) {
		return rec, nil, false
	}
	rec = busRecord{
		target: protocol.Target{Type: targetType(f[0]), ID: string(line)},
		class:  class(cl),
		seq:    seq,
		pubAt:  pubAt,
		body:   body[:size:size],
	}
	return rec, body[size:], true
}

// targetType returns the constant for a target type read from the bus,
// without allocating.
func targetType(b []byte) string {
	switch string(b) {
	case protocol.TargetUser:
		return protocol.TargetUser
	case protocol.TargetRoom:
		return protocol.TargetRoom
	case protocol.TargetBroadcast:
		return protocol.TargetBroadcast
	case busReliableRoom:
		return busReliableRoom
	}
	return string(b)
}

// onBus handles one envelope from the cluster bus, in arrival order. It
// must not block: backend calls it needs are made in goroutines.
func (n *Node) onBus(payload []byte) {
	if payload == nil {
		// The subscription was lost and is back: what was sent meanwhile
		// did not come.
		n.log.Info("bus subscription restored; catching up local connections")
		n.membersAgain.Store(true) // membership messages may be lost too
		n.catchUpBehind()
		n.goFunc(n.resyncPresence) // and presence changes
		return
	}
	i := bytes.IndexByte(payload, '\n')
	if i < 0 {
		n.log.Warn("malformed bus envelope ignored", "bytes", len(payload))
		return
	}
	var e envelope
	if err := json.Unmarshal(payload[:i], &e); err != nil {
		n.log.Warn("malformed bus envelope ignored", "err", err)
		return
	}
	body := payload[i+1:]
	if e.Deadline > 0 && time.Now().UnixMilli() > e.Deadline {
		n.log.Debug("bus envelope past its publisher's deadline dropped", "kind", e.Kind)
		return
	}
	n.metrics.BusReceived.WithLabelValues(busKindName(e.Kind)).Inc()
	switch e.Kind {
	case kindMessage:
		if e.TType == protocol.TargetBroadcast && e.Origin == n.cfg.NodeID {
			return // delivered locally at publish time
		}
		if n.loseBus != nil && n.loseBus(e.Seq) {
			return
		}
		t := busTarget(e.TType, e.TID)
		d := newBusDelivery(e.TType, e.TID, body, class(e.Class), e.Seq, e.PubAt).keyed(t, e.Key)
		d.except = e.Except
		n.deliverLocal(t, d)
		n.logTraced(e.TP, t, e.Seq)
	case kindMessages:
		for len(body) > 0 {
			rec, rest, ok := nextRecord(body)
			if !ok {
				n.log.Warn("malformed record in a bus batch envelope; rest of the envelope ignored", "bytes", len(body))
				return
			}
			if n.loseBus == nil || !n.loseBus(rec.seq) {
				n.deliverLocal(busTarget(rec.target.Type, rec.target.ID), newBusDelivery(rec.target.Type, rec.target.ID, rec.body, rec.class, rec.seq, rec.pubAt))
			}
			body = rest
		}
	case kindKick:
		if e.Conns != nil {
			n.closeLocal(e.User, e.Conns, e.Code, e.Reason)
			n.answer(e)
			return
		}
		for _, c := range n.hub.userConns(e.User) {
			if id := c.connID(); id != e.Except && (e.Conn == "" || id == e.Conn) {
				c.close(e.Code, e.Reason)
			}
		}
	case kindMembership:
		if n.loseMembership != nil && n.loseMembership(e.User, e.Room) {
			return
		}
		n.applyMembership(e.User, e.Room, e.Join, e.RoomSeq)
	case kindPresence:
		n.deliverPresence(presEvent{room: e.Room, user: e.User, conn: e.Conn, join: e.Join, seq: e.Seq, at: e.At, userConns: e.UserConns, info: json.RawMessage(slices.Clone(body))})
	case kindDrain:
		n.draining.Store(true) // new handshakes refused from now on
		n.goFunc(func() { n.Drain("api") })
		n.answer(e)
	case kindPost:
		n.onPost(e, body)
	case kindPosted:
		n.onPosted(e, body)
	case kindConns:
		n.onConns(e, body)
	case kindConnsPage:
		n.connPages.deliver(e.Req, slices.Clone(body))
	case kindDone:
		n.asks.end(e.Req)
	default:
		n.log.Warn("unknown bus envelope ignored", "kind", e.Kind)
	}
}

// applyMembership updates the local index after a join or leave and
// declares or drops this node's interest in the room. The node that
// handled the join declared interest for this node already; if the user
// has no connection here any more (it closed meanwhile) and no other local
// member has the room, that declaration is withdrawn.
//
// The user's connections here follow the room from roomSeq, the seq the
// joining node read when it stored the membership (from the next seq,
// contract 4.2), their streams started before the index has the room (see
// followLocal). The room's messages appended since may have reached this
// node before the membership (and found no member) or not at all (before
// the joining node declared this node's interest): the room's seq is read
// again once the index has the room, and the streams read what they miss
// from the history, also for a room plain at the join (roomSeq 0) whose
// first reliable messages came meanwhile. A node of an earlier version
// sends no seq: it is read here, after the local index has the room (best
// effort, for the time of a rolling upgrade).
func (n *Node) applyMembership(user, room string, join bool, roomSeq *int64) {
	if join {
		if roomSeq != nil {
			n.followLocal(user, room, *roomSeq, nil, nil)
		}
		added, present := n.hub.join(user, room)
		if present {
			n.presenceEnterUser(user, room)
			n.goFunc(func() {
				ctx, cancel := n.bctx(n.ctx)
				defer cancel()
				start := time.Now()
				seqs, err := n.backend.RoomSeqs(ctx, []string{room})
				n.observe("room_seqs", start, err)
				switch {
				case err != nil:
					// The catch-up checks repair it (the next loss
					// notice, the safety net).
				case roomSeq == nil:
					n.followLocal(user, room, seqs[0], nil, nil)
				case seqs[0] > *roomSeq:
					n.resyncLocal(user, room, *roomSeq, nil)
				}
			})
		}
		switch {
		case added:
			n.goFunc(func() { n.declareInterest([]string{room}) })
		case !present:
			n.goFunc(func() { n.dropInterest([]string{room}) })
		}
		return
	}
	if n.hub.leave(user, room) {
		n.goFunc(func() { n.dropInterest([]string{room}) })
	}
	n.presenceLeaveUser(user, room)
	n.forgetRoom(user, room)
}

// declareInterest and dropInterest write this node's room interest. For
// one room they run one at a time and re-check the local index under the
// room's lock, so that a declaration and a withdrawal racing each other (a
// join and a close) always leave the backend as the index is now; writes
// for different rooms do not wait for each other.
func (n *Node) declareInterest(rooms []string) {
	ctx, cancel := context.WithTimeout(n.ctx, 4*time.Second)
	defer cancel()
	_ = n.declareInterestCtx(ctx, rooms)
}

func (n *Node) declareInterestCtx(ctx context.Context, rooms []string) error {
	defer n.interest.lock(rooms)()
	rooms = n.hub.filterRooms(rooms, true)
	if len(rooms) == 0 {
		return nil
	}
	start := time.Now()
	err := n.backend.SetRoomInterest(ctx, n.cfg.NodeID, rooms, n.cfg.RouteTTL)
	n.observe("rooms", start, err)
	return err
}

func (n *Node) dropInterest(rooms []string) {
	defer n.interest.lock(rooms)()
	rooms = n.hub.filterRooms(rooms, false)
	if len(rooms) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(n.ctx), 4*time.Second)
	defer cancel()
	start := time.Now()
	err := n.backend.DropRoomInterest(ctx, n.cfg.NodeID, rooms)
	n.observe("rooms", start, err)
}

func busKindName(k string) string {
	switch k {
	case kindMessage, kindMessages:
		return "message"
	case kindKick, kindMembership, kindDrain, kindDone, kindPost, kindPosted, kindPresence, kindConns, kindConnsPage:
		return k
	}
	return "unknown"
}

// catchUpBehind starts (or, when one is running, repeats once after it) a
// check of every local connection against its user's last seq: those
// behind (a bus copy lost on the way) catch up from the inbox. It runs
// after every resubscription to the bus (the subscriber side lost
// copies), when another node is found dead (it may have died between an
// append and its bus send), and every catchUpPeriod seconds from the sweep
// as a safety net for a copy lost any other way.
func (n *Node) catchUpBehind() {
	n.behindAgain.Store(true)
	if !n.behindRunning.CompareAndSwap(false, true) {
		return
	}
	n.goFunc(func() {
		defer n.behindRunning.Store(false)
		delay := 100 * time.Millisecond
		for n.behindAgain.Swap(false) && n.ctx.Err() == nil {
			if err := n.catchUpBehindOnce(); err != nil {
				// The backend is often just coming back (a resubscription
				// follows a Redis restart): try again soon, not at the
				// next safety-net period.
				n.log.Info("catch-up check failed; retrying", "err", err, "in", delay)
				n.behindAgain.Store(true)
				select {
				case <-time.After(delay):
				case <-n.ctx.Done():
				}
				delay = min(2*delay, 2*time.Second)
				continue
			}
			delay = 100 * time.Millisecond
		}
	})
}

// catchUpPeriod is the period of the safety-net check, in sweeps
// (seconds). Each check costs one GET per local user (pipelined by 1000),
// so it is slow: the losses it is for (a PUBLISH lost while both ends'
// connections stayed up) have no other trigger, and the common ones are
// repaired at once by the triggers above (a broken subscription is told
// when it is restored; a PUBLISH is never sent again, see
// cluster.Redis.publishMany).
const catchUpPeriod = 30

// catchUpBehindOnce reads the last seqs of the local users in one
// pipelined step per chunk and catches up the connections behind, at most
// 32 at a time.
func (n *Node) catchUpBehindOnce() error {
	if n.membersAgain.Swap(false) {
		if err := n.membershipsOnce(); err != nil {
			n.membersAgain.Store(true)
			return err
		}
	}
	byUser := map[string][]*conn{}
	for _, c := range n.hub.all() {
		byUser[c.user] = append(byUser[c.user], c)
	}
	users := make([]string, 0, len(byUser))
	for u := range byUser {
		users = append(users, u)
	}
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	defer wg.Wait()
	const chunk = 1000
	for len(users) > 0 && n.ctx.Err() == nil {
		part := users[:min(chunk, len(users))]
		users = users[len(part):]
		ctx, cancel := n.bctx(n.ctx)
		start := time.Now()
		lasts, err := n.backend.LastSeqs(ctx, part)
		n.observe("last_seqs", start, err)
		cancel()
		if err != nil {
			return err
		}
		for i, u := range part {
			for _, c := range byUser[u] {
				c.mu.Lock()
				behind := c.state == stOpen && c.sess.Pos(nil) < lasts[i]
				c.mu.Unlock()
				if !behind {
					continue
				}
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					c.resync(nil)
				}()
			}
		}
	}
	return n.roomsBehindOnce(sem, &wg)
}

// roomsBehindOnce is catchUpBehindOnce for the reliable rooms with local
// members: their seqs in one pipelined step per chunk, and the streams of
// the member connections behind them catch up from the room's history.
func (n *Node) roomsBehindOnce(sem chan struct{}, wg *sync.WaitGroup) error {
	rooms := n.hub.localRooms()
	const chunk = 1000
	for len(rooms) > 0 && n.ctx.Err() == nil {
		part := rooms[:min(chunk, len(rooms))]
		rooms = rooms[len(part):]
		ctx, cancel := n.bctx(n.ctx)
		start := time.Now()
		seqs, err := n.backend.RoomSeqs(ctx, part)
		n.observe("room_seqs", start, err)
		cancel()
		if err != nil {
			return err
		}
		for i, room := range part {
			if seqs[i] == 0 {
				continue
			}
			for _, c := range n.hub.roomConns(room) {
				c.mu.Lock()
				var s *stream
				if c.state == stOpen {
					// A member without a stream followed the room while it
					// was plain (every join path starts a stream for a
					// reliable room before the index has the member):
					// every seq is owed, from 1, as in deliverLocked.
					if rs := c.sess.Follow(room, 0); c.sess.Pos(rs) < seqs[i] {
						s = rs
					}
				}
				c.mu.Unlock()
				if s == nil {
					continue
				}
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					c.resync(s)
				}()
			}
		}
	}
	return nil
}

// roomLocks are striped locks by room name.
type roomLocks [64]sync.Mutex

// lock takes the locks of rooms' stripes, in stripe order (so that two
// callers never wait for each other in a cycle), and returns their unlock.
func (l *roomLocks) lock(rooms []string) (unlock func()) {
	var held [len(roomLocks{})]bool
	for _, r := range rooms {
		held[stripe(r, len(l))] = true
	}
	for i := range l {
		if held[i] {
			l[i].Lock()
		}
	}
	return func() {
		for i := range l {
			if held[i] {
				l[i].Unlock()
			}
		}
	}
}

// stripe is room's place among n stripes (FNV-1a).
func stripe(room string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(room); i++ {
		h = (h ^ uint32(room[i])) * 16777619
	}
	return int(h % uint32(n))
}

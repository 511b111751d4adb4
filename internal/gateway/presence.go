package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/rooms"
	"github.com/wsgate/wsgate/internal/upstream"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// Room presence (contract 19). A connection is in the presence of each
// room it is subscribed to whose namespace tracks presence: it enters
// when it subscribes (a join, or a connect of a member), leaves at its
// leave or close, and a dead node's entries are removed by the survivors
// within three heartbeat intervals (sweepDeadPresence).
//
// The node holding a connection makes its presence changes, one at a
// time and in order per connection (runPresence), each one atomic step of
// the backend (cluster.Presence), and tells the room's nodes of each
// change that happened (joined, left).
//
// With join_leave, each member is told of every other connection's
// joined before its left, and its view (the frames it got) ends equal to
// the room's presence. The node keeps each member's view (connPres.view:
// the conn ids it was told joined and not left) and tells it a change
// only when the change moves that view. A connection entering reads a
// snapshot of the room after its own add (one atomic read) and is told
// joined for each connection in it: the room as it found it. A change
// that arrives meanwhile waits (connPres.buf) and applies after the
// snapshot: one the snapshot already shows moves nothing. Joined and left
// of one entry come from the connection's node in that order (the bus
// keeps one sender's order), or left comes from a survivor three
// heartbeat intervals after the node's last word; so a joined that comes
// late is always followed by its left. When the bus lost messages (a
// loss notice), each member here reads the snapshot again and is told the
// difference (resyncPresence).
//
// The cost: a connection entering a join_leave room reads the whole
// presence once and gets one joined per connection present, the order of
// the fan-out of its own joined to every member; each member holds its
// view (a set of conn ids) while it is in the room.

// connPres is a connection's place in one room's presence; under c.mu.
type connPres struct {
	seq   int64             // the entry's presence seq
	ready bool              // the add (and snapshot) is done; until then changes wait in buf
	buf   []presEvent       // changes that arrived before ready
	view  map[string]string // join_leave: conn id -> user of those the member was told joined and not left

	// The entry's user and info when they are not the connection's (a
	// Pusher presence channel's channel_data: presAs), and whether the
	// Pusher subscription_succeeded went out (pusher_presence.go).
	user string
	info json.RawMessage
	told bool
}

// presAs is the user and info a connection's entry in one room's presence
// has instead of its own.
type presAs struct {
	user string
	info json.RawMessage
}

type presOp struct {
	room  string
	enter bool
	cp    *connPres // enter: the entry it adds
	user  string    // leave: the entry's user when it is not the connection's
	// flush is closed when the worker reaches this op: the changes queued
	// before it are made (presenceFlush).
	flush chan struct{}
}

// presEvent is a joined or left change of one entry.
type presEvent struct {
	room, user, conn string
	join             bool
	seq              int64 // the entry's seq
	at               int64 // left: the removal's seq
	// userConns is the user's connections in the room's presence after
	// the change: 1 after a joined is the user's arrival, 0 after a left
	// its departure (what user-level presence, such as Pusher's
	// member_added and member_removed, is built on).
	userConns int64
	info      json.RawMessage
	frames    *presFrames // set by tellPresence
	transient bool        // a joined whose left came in the same batch (markTransient)
}

// SetRooms replaces the namespaces (a reload of the rooms file). Every
// option takes effect at its next use: publish, echo, history bounds and
// reliable at the next publish, max_members, scope and join_proxy at the
// next join; presence and join_leave for connections that subscribe from
// now on (a connection already in a room's presence stays in it until its
// leave or close).
func (n *Node) SetRooms(s *rooms.Set) { n.rooms.Store(s) }

// ns returns the namespace of room.
func (n *Node) ns(room string) *rooms.Namespace { return n.rooms.Load().Match(room) }

func (n *Node) tracksPresence(room string) bool {
	return n.pres != nil && n.ns(room).TracksPresence()
}

// presenceEnterUser and presenceLeaveUser apply a user's membership
// change to its connections here.
func (n *Node) presenceEnterUser(user, room string) {
	if !n.tracksPresence(room) {
		return
	}
	for _, c := range n.hub.userConns(user) {
		n.presenceEnter(c, room)
	}
}

func (n *Node) presenceLeaveUser(user, room string) {
	if n.pres == nil {
		return
	}
	for _, c := range n.hub.userConns(user) {
		n.presenceLeave(c, room)
	}
}

// presenceEnterRooms enters an opened connection in the presence of its
// user's rooms (those joined meanwhile are entered by their join already).
func (n *Node) presenceEnterRooms(c *conn) {
	if n.pres == nil || n.rooms.Load() == nil {
		return
	}
	for _, room := range n.hub.userRooms(c.user) {
		if n.tracksPresence(room) {
			n.presenceEnter(c, room)
		}
	}
}

func (n *Node) presenceEnter(c *conn, room string) {
	c.mu.Lock()
	if c.state >= stClosing || (c.x != nil && (c.x.presClosed || c.x.pres[room] != nil)) {
		c.mu.Unlock()
		return
	}
	x := c.extra()
	if x.pres == nil {
		x.pres = map[string]*connPres{}
	}
	cp := &connPres{}
	if as, ok := x.presAs[room]; ok {
		cp.user, cp.info = as.user, as.info
		delete(x.presAs, room)
	}
	x.pres[room] = cp
	n.queuePresenceLocked(c, presOp{room: room, enter: true, cp: cp})
}

func (n *Node) presenceLeave(c *conn, room string) {
	c.mu.Lock()
	if c.x == nil || c.x.pres[room] == nil {
		c.mu.Unlock()
		return
	}
	user := c.x.pres[room].user
	delete(c.x.pres, room) // no change of the room reaches it from now on
	n.queuePresenceLocked(c, presOp{room: room, user: user})
}

// presenceClose takes an ended connection out of every room's presence.
func (n *Node) presenceClose(c *conn) {
	c.mu.Lock()
	if c.x == nil || len(c.x.pres) == 0 {
		if c.x != nil {
			c.x.presClosed = true
		}
		c.mu.Unlock()
		return
	}
	c.x.presClosed = true
	roomsIn := make([]string, 0, len(c.x.pres))
	for room := range c.x.pres {
		roomsIn = append(roomsIn, room)
	}
	slices.Sort(roomsIn)
	for _, room := range roomsIn {
		c.x.presq = append(c.x.presq, presOp{room: room, user: c.x.pres[room].user})
	}
	clear(c.x.pres)
	n.queuePresenceLocked(c, presOp{})
}

// queuePresenceLocked queues op (a zero op queues nothing) and starts the
// connection's presence worker if none runs; it unlocks c.mu.
func (n *Node) queuePresenceLocked(c *conn, op presOp) {
	x := c.x
	if op.room != "" || op.flush != nil {
		x.presq = append(x.presq, op)
	}
	start := !x.presRunning && len(x.presq) > 0
	x.presRunning = x.presRunning || start
	c.mu.Unlock()
	if start && !n.goFunc(func() { n.runPresence(c) }) {
		c.mu.Lock()
		x.presRunning = false
		c.mu.Unlock()
	}
}

// runPresence makes the connection's queued presence changes, in order.
func (n *Node) runPresence(c *conn) {
	for {
		c.mu.Lock()
		x := c.x
		if len(x.presq) == 0 {
			x.presRunning = false
			c.dropIdleExtraLocked()
			c.mu.Unlock()
			return
		}
		op := x.presq[0]
		x.presq = x.presq[1:]
		c.mu.Unlock()
		if op.flush != nil {
			close(op.flush)
			continue
		}
		e := cluster.PresenceEntry{User: cmp.Or(op.user, c.user), ConnID: c.connID(), Node: n.cfg.NodeID, Device: c.deviceName()}
		if op.enter && op.cp.user != "" {
			e.User, e.Info = op.cp.user, op.cp.info
			n.enterPresence(c, op, e)
		} else if op.enter {
			e.Info = c.presenceInfo()
			c.mu.Lock()
			if info, ok := c.x.presInfo[op.room]; ok {
				e.Info = info // the join proxy's
				delete(c.x.presInfo, op.room)
			}
			c.mu.Unlock()
			n.enterPresence(c, op, e)
		} else {
			n.leavePresence(op.room, e)
		}
	}
}

// presenceFlush waits (within ctx) until the presence changes queued for
// c so far are made: a join or leave frame is answered once the room's
// presence shows it.
func (n *Node) presenceFlush(ctx context.Context, c *conn) {
	c.mu.Lock()
	if c.x == nil || !c.x.presRunning && len(c.x.presq) == 0 {
		c.mu.Unlock()
		return
	}
	done := make(chan struct{})
	n.queuePresenceLocked(c, presOp{flush: done})
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (c *conn) presenceInfo() json.RawMessage {
	c.mu.Lock()
	var info json.RawMessage
	if c.x != nil {
		info = c.x.info
	}
	c.mu.Unlock()
	if info == nil {
		info = c.info() // takes c.mu
	}
	return info
}

// presenceTries bounds the attempts of one presence change while the
// backend does not answer (each within the node's backend timeout).
const presenceTries = 3

func (n *Node) presenceCall(what string, fn func(ctx context.Context) (cluster.PresenceChange, error)) (cluster.PresenceChange, error) {
	var err error
	for i := range presenceTries {
		if i > 0 {
			select {
			case <-n.ctx.Done():
				return cluster.PresenceChange{}, err
			case <-time.After(time.Duration(i) * 200 * time.Millisecond):
			}
		}
		ctx, cancel := n.bctx(context.WithoutCancel(n.ctx))
		start := time.Now()
		var ch cluster.PresenceChange
		ch, err = fn(ctx)
		cancel()
		n.observe("presence", start, err)
		if err == nil {
			return ch, nil
		}
	}
	n.log.Warn("room presence change failed", "change", what, "err", err)
	return cluster.PresenceChange{}, err
}

func (n *Node) enterPresence(c *conn, op presOp, e cluster.PresenceEntry) {
	ch, err := n.presenceCall("enter", func(ctx context.Context) (cluster.PresenceChange, error) {
		return n.pres.AddPresence(ctx, op.room, e)
	})
	var snap []cluster.PresenceEntry
	joinLeave := n.joinLeave(op.room)
	if err == nil && joinLeave {
		snap, err = n.presenceSnapshot(op.room)
		if err != nil {
			// Out of the presence again, rather than in it with members
			// told of it while it was told of nobody.
			n.leavePresence(op.room, e)
		}
	}
	c.mu.Lock()
	if err != nil {
		// The connection stays out of the room's presence; the leave
		// that comes later removes nothing.
		if c.x.pres[op.room] == op.cp {
			delete(c.x.pres, op.room)
		}
		c.mu.Unlock()
		return
	}
	cp := op.cp
	cp.seq = ch.Seq
	if joinLeave {
		cp.view = map[string]string{}
	}
	if c.x.pres[op.room] == cp {
		c.applySnapshotLocked(op.room, cp, snap)
	}
	c.mu.Unlock()
	if ch.Changed {
		n.announcePresence(presEvent{room: op.room, user: e.User, conn: e.ConnID, join: true, seq: ch.Seq, info: e.Info}, ch)
	}
}

func (n *Node) leavePresence(room string, e cluster.PresenceEntry) {
	ch, err := n.presenceCall("leave", func(ctx context.Context) (cluster.PresenceChange, error) {
		return n.pres.RemovePresence(ctx, room, e)
	})
	if err != nil {
		// The entry stays until this node's list is swept: at the next
		// heartbeat that reaches the backend (retryPresence).
		n.presMu.Lock()
		n.presRetry = append(n.presRetry, cluster.PresenceEntry{Room: room, User: e.User, ConnID: e.ConnID, Node: e.Node})
		n.presMu.Unlock()
		return
	}
	if ch.Changed {
		n.announcePresence(presEvent{room: room, user: e.User, conn: e.ConnID, seq: ch.Seq, at: ch.At}, ch)
	}
}

// presenceSnapshot reads a room's presence, retrying as presenceCall.
func (n *Node) presenceSnapshot(room string) ([]cluster.PresenceEntry, error) {
	var snap []cluster.PresenceEntry
	_, err := n.presenceCall("snapshot", func(ctx context.Context) (cluster.PresenceChange, error) {
		var err error
		_, snap, err = n.pres.PresenceSnapshot(ctx, room)
		return cluster.PresenceChange{}, err
	})
	return snap, err
}

// resyncPresence runs after the bus lost messages: the join_leave members
// here read their rooms' presence again and are told what they missed.
func (n *Node) resyncPresence() {
	if n.pres == nil || n.rooms.Load() == nil {
		return
	}
	type member struct {
		c  *conn
		cp *connPres
	}
	byRoom := map[string][]member{}
	for _, c := range n.hub.all() {
		c.mu.Lock()
		if c.x != nil {
			for room, cp := range c.x.pres {
				if cp.view != nil && cp.ready {
					cp.ready = false // changes wait for the snapshot
					byRoom[room] = append(byRoom[room], member{c, cp})
				}
			}
		}
		c.mu.Unlock()
	}
	for room, members := range byRoom {
		snap, err := n.presenceSnapshot(room)
		for _, m := range members {
			c, cp := m.c, m.cp
			c.mu.Lock()
			switch {
			case c.x == nil || c.x.pres[room] != cp:
				cp.ready = true // left meanwhile: nothing more to tell
			case !cp.ready:
				mine := snap
				if err != nil { // unchanged: keep the view
					mine = make([]cluster.PresenceEntry, 0, len(cp.view))
					for id, user := range cp.view {
						mine = append(mine, cluster.PresenceEntry{ConnID: id, User: user})
					}
				}
				c.applySnapshotLocked(room, cp, mine)
			}
			c.mu.Unlock()
		}
	}
}

// retryPresence removes the entries whose removal failed; called from the
// heartbeat once it reached the backend.
func (n *Node) retryPresence() {
	n.presMu.Lock()
	retry := n.presRetry
	n.presRetry = nil
	n.presMu.Unlock()
	for _, e := range retry {
		n.leavePresence(e.Room, e)
	}
}

// announcePresence tells the room's members of a change: those here at
// once, the other nodes holding members through the bus; and the
// business of a room becoming occupied or vacated.
func (n *Node) announcePresence(ev presEvent, ch cluster.PresenceChange) {
	ev.userConns = ch.UserConns
	n.pusherHooks.presence(ev, ch)
	if n.events != nil {
		switch {
		case ev.join && ch.Counts.Conns == 1:
			n.events.roomOccupancy("occupied", ev.room)
		case !ev.join && ch.Counts.Conns == 0:
			n.events.roomOccupancy("vacated", ev.room)
		}
	}
	if !n.joinLeave(ev.room) {
		return
	}
	n.deliverPresence(ev)
	ctx, cancel := n.bctx(context.WithoutCancel(n.ctx))
	defer cancel()
	start := time.Now()
	nodes, err := n.backend.RoomNodes(ctx, ev.room)
	n.observe("rooms", start, err)
	if err != nil {
		n.log.Warn("room members of other nodes not told of a presence change", "room", ev.room, "err", err)
		return
	}
	nodes = slices.DeleteFunc(nodes, func(id string) bool { return id == n.cfg.NodeID })
	if len(nodes) == 0 {
		return
	}
	env := encodeEnvelope(envelope{Kind: kindPresence, Room: ev.room, User: ev.user, Conn: ev.conn, Join: ev.join, Seq: ev.seq, At: ev.at, UserConns: ev.userConns}, ev.info)
	if err := n.backend.Send(ctx, nodes, env); err != nil {
		n.log.Warn("room members of other nodes not told of a presence change", "room", ev.room, "err", err)
	}
}

// presenceCoalesce is how long a room's changes wait on a node before they
// are told to its members: a connection that joins and leaves within it
// is told to no member that did not know of it already (coalesce), which
// keeps churn (reconnect storms, a flapping client) from costing every
// member two frames per blip. A member that knew of it (from the room's
// presence it read when it entered) is still told left.
const presenceCoalesce = 50 * time.Millisecond

// presBatches are the changes waiting to be told, by room.
type presBatches struct {
	mu      sync.Mutex
	byRoom  map[string][]presEvent
	deliver sync.Mutex // one batch told at a time: batches keep their order
}

// deliverPresence queues a change for the member connections here; the
// room's changes of the next presenceCoalesce are told together.
func (n *Node) deliverPresence(ev presEvent) {
	b := &n.presBatch
	b.mu.Lock()
	if b.byRoom == nil {
		b.byRoom = map[string][]presEvent{}
	}
	first := len(b.byRoom[ev.room]) == 0
	b.byRoom[ev.room] = append(b.byRoom[ev.room], ev)
	b.mu.Unlock()
	if first {
		time.AfterFunc(presenceCoalesce, func() { n.flushPresence(ev.room) })
	}
}

func (n *Node) flushPresence(room string) {
	b := &n.presBatch
	b.deliver.Lock()
	defer b.deliver.Unlock()
	b.mu.Lock()
	evs := b.byRoom[room]
	delete(b.byRoom, room)
	b.mu.Unlock()
	markTransient(evs)
	for _, ev := range evs {
		n.tellPresence(ev)
	}
}

// markTransient marks each joined that its left follows in evs: a member
// is not told it (nor, then, the left, unless it knew of the connection).
func markTransient(evs []presEvent) {
	joinedAt := map[string]int{}
	for i, ev := range evs {
		if ev.join {
			joinedAt[ev.conn] = i
		} else if j, ok := joinedAt[ev.conn]; ok {
			evs[j].transient = true
			delete(joinedAt, ev.conn)
		}
	}
}

// tellPresence gives a change to the member connections here; its frame
// is encoded once per format (plain WebSocket connections share it).
func (n *Node) tellPresence(ev presEvent) {
	ev.frames = new(presFrames)
	for _, c := range n.hub.roomConns(ev.room) {
		c.mu.Lock()
		if c.x != nil {
			if cp := c.x.pres[ev.room]; cp != nil {
				c.presenceEventLocked(cp, ev)
			}
		}
		c.mu.Unlock()
	}
}

// presFrames are one change's WebSocket frames, by format, encoded at the
// first member of each format.
type presFrames struct{ ws [2][]byte }

// presenceEventLocked tells the member connection of a change that moves
// its view (see the top of the file), or keeps it for later.
func (c *conn) presenceEventLocked(cp *connPres, ev presEvent) {
	if !cp.ready {
		ev.frames = nil // the shared frames belong to the fan-out under way
		cp.buf = append(cp.buf, ev)
		return
	}
	if cp.view == nil || ev.conn == c.connID() || ev.join && ev.transient {
		return
	}
	if c.tp == tpPusher {
		c.pusherPresenceLocked(cp, ev)
		return
	}
	_, seen := cp.view[ev.conn]
	switch {
	case ev.join && !seen:
		cp.view[ev.conn] = ev.user
		c.sharedPresenceFrameLocked(ev, protocol.TypeJoined, ev.info)
	case !ev.join && seen:
		delete(cp.view, ev.conn)
		c.sharedPresenceFrameLocked(ev, protocol.TypeLeft, nil)
	}
}

// sharedPresenceFrameLocked queues ev's frame, shared with the other
// plain WebSocket connections of the same format.
func (c *conn) sharedPresenceFrameLocked(ev presEvent, typ string, info json.RawMessage) {
	if ev.frames == nil || c.tp != tpWS || c.deflate {
		c.presenceFrameLocked(typ, ev.room, ev.user, ev.conn, info, false)
		return
	}
	i, op := 0, byte(wsframe.OpText)
	if c.format == protocol.MsgPack {
		i, op = 1, wsframe.OpBinary
	}
	if ev.frames.ws[i] == nil {
		b, err := protocol.EncodePresenceEvent(c.format, &protocol.PresenceEvent{Type: typ, Room: ev.room, User: ev.user, ConnID: ev.conn, Info: info})
		if err != nil {
			return
		}
		ev.frames.ws[i] = wsframe.Frame(op, b)
	}
	c.sendLocked(ev.frames.ws[i])
}

// applySnapshotLocked makes the member's view the snapshot, telling it
// the difference (in the snapshot's order of entry), then applies the
// changes that waited meanwhile.
func (c *conn) applySnapshotLocked(room string, cp *connPres, snap []cluster.PresenceEntry) {
	if cp.view != nil && c.tp == tpPusher {
		c.pusherSnapshotLocked(room, cp, snap)
	} else if cp.view != nil {
		self := c.connID()
		now := make(map[string]cluster.PresenceEntry, len(snap))
		for _, e := range snap {
			if e.ConnID != self {
				now[e.ConnID] = e
			}
		}
		var gone []string
		for id := range cp.view {
			if _, ok := now[id]; !ok {
				gone = append(gone, id)
			}
		}
		slices.Sort(gone)
		for _, id := range gone {
			c.presenceFrameLocked(protocol.TypeLeft, room, cp.view[id], id, nil, true)
			delete(cp.view, id)
		}
		slices.SortFunc(snap, func(a, b cluster.PresenceEntry) int { return cmp.Compare(a.Seq, b.Seq) })
		for _, e := range snap {
			if _, ok := cp.view[e.ConnID]; ok || e.ConnID == self {
				continue
			}
			cp.view[e.ConnID] = e.User
			c.presenceFrameLocked(protocol.TypeJoined, room, e.User, e.ConnID, e.Info, true)
		}
	}
	buf := cp.buf
	cp.buf = nil
	cp.ready = true
	for _, ev := range buf {
		c.presenceEventLocked(cp, ev)
	}
}

// presenceFrameLocked queues a joined or left frame. The frames of a
// snapshot (a connection entering a room, or reading it again after a bus
// loss: one per connection present) are queued whatever the send queue
// holds: a room larger than the queue must not make its new members slow
// consumers; a member that does not read is closed by the next frame
// under the usual bound.
func (c *conn) presenceFrameLocked(typ, room, user, connID string, info json.RawMessage, snapshot bool) {
	b, err := protocol.EncodePresenceEvent(c.format, &protocol.PresenceEvent{Type: typ, Room: room, User: user, ConnID: connID, Info: info})
	if err != nil {
		return
	}
	if !snapshot {
		c.sendLocked(c.dataFrame(b))
		return
	}
	if c.state >= stClosing {
		return
	}
	c.outq = append(c.outq, c.dataFrame(b))
	c.kickLocked()
}

// sweepDeadPresence removes the entries of nodes whose heartbeat stopped
// (and this node's own from an earlier process with the same id): each
// removal is made by one survivor, which tells the room's members.
func (n *Node) sweepDeadPresence(ctx context.Context, nodes []cluster.NodeInfo) {
	if n.pres == nil {
		return
	}
	ids, err := n.pres.PresenceNodes(ctx)
	if err != nil {
		return
	}
	alive := map[string]bool{}
	limit := n.staleAfter().Milliseconds()
	now := time.Now().UnixMilli()
	for _, x := range nodes {
		if now-x.Heartbeat <= limit {
			alive[x.ID] = true
		}
	}
	for _, id := range ids {
		self := id == n.cfg.NodeID
		if alive[id] && !self {
			continue
		}
		list, err := n.pres.NodePresence(ctx, id)
		if err != nil {
			return
		}
		swept := 0
		for _, e := range list {
			if self && strings.HasPrefix(e.ConnID, n.idPrefix) {
				continue // this process's own connection
			}
			ch, err := n.pres.RemovePresence(ctx, e.Room, e)
			if err != nil {
				return
			}
			if ch.Changed {
				swept++
				n.announcePresence(presEvent{room: e.Room, user: e.User, conn: e.ConnID, seq: ch.Seq, at: ch.At}, ch)
			}
		}
		if !self {
			if err := n.pres.DropNodePresence(ctx, id); err != nil {
				return
			}
		}
		if swept > 0 {
			n.log.Info("removed a dead node's connections from room presence", "dead_node", id, "entries", swept)
		}
	}
}

// checkOwnPresence runs at each heartbeat: when this node's list of
// entries is gone, the entries of its connections are written again.
// After a data loss of the backend nobody was told anything: each entry
// gets its seq back, and the room's seq is raised above every seq this
// node's connections know, so that later changes order after them. After
// survivors took this node for dead during a pause, the members were told
// "left": each entry is a new one, told "joined".
func (n *Node) checkOwnPresence(ctx context.Context, lost bool) {
	if n.pres == nil {
		return
	}
	type held struct {
		c    *conn
		room string
		seq  int64
		user string // the entry's, when not the connection's (presAs)
		info json.RawMessage
	}
	var mine []held
	floor := map[string]int64{}
	for _, c := range n.hub.all() {
		c.mu.Lock()
		if c.x != nil {
			for room, cp := range c.x.pres {
				if cp.ready {
					mine = append(mine, held{c, room, cp.seq, cp.user, cp.info})
					floor[room] = max(floor[room], cp.seq)
				}
			}
		}
		c.mu.Unlock()
	}
	if len(mine) == 0 {
		return
	}
	if !lost {
		ids, err := n.pres.PresenceNodes(ctx)
		if err != nil || slices.Contains(ids, n.cfg.NodeID) {
			return
		}
	}
	rebuilt := 0
	for _, h := range mine {
		e := cluster.PresenceEntry{User: h.c.user, ConnID: h.c.connID(), Node: n.cfg.NodeID, Device: h.c.deviceName(), Info: h.c.presenceInfo()}
		if h.user != "" {
			e.User, e.Info = h.user, h.info
		}
		if lost {
			e.Seq, e.Floor = h.seq, floor[h.room]
		}
		ch, err := n.pres.AddPresence(ctx, h.room, e)
		if err != nil {
			return
		}
		if ch.Changed {
			rebuilt++
			if !lost {
				n.announcePresence(presEvent{room: h.room, user: e.User, conn: e.ConnID, join: true, seq: ch.Seq, info: e.Info}, ch)
			}
		}
	}
	if rebuilt > 0 {
		n.log.Warn("room presence of this node's connections written again", "entries", rebuilt, "backend_lost_data", lost)
	}
}

// roomOccupancy reports a room's presence becoming occupied or vacated.
func (e *events) roomOccupancy(typ, room string) {
	if e == nil || !e.on[typ] {
		return
	}
	e.emit(upstream.Record{Type: typ, Room: room}, nil)
}

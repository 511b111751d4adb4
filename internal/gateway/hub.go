package gateway

import (
	"slices"
	"sync"
)

// hub is the node's local index: its connections, grouped by user, and
// the rooms those users are members of. Room membership is cluster state
// (the backend); the hub keeps the part that concerns users connected
// here, loaded when a user's first connection arrives and updated by
// membership events.
type hub struct {
	node *Node
	mu   sync.RWMutex
	n    int // connections
	byTP [len(tpNames)]int
	// streams indexes the HTTP stream connections by their id's counter,
	// for the frames posted to them (connpost.go); WebSocket connections
	// are not in it.
	streams map[uint64]*conn
	list    []*conn // every connection (conn.hubIdx is its place): all() is a copy, not a walk of users
	users   map[string]*localUser
	rooms   map[string]*localRoom
	// connRooms are the rooms each connection joined by itself (a
	// namespace with scope: connection), only for connections that did.
	connRooms map[*conn][]string
	// changing counts, per user, the membership changes this node has in
	// flight (changeMembership): the backend may have them before the
	// index does.
	changing map[string]int
}

type localUser struct {
	id    string
	conns []*conn
	rooms []string // the user's rooms (the room's own name string, shared)
	gen   uint64   // moves at every change of rooms (memberSnap)
}

// localRoom is a room with a member connected here: users (all their
// connections) and connections of their own (scope: connection).
type localRoom struct {
	name    string
	members map[*localUser]struct{}
	conns   map[*conn]struct{}
}

func (m *localRoom) empty() bool { return len(m.members) == 0 && len(m.conns) == 0 }

// joinConn adds room to the connection alone; added reports whether the
// room gained its first local member, joined whether c was not in it.
func (h *hub) joinConn(c *conn, room string) (added, joined bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if slices.Contains(h.connRooms[c], room) {
		return false, false
	}
	m := h.rooms[room]
	if m == nil {
		m = &localRoom{name: room, members: map[*localUser]struct{}{}}
		h.rooms[room] = m
	}
	if m.conns == nil {
		m.conns = map[*conn]struct{}{}
	}
	added = m.empty()
	m.conns[c] = struct{}{}
	h.connRooms[c] = append(h.connRooms[c], m.name)
	return added, true
}

// leaveConn removes a room the connection joined alone; emptied reports
// whether the room lost its last local member, left whether c was in it.
func (h *hub) leaveConn(c *conn, room string) (emptied, left bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leaveConnLocked(c, room)
}

func (h *hub) leaveConnLocked(c *conn, room string) (emptied, left bool) {
	rs := h.connRooms[c]
	i := slices.Index(rs, room)
	if i < 0 {
		return false, false
	}
	if rs = slices.Delete(rs, i, i+1); len(rs) == 0 {
		delete(h.connRooms, c)
	} else {
		h.connRooms[c] = rs
	}
	m := h.rooms[room]
	if m == nil {
		return false, true
	}
	delete(m.conns, c)
	if m.empty() {
		delete(h.rooms, room)
		return true, true
	}
	return false, true
}

// connMember reports whether c joined room by itself.
func (h *hub) connMember(c *conn, room string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return slices.Contains(h.connRooms[c], room)
}

// connRoomCount is how many rooms c joined by itself.
func (h *hub) connRoomCount(c *conn) int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.connRooms[c])
}

func newHub(n *Node) *hub {
	return &hub{node: n, users: map[string]*localUser{}, rooms: map[string]*localRoom{}, changing: map[string]int{}, streams: map[uint64]*conn{},
		connRooms: map[*conn][]string{}}
}

// add indexes c; first is true when it is its user's first local connection.
func (h *hub) add(c *conn) (first bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	h.byTP[c.tp]++
	if isHTTPStream(c.tp) {
		h.streams[c.idSeq] = c
	}
	u := h.users[c.user]
	if u == nil {
		u = &localUser{id: c.user}
		h.users[c.user] = u
		first = true
	}
	u.conns = append(u.conns, c)
	c.hubIdx = int32(len(h.list))
	h.list = append(h.list, c)
	h.node.metrics.Connections.WithLabelValues(tpNames[c.tp]).Set(float64(h.byTP[c.tp]))
	return first
}

// remove forgets c and returns the rooms that no longer have a local
// member connection.
func (h *hub) remove(c *conn) (emptied []string, found bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	u := h.users[c.user]
	if u == nil {
		return nil, false
	}
	i := slices.Index(u.conns, c)
	if i < 0 {
		return nil, false
	}
	u.conns = slices.Delete(u.conns, i, i+1)
	last := len(h.list) - 1
	h.list[c.hubIdx] = h.list[last]
	h.list[c.hubIdx].hubIdx = c.hubIdx
	h.list[last] = nil
	h.list = h.list[:last]
	h.n--
	h.byTP[c.tp]--
	if isHTTPStream(c.tp) {
		delete(h.streams, c.idSeq)
	}
	h.node.metrics.Connections.WithLabelValues(tpNames[c.tp]).Set(float64(h.byTP[c.tp]))
	for _, room := range slices.Clone(h.connRooms[c]) {
		if gone, _ := h.leaveConnLocked(c, room); gone {
			emptied = append(emptied, room)
		}
	}
	if len(u.conns) > 0 {
		return emptied, true
	}
	delete(h.users, c.user)
	for _, room := range slices.Clone(u.rooms) {
		if h.leaveLocked(u, room) {
			emptied = append(emptied, room)
		}
	}
	return emptied, true
}

// setRooms records the rooms of a locally connected user and returns the
// rooms that gained their first local member.
func (h *hub) setRooms(user string, rooms []string) (added []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	u := h.users[user]
	if u == nil {
		return nil
	}
	u.gen++
	for _, r := range rooms {
		if h.joinLocked(u, r) {
			added = append(added, r)
		}
	}
	return added
}

// join adds room to a locally connected user; added reports whether the
// room gained its first local member. present is false when the user has
// no connection here.
func (h *hub) join(user, room string) (added, present bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	u := h.users[user]
	if u == nil {
		return false, false
	}
	u.gen++
	return h.joinLocked(u, room), true
}

// A user's rooms are a slice, smaller than a map for the few rooms most
// users are in; a user in very many rooms pays a linear search per join
// and leave (not per message: fan-out walks the room's members).
func (h *hub) joinLocked(u *localUser, room string) bool {
	if slices.Contains(u.rooms, room) {
		return false
	}
	m := h.rooms[room]
	if m == nil {
		m = &localRoom{name: room, members: map[*localUser]struct{}{}}
		h.rooms[room] = m
	}
	added := m.empty()
	u.rooms = append(u.rooms, m.name)
	m.members[u] = struct{}{}
	return added
}

// leave removes room from a local user; emptied reports whether the room
// lost its last local member.
func (h *hub) leave(user, room string) (emptied bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	u := h.users[user]
	if u == nil {
		return false
	}
	u.gen++
	return h.leaveLocked(u, room)
}

func (h *hub) leaveLocked(u *localUser, room string) bool {
	i := slices.Index(u.rooms, room)
	if i < 0 {
		return false
	}
	u.rooms = slices.Delete(u.rooms, i, i+1)
	if len(u.rooms) == 0 {
		u.rooms = nil
	}
	m := h.rooms[room]
	if m == nil {
		return false
	}
	delete(m.members, u)
	if m.empty() {
		delete(h.rooms, room)
		return true
	}
	return false
}

// member reports whether the local user is a member of room. Called
// under a connection's lock: the hub never takes one under its own.
func (h *hub) member(user, room string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	u := h.users[user]
	return u != nil && slices.Contains(u.rooms, room)
}

func (h *hub) userConns(user string) []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	u := h.users[user]
	if u == nil {
		return nil
	}
	return append([]*conn(nil), u.conns...)
}

// userRooms lists the rooms of a locally connected user.
func (h *hub) userRooms(user string) []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if u := h.users[user]; u != nil {
		return slices.Clone(u.rooms)
	}
	return nil
}

// connRoomList lists the rooms c gets: its user's and its own, sorted.
func (h *hub) connRoomList(c *conn) []string {
	h.mu.RLock()
	var rooms []string
	if u := h.users[c.user]; u != nil {
		rooms = append(rooms, u.rooms...)
	}
	rooms = append(rooms, h.connRooms[c]...)
	h.mu.RUnlock()
	slices.Sort(rooms)
	return append([]string{}, slices.Compact(rooms)...)
}

func (h *hub) roomConns(room string) []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var out []*conn
	if m := h.rooms[room]; m != nil {
		for u := range m.members {
			out = append(out, u.conns...)
		}
		for c := range m.conns {
			if _, member := m.members[h.users[c.user]]; !member {
				out = append(out, c)
			}
		}
	}
	return out
}

func (h *hub) all() []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return slices.Clone(h.list)
}

func (h *hub) count() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.n
}

func (h *hub) localRooms() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]string, 0, len(h.rooms))
	for r := range h.rooms {
		out = append(out, r)
	}
	return out
}

// filterRooms keeps the rooms that have (withMembers) or do not have a
// local member connection.
func (h *hub) filterRooms(rooms []string, withMembers bool) []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var out []string
	for _, r := range rooms {
		if _, ok := h.rooms[r]; ok == withMembers {
			out = append(out, r)
		}
	}
	return out
}

// beginChange marks a membership change of user in flight until the
// returned end is called.
func (h *hub) beginChange(user string) (end func()) {
	h.mu.Lock()
	h.changing[user]++
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.changing[user]--; h.changing[user] == 0 {
			delete(h.changing, user)
		}
		if u := h.users[user]; u != nil {
			u.gen++
		}
	}
}

// memberSnap is a local user's rooms as the index had them.
type memberSnap struct {
	user  string
	u     *localUser
	gen   uint64
	rooms []string
}

// memberSnaps lists the local users and their rooms, but for those with a
// membership change in flight.
func (h *hub) memberSnaps() []memberSnap {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]memberSnap, 0, len(h.users))
	for id, u := range h.users {
		if h.changing[id] == 0 {
			out = append(out, memberSnap{user: id, u: u, gen: u.gen, rooms: slices.Clone(u.rooms)})
		}
	}
	return out
}

// unchanged reports whether the user's rooms are still as in s, with no
// change in flight.
func (h *hub) unchanged(s memberSnap) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.users[s.user] == s.u && s.u.gen == s.gen && h.changing[s.user] == 0
}

// joinIfUnchanged adds room to the user of s if its rooms are still as in
// s (see unchanged); added as for join.
func (h *hub) joinIfUnchanged(s memberSnap, room string) (added, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.users[s.user] != s.u || s.u.gen != s.gen || h.changing[s.user] != 0 {
		return false, false
	}
	return h.joinLocked(s.u, room), true
}

// stream returns the HTTP stream connection whose id counter is seq.
func (h *hub) stream(seq uint64) *conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.streams[seq]
}

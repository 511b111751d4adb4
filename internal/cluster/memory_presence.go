package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

var _ Presence = (*Memory)(nil)

// memPresence is Memory's room presence, under Memory's lock.
type memPresence struct {
	rooms map[string]*memRoomPresence
	seqs  map[string]int64               // room -> presence seq
	nodes map[string]map[string]struct{} // node -> nodePresenceMember
}

type memRoomPresence struct {
	conns map[string]PresenceEntry // conn id -> entry
	users map[string]int64
}

func (m *Memory) presence() *memPresence {
	if m.pres == nil {
		m.pres = &memPresence{rooms: map[string]*memRoomPresence{}, seqs: map[string]int64{}, nodes: map[string]map[string]struct{}{}}
	}
	return m.pres
}

func (p *memPresence) counts(r *memRoomPresence) PresenceCounts {
	if r == nil {
		return PresenceCounts{}
	}
	return PresenceCounts{Users: int64(len(r.users)), Conns: int64(len(r.conns))}
}

// AddPresence implements Presence.
func (m *Memory) AddPresence(ctx context.Context, room string, e PresenceEntry) (PresenceChange, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return PresenceChange{}, errClosed
	}
	p := m.presence()
	list := p.nodes[e.Node]
	if list == nil {
		list = map[string]struct{}{}
		p.nodes[e.Node] = list
	}
	list[nodePresenceMember(room, e.User, e.ConnID)] = struct{}{}
	r := p.rooms[room]
	if r == nil {
		r = &memRoomPresence{conns: map[string]PresenceEntry{}, users: map[string]int64{}}
		p.rooms[room] = r
	}
	if cur, ok := r.conns[e.ConnID]; ok {
		return PresenceChange{Seq: cur.Seq, Counts: p.counts(r), UserConns: r.users[cur.User]}, nil
	}
	p.seqs[room] = max(p.seqs[room], e.Floor)
	if e.Seq > 0 {
		p.seqs[room] = max(p.seqs[room], e.Seq)
	} else {
		p.seqs[room]++
		e.Seq = p.seqs[room]
	}
	e.Room = room
	r.conns[e.ConnID] = e
	r.users[e.User]++
	return PresenceChange{Changed: true, Seq: e.Seq, Counts: p.counts(r), UserConns: r.users[e.User]}, nil
}

// RemovePresence implements Presence.
func (m *Memory) RemovePresence(ctx context.Context, room string, e PresenceEntry) (PresenceChange, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return PresenceChange{}, errClosed
	}
	p := m.presence()
	r := p.rooms[room]
	cur, ok := PresenceEntry{}, false
	if r != nil {
		cur, ok = r.conns[e.ConnID]
	}
	if !ok {
		return PresenceChange{Counts: p.counts(r), UserConns: userConns(r, e.User)}, nil
	}
	delete(r.conns, e.ConnID)
	if r.users[cur.User]--; r.users[cur.User] <= 0 {
		delete(r.users, cur.User)
	}
	p.seqs[room]++
	ch := PresenceChange{Changed: true, Seq: cur.Seq, At: p.seqs[room], Counts: p.counts(r), UserConns: r.users[cur.User]}
	if len(r.conns) == 0 {
		delete(p.rooms, room)
	}
	if list := p.nodes[cur.Node]; list != nil {
		delete(list, nodePresenceMember(room, cur.User, cur.ConnID))
	}
	return ch, nil
}

func userConns(r *memRoomPresence, user string) int64 {
	if r == nil {
		return 0
	}
	return r.users[user]
}

// RoomPresence implements Presence: the cursor is the offset in the
// entries sorted by conn id.
func (m *Memory) RoomPresence(ctx context.Context, room, cursor string, limit int) (PresenceCounts, []PresenceEntry, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return PresenceCounts{}, nil, "", errClosed
	}
	p := m.presence()
	r := p.rooms[room]
	counts := p.counts(r)
	if limit <= 0 || r == nil {
		return counts, nil, "", nil
	}
	ids := make([]string, 0, len(r.conns))
	for id := range r.conns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	from := 0
	if cursor != "" {
		var err error
		if from, err = strconv.Atoi(cursor); err != nil || from < 0 {
			return PresenceCounts{}, nil, "", fmt.Errorf("%w: bad cursor %q", ErrBadCursor, cursor)
		}
	}
	from = min(from, len(ids))
	to := min(from+limit, len(ids))
	out := make([]PresenceEntry, 0, to-from)
	for _, id := range ids[from:to] {
		out = append(out, r.conns[id])
	}
	next := ""
	if to < len(ids) {
		next = strconv.Itoa(to)
	}
	return counts, out, next, nil
}

// PresenceSnapshot implements Presence.
func (m *Memory) PresenceSnapshot(ctx context.Context, room string) (int64, []PresenceEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, nil, errClosed
	}
	p := m.presence()
	var out []PresenceEntry
	if r := p.rooms[room]; r != nil {
		for _, e := range r.conns {
			out = append(out, e)
		}
	}
	return p.seqs[room], out, nil
}

// NodePresence implements Presence.
func (m *Memory) NodePresence(ctx context.Context, node string) ([]PresenceEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []PresenceEntry
	for member := range m.presence().nodes[node] {
		e := parseNodePresence(member)
		e.Node = node
		out = append(out, e)
	}
	return out, nil
}

func parseNodePresence(member string) PresenceEntry {
	room, rest, _ := strings.Cut(member, "\n")
	user, conn, _ := strings.Cut(rest, "\n")
	return PresenceEntry{Room: room, User: user, ConnID: conn}
}

// PresenceRooms implements Presence.
func (m *Memory) PresenceRooms(ctx context.Context, prefix, cursor string, limit int) ([]RoomCounts, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.presence()
	var names []string
	for room := range p.rooms {
		if strings.HasPrefix(room, prefix) && room > cursor {
			names = append(names, room)
		}
	}
	slices.Sort(names)
	if len(names) > limit {
		names = names[:limit]
	}
	out := make([]RoomCounts, 0, len(names))
	for _, room := range names {
		out = append(out, RoomCounts{Room: room, PresenceCounts: p.counts(p.rooms[room])})
	}
	return out, nil
}

// PresenceNodes implements Presence.
func (m *Memory) PresenceNodes(ctx context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id := range m.presence().nodes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out, nil
}

// DropNodePresence implements Presence.
func (m *Memory) DropNodePresence(ctx context.Context, node string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.presence().nodes, node)
	return nil
}

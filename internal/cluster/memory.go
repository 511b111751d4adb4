package cluster

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

var _ Backend = (*Memory)(nil)

// errClosed is returned by a backend's methods after Close.
var errClosed = errors.New("cluster: backend closed")

// Memory is the embedded single-node Backend: every piece of state lives in
// maps under one mutex, so each method is atomic. It is what `wsgate dev` and
// a gateway without WSGATE_REDIS_URL use; it is not shared between processes.
//
// Expiry is by timestamp and lazy: an expired route or room interest is
// invisible to readers and removed when next touched. Node records do not
// expire (there is one node); inboxes and seqs live as long as the process. Bus messages are
// delivered asynchronously (as with Redis): each subscription has its own
// goroutine and an unbounded FIFO queue, so Send never waits for a handler.
//
// A Memory is safe for concurrent use. Its zero value is not usable: call
// NewMemory.
type Memory struct {
	now func() time.Time

	mu        sync.Mutex
	closed    bool
	nodes     map[string]NodeInfo
	seen      map[string]bool                 // nodes that registered through this backend
	routes    map[string]map[string]memRoute  // user -> conn id -> route
	members   map[string]map[string]struct{}  // room -> users
	rooms     map[string]map[string]struct{}  // user -> rooms
	joinSeqs  map[string]map[string]int64     // room -> user -> room seq at the join
	interest  map[string]map[string]time.Time // room -> node -> expiry
	declared  map[string]map[string]struct{}  // node -> rooms it declared interest in
	inboxes   map[string]*memInbox
	histories map[string]*memInbox            // room -> history of a reliable room (acked stays 0)
	subs      map[string]map[*memSub]struct{} // node -> live subscriptions
	keys      map[string]memKey               // publisher idempotency keys
	keyClaims int

	pres     *memPresence // room presence (memory_presence.go)
	lifeOnce sync.Once
	lc       *memLife // lifecycle state (memory_lifecycle.go)

	done chan struct{} // closed by Close; stops every subscription
	wg   sync.WaitGroup
}

type memRoute struct {
	node        string
	device      string
	connectedAt int64
	expires     time.Time
	info        string
}

// memInbox is one user's inbox. It is never deleted, so seqs are never
// reused for the life of the process.
type memInbox struct {
	seq, acked int64                 // acked: acknowledged by every device
	msgs       []memMessage          // ascending seq, contiguous
	keys       map[string]memSeqKey  // idempotency key -> the seq it stored
	devices    map[string]*memDevice // at most MaxDevices
}

// memDevice is one device's acknowledgement and when it was last seen.
type memDevice struct {
	acked int64
	seen  time.Time
}

type memSeqKey struct {
	seq     int64
	expires time.Time
}

type memMessage struct {
	seq     int64
	expires time.Time // zero: never
	payload []byte
}

// NewMemory returns an empty in-process backend.
func NewMemory() *Memory {
	return &Memory{
		now:       time.Now,
		nodes:     map[string]NodeInfo{},
		seen:      map[string]bool{},
		routes:    map[string]map[string]memRoute{},
		members:   map[string]map[string]struct{}{},
		rooms:     map[string]map[string]struct{}{},
		interest:  map[string]map[string]time.Time{},
		declared:  map[string]map[string]struct{}{},
		inboxes:   map[string]*memInbox{},
		histories: map[string]*memInbox{},
		subs:      map[string]map[*memSub]struct{}{},
		done:      make(chan struct{}),
	}
}

// lock takes the mutex unless the backend is closed or ctx is done.
func (m *Memory) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errClosed
	}
	return nil
}

// RegisterNode implements Backend. A zero Heartbeat is set to now.
func (m *Memory) RegisterNode(ctx context.Context, n NodeInfo) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.putNode(n)
	return nil
}

// Heartbeat implements Backend: lost is true when the node registered
// through this backend before and its record is gone (RemoveNode).
func (m *Memory) Heartbeat(ctx context.Context, n NodeInfo) (bool, error) {
	if err := m.lock(ctx); err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	_, exists := m.nodes[n.ID]
	lost := !exists && m.seen[n.ID]
	m.putNode(n)
	return lost, nil
}

func (m *Memory) putNode(n NodeInfo) {
	if n.Heartbeat == 0 {
		n.Heartbeat = m.now().UnixMilli()
	}
	m.nodes[n.ID] = n
	m.seen[n.ID] = true
}

// RemoveNode implements Backend.
func (m *Memory) RemoveNode(ctx context.Context, id string) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	delete(m.nodes, id)
	for room := range m.declared[id] {
		m.dropInterest(room, id)
	}
	delete(m.declared, id)
	return nil
}

// Nodes implements Backend, in no particular order.
func (m *Memory) Nodes(ctx context.Context) ([]NodeInfo, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := make([]NodeInfo, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	return out, nil
}

// AddRoutes implements Backend.
func (m *Memory) AddRoutes(ctx context.Context, routes []Route, ttl time.Duration) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.addRoutesLocked(routes, ttl)
	return nil
}

func (m *Memory) addRoutesLocked(routes []Route, ttl time.Duration) {
	expires := m.now().Add(ttl)
	for _, r := range routes {
		conns := m.routes[r.User]
		if conns == nil {
			conns = map[string]memRoute{}
			m.routes[r.User] = conns
		}
		conns[r.ConnID] = memRoute{node: r.Node, connectedAt: r.ConnectedAt, expires: expires, device: deviceOf(r.Device), info: r.Info}
	}
}

// RemoveRoute implements Backend.
func (m *Memory) RemoveRoute(ctx context.Context, user, connID string) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if conns := m.routes[user]; conns != nil {
		delete(conns, connID)
		if len(conns) == 0 {
			delete(m.routes, user)
		}
	}
	return nil
}

// UserRoutes implements Backend, sorted by ConnectedAt then ConnID.
func (m *Memory) UserRoutes(ctx context.Context, user string) ([]Route, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return m.liveRoutes(user), nil
}

func (m *Memory) liveRoutes(user string) []Route {
	conns := m.routes[user]
	out := make([]Route, 0, len(conns))
	now := m.now()
	for id, r := range conns {
		if !now.Before(r.expires) {
			delete(conns, id)
			continue
		}
		out = append(out, Route{User: user, ConnID: id, Node: r.node, ConnectedAt: r.connectedAt, Device: r.device, Info: r.info})
	}
	if len(conns) == 0 {
		delete(m.routes, user)
	}
	sortRoutes(out)
	return out
}

// JoinRoom implements Backend.
func (m *Memory) JoinRoom(ctx context.Context, room, user string, maxRooms int) (Joined, error) {
	if err := m.lock(ctx); err != nil {
		return Joined{}, err
	}
	defer m.mu.Unlock()
	if rooms := m.rooms[user]; maxRooms > 0 && len(rooms) >= maxRooms {
		if _, ok := rooms[room]; !ok {
			return Joined{}, ErrRoomLimit
		}
	}
	addToSet(m.members, room, user)
	addToSet(m.rooms, user, room)
	out := Joined{Routes: m.liveRoutes(user)}
	if h := m.histories[room]; h != nil {
		out.RoomSeq = h.seq
	}
	if m.joinSeqs == nil {
		m.joinSeqs = map[string]map[string]int64{}
	}
	if m.joinSeqs[room] == nil {
		m.joinSeqs[room] = map[string]int64{}
	}
	if _, ok := m.joinSeqs[room][user]; !ok {
		m.joinSeqs[room][user] = out.RoomSeq
	}
	return out, nil
}

// LeaveRoom implements Backend.
func (m *Memory) LeaveRoom(ctx context.Context, room, user string) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	removeFromSet(m.members, room, user)
	removeFromSet(m.rooms, user, room)
	if js := m.joinSeqs[room]; js != nil {
		delete(js, user)
		if len(js) == 0 {
			delete(m.joinSeqs, room)
		}
	}
	return nil
}

// JoinSeqs implements Backend.
func (m *Memory) JoinSeqs(ctx context.Context, user string, rooms []string) ([]int64, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := make([]int64, len(rooms))
	for i, r := range rooms {
		seq, ok := m.joinSeqs[r][user]
		if _, member := m.members[r][user]; !ok || !member {
			seq = -1
		}
		out[i] = seq
	}
	return out, nil
}

// RoomMembers implements Backend, sorted.
func (m *Memory) RoomMembers(ctx context.Context, room string) ([]string, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return sortedKeys(m.members[room]), nil
}

// UserRooms implements Backend, sorted.
func (m *Memory) UserRooms(ctx context.Context, user string) ([]string, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return sortedKeys(m.rooms[user]), nil
}

// SetRoomInterest implements Backend.
func (m *Memory) SetRoomInterest(ctx context.Context, node string, rooms []string, ttl time.Duration) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	expires := m.now().Add(ttl)
	for _, room := range rooms {
		nodes := m.interest[room]
		if nodes == nil {
			nodes = map[string]time.Time{}
			m.interest[room] = nodes
		}
		nodes[node] = expires
		addToSet(m.declared, node, room)
	}
	return nil
}

// DropRoomInterest implements Backend.
func (m *Memory) DropRoomInterest(ctx context.Context, node string, rooms []string) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	for _, room := range rooms {
		m.dropInterest(room, node)
		removeFromSet(m.declared, node, room)
	}
	return nil
}

func (m *Memory) dropInterest(room, node string) {
	if nodes := m.interest[room]; nodes != nil {
		delete(nodes, node)
		if len(nodes) == 0 {
			delete(m.interest, room)
		}
	}
}

// RoomNodes implements Backend, sorted.
func (m *Memory) RoomNodes(ctx context.Context, room string) ([]string, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return m.roomNodesLocked(room), nil
}

func (m *Memory) roomNodesLocked(room string) []string {
	nodes := m.interest[room]
	out := make([]string, 0, len(nodes))
	now := m.now()
	for node, exp := range nodes {
		if !now.Before(exp) {
			delete(nodes, node)
			continue
		}
		out = append(out, node)
	}
	if len(nodes) == 0 {
		delete(m.interest, room)
	}
	slices.Sort(out)
	return out
}

// AppendInbox implements Backend. Limit <= 0 keeps any number of messages
// and TTL <= 0 keeps them until acknowledged.
func (m *Memory) AppendInbox(ctx context.Context, user string, payload []byte, opt InboxOptions) (AppendResult, error) {
	if err := m.lock(ctx); err != nil {
		return AppendResult{}, err
	}
	defer m.mu.Unlock()
	return m.appendLocked(InboxAppend{User: user, Payload: payload}, opt), nil
}

func (m *Memory) appendLocked(a InboxAppend, opt InboxOptions) AppendResult {
	now := m.now()
	in := m.inboxes[a.User]
	if in == nil {
		in = &memInbox{}
		m.inboxes[a.User] = in
	}
	if a.Key != "" {
		if k, ok := in.keys[a.Key]; ok && now.Before(k.expires) {
			return AppendResult{Seq: k.seq, Routes: m.liveRoutes(a.User), Existing: true}
		}
	}
	in.seq++
	msg := memMessage{seq: in.seq, payload: slices.Clone(a.Payload)}
	if opt.TTL > 0 {
		msg.expires = now.Add(opt.TTL)
	}
	in.msgs = append(in.msgs, msg)
	in.trim(now, opt.Limit)
	if a.Key != "" {
		in.rememberKey(a.Key, in.seq, now)
	}
	return AppendResult{Seq: in.seq, Routes: m.liveRoutes(a.User)}
}

// rememberKey binds an idempotency key to seq for KeyLifetime, and drops
// the expired keys now and then.
func (in *memInbox) rememberKey(key string, seq int64, now time.Time) {
	if in.keys == nil {
		in.keys = map[string]memSeqKey{}
	}
	if len(in.keys)%64 == 63 {
		for k, v := range in.keys {
			if !now.Before(v.expires) {
				delete(in.keys, k)
			}
		}
	}
	in.keys[key] = memSeqKey{seq: seq, expires: now.Add(KeyLifetime)}
}

// trim drops expired messages, oldest first (a message leaves once it and
// every older one expired, so what is kept stays contiguous; with one TTL
// for all messages that is exactly its own expiry), then the oldest beyond
// limit.
func (in *memInbox) trim(now time.Time, limit int) {
	drop := 0
	for drop < len(in.msgs) && !in.msgs[drop].expires.IsZero() && !now.Before(in.msgs[drop].expires) {
		drop++
	}
	if limit > 0 && len(in.msgs)-drop > limit {
		drop = len(in.msgs) - limit
	}
	if drop > 0 {
		in.msgs = slices.Delete(in.msgs, 0, drop)
	}
}

// ReadInbox implements Backend.
func (m *Memory) ReadInbox(ctx context.Context, user string, since int64, opt InboxOptions) (InboxRead, error) {
	if err := m.lock(ctx); err != nil {
		return InboxRead{}, err
	}
	defer m.mu.Unlock()
	in := m.inboxes[user]
	if in == nil {
		return InboxRead{}, nil
	}
	return in.read(m.now(), max(since, 0), in.acked, opt), nil
}

// read trims, then reads the messages after since; acked is the reader's
// acknowledgement (the gap is counted from it).
func (in *memInbox) read(now time.Time, since, acked int64, opt InboxOptions) InboxRead {
	in.trim(now, opt.Limit)
	out := InboxRead{LastSeq: in.seq, Acked: acked}
	var first int64
	if len(in.msgs) > 0 {
		first = in.msgs[0].seq
	}
	out.GapFrom, out.GapTo = inboxGap(since, acked, first, in.seq)
	for _, msg := range in.msgs {
		if msg.seq > since {
			out.Messages = append(out.Messages, InboxMessage{Seq: msg.seq, Payload: slices.Clone(msg.payload)})
		}
	}
	return out
}

// active reports whether a device seen at seen still counts at now.
func active(seen, now time.Time, opt InboxOptions) bool {
	return opt.TTL <= 0 || now.Sub(seen) < opt.TTL
}

// seeDevice marks the device seen now and returns it, registering it at
// the user's acknowledgement when it is new or was not seen within
// opt.TTL; a new device past MaxDevices makes the least recently seen one
// forgotten, unless evict is false: then nil is returned.
func (in *memInbox) seeDevice(name string, now time.Time, opt InboxOptions, evict bool) *memDevice {
	if in.devices == nil {
		in.devices = map[string]*memDevice{}
	}
	d := in.devices[name]
	if d == nil || !active(d.seen, now, opt) {
		if d == nil && len(in.devices) >= MaxDevices {
			if !evict {
				return nil
			}
			var oldest string
			for k, o := range in.devices {
				if oldest == "" || o.seen.Before(in.devices[oldest].seen) {
					oldest = k
				}
			}
			delete(in.devices, oldest)
		}
		d = &memDevice{acked: in.acked}
		in.devices[name] = d
	}
	d.acked = max(d.acked, in.acked)
	d.seen = now
	return d
}

// Ack implements Backend. A seq above the user's last seq acknowledges
// everything assigned so far and no more.
func (m *Memory) Ack(ctx context.Context, user, device string, seq int64, opt InboxOptions) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	in := m.inboxes[user]
	if in == nil {
		return nil
	}
	now := m.now()
	for k, o := range in.devices {
		if !active(o.seen, now, opt) {
			delete(in.devices, k)
		}
	}
	d := in.seeDevice(deviceOf(device), now, opt, false)
	if d == nil {
		return nil
	}
	d.acked = max(d.acked, min(seq, in.seq))
	floor := d.acked
	for _, o := range in.devices {
		floor = min(floor, o.acked)
	}
	if floor <= in.acked {
		return nil
	}
	in.acked = floor
	n := 0
	for n < len(in.msgs) && in.msgs[n].seq <= floor {
		n++
	}
	in.msgs = slices.Delete(in.msgs, 0, n)
	return nil
}

// LastSeq implements Backend.
func (m *Memory) LastSeq(ctx context.Context, user string) (int64, error) {
	if err := m.lock(ctx); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	if in := m.inboxes[user]; in != nil {
		return in.seq, nil
	}
	return 0, nil
}

// LastSeqs implements Backend.
func (m *Memory) LastSeqs(ctx context.Context, users []string) ([]int64, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := make([]int64, len(users))
	for i, u := range users {
		if in := m.inboxes[u]; in != nil {
			out[i] = in.seq
		}
	}
	return out, nil
}

// Ping implements Backend.
func (m *Memory) Ping(ctx context.Context) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	m.mu.Unlock()
	return nil
}

// Close stops every subscription and waits for their goroutines. Later
// calls fail. Close is idempotent.
func (m *Memory) Close() error {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		close(m.done)
	}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

func addToSet(sets map[string]map[string]struct{}, key, member string) {
	set := sets[key]
	if set == nil {
		set = map[string]struct{}{}
		sets[key] = set
	}
	set[member] = struct{}{}
}

func removeFromSet(sets map[string]map[string]struct{}, key, member string) {
	if set := sets[key]; set != nil {
		delete(set, member)
		if len(set) == 0 {
			delete(sets, key)
		}
	}
}

func sortedKeys(set map[string]struct{}) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sortRoutes(rs []Route) {
	slices.SortFunc(rs, func(a, b Route) int {
		if a.ConnectedAt != b.ConnectedAt {
			if a.ConnectedAt < b.ConnectedAt {
				return -1
			}
			return 1
		}
		switch {
		case a.ConnID < b.ConnID:
			return -1
		case a.ConnID > b.ConnID:
			return 1
		}
		return 0
	})
}

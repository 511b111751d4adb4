package cluster

import (
	"context"
	"encoding/json"
	"errors"
)

// ErrBadCursor refuses a RoomPresence cursor that no earlier call gave.
var ErrBadCursor = errors.New("cluster: bad cursor")

// Presence is room presence (contract section 19): which connections are
// in a room now, kept by the nodes that hold them. Each change is one
// atomic step of the backend, so that concurrent changes on any nodes, and
// survivors cleaning up after a dead node, agree on whether an entry
// changed and on the counts after it.
//
// Every change moves the room's presence seq (a counter of the room that
// only grows): an entry keeps the seq of its entry, a removal answers the
// seq it moved the counter to, and PresenceSnapshot reads the entries with
// the seq they are the state at. That is how the gateway orders the
// changes a member is told of against what it read (presence.go).
//
// Memory and Redis implement it; the gateway uses it only for rooms whose
// namespace tracks presence.
type Presence interface {
	// AddPresence enters e in room's presence. An entry already there is
	// left as it is (Changed false, its seq). e.Seq > 0 keeps that seq
	// (a node rebuilding its entries after the backend lost them) and
	// raises the room's counter to it; else the room's next seq is
	// assigned; e.Floor raises the counter to at least it. The node's list
	// of its entries (NodePresence) has the entry before the room does.
	AddPresence(ctx context.Context, room string, e PresenceEntry) (PresenceChange, error)
	// RemovePresence takes connID out of room's presence: Changed is true
	// for exactly one caller, whatever the races, with the removed entry's
	// seq and the room's next seq (At). It also leaves the node's list.
	RemovePresence(ctx context.Context, room string, e PresenceEntry) (PresenceChange, error)
	// PresenceSnapshot reads every entry of room and the room's seq in
	// one atomic step: the state after the changes up to that seq.
	PresenceSnapshot(ctx context.Context, room string) (seq int64, entries []PresenceEntry, err error)
	// RoomPresence answers the counts and, with limit > 0, up to about
	// limit entries from cursor ("" = the start); next is "" at the end.
	RoomPresence(ctx context.Context, room, cursor string, limit int) (counts PresenceCounts, entries []PresenceEntry, next string, err error)
	// NodePresence lists the entries node holds (Room, User, ConnID set);
	// PresenceNodes the nodes that have such a list; DropNodePresence
	// forgets a dead node's list once each of its entries was removed.
	NodePresence(ctx context.Context, node string) ([]PresenceEntry, error)
	// PresenceRooms lists, in name order, up to limit rooms whose name
	// starts with prefix and comes after cursor ("" = the start), with
	// their counts: the rooms with a presence. A room that emptied may
	// still be listed (with zero counts) until a call finds it empty.
	PresenceRooms(ctx context.Context, prefix, cursor string, limit int) ([]RoomCounts, error)
	PresenceNodes(ctx context.Context) ([]string, error)
	DropNodePresence(ctx context.Context, node string) error
}

// PresenceEntry is one connection in a room's presence.
type PresenceEntry struct {
	Room   string          `json:"-"`
	User   string          `json:"user"`
	ConnID string          `json:"conn_id"`
	Node   string          `json:"node"`
	Device string          `json:"device"`
	Info   json.RawMessage `json:"info,omitempty"`
	Seq    int64           `json:"-"`
	Floor  int64           `json:"-"` // AddPresence: the room's seq is at least this afterwards
}

// RoomCounts is a room and its presence counts.
type RoomCounts struct {
	Room string `json:"room"`
	PresenceCounts
}

// PresenceCounts are a room's distinct users and connections present.
type PresenceCounts struct {
	Users int64 `json:"users"`
	Conns int64 `json:"connections"`
}

// PresenceChange answers AddPresence and RemovePresence.
type PresenceChange struct {
	Changed bool  // the entry was added (was not there) or removed (was there)
	Seq     int64 // the entry's presence seq
	At      int64 // a removal's seq (the room's seq it moved to); 0 for an add
	Counts  PresenceCounts
	// UserConns is the user's connections present in the room after the
	// change: 1 after an add is the user's arrival, 0 after a remove its
	// departure.
	UserConns int64
}

// nodePresenceMember is an entry of a node's list.
func nodePresenceMember(room, user, connID string) string { return room + "\n" + user + "\n" + connID }

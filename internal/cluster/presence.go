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
// Every entry has the room's presence seq at its entry (a counter of the
// room that only grows): a member that entered at seq S learns of the
// entries with a higher seq by their joined frames, and of the others
// from the presence list, which is how the gateway keeps "left" from ever
// coming before "joined" for one connection.
//
// Memory and Redis implement it; the gateway uses it only for rooms whose
// namespace tracks presence.
type Presence interface {
	// AddPresence enters e in room's presence. An entry already there is
	// left as it is (Changed false, its seq). e.Seq > 0 keeps that seq
	// (a node rebuilding its entries after the backend lost them) and
	// raises the room's counter to it; else the room's next seq is
	// assigned. The node's list of its entries (NodePresence) has the
	// entry before the room does.
	AddPresence(ctx context.Context, room string, e PresenceEntry) (PresenceChange, error)
	// RemovePresence takes connID out of room's presence: Changed is true
	// for exactly one caller, whatever the races, with the removed entry's
	// seq. It also leaves the node's list.
	RemovePresence(ctx context.Context, room string, e PresenceEntry) (PresenceChange, error)
	// RoomPresence answers the counts and, with limit > 0, up to about
	// limit entries from cursor ("" = the start); next is "" at the end.
	RoomPresence(ctx context.Context, room, cursor string, limit int) (counts PresenceCounts, entries []PresenceEntry, next string, err error)
	// NodePresence lists the entries node holds (Room, User, ConnID set);
	// PresenceNodes the nodes that have such a list; DropNodePresence
	// forgets a dead node's list once each of its entries was removed.
	NodePresence(ctx context.Context, node string) ([]PresenceEntry, error)
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
	Counts  PresenceCounts
	// UserConns is the user's connections present in the room after the
	// change: 1 after an add is the user's arrival, 0 after a remove its
	// departure.
	UserConns int64
}

// nodePresenceMember is an entry of a node's list.
func nodePresenceMember(room, user, connID string) string { return room + "\n" + user + "\n" + connID }

package api

import "encoding/json"

// PresenceConn is one live connection of a user.
type PresenceConn struct {
	ConnID      string `json:"conn_id"`
	Node        string `json:"node"`
	ConnectedAt int64  `json:"connected_at"`
	Device      string `json:"device"`
	// Info is the token's info claim (contract 3), absent when it had none.
	Info json.RawMessage `json:"info,omitempty"`
}

// NodeEntry is one live node as the API lists it.
type NodeEntry struct {
	ID             string  `json:"id"`
	URL            string  `json:"url"`
	Status         string  `json:"status"`
	Connections    int     `json:"connections"`
	Weight         int     `json:"weight"`
	HeartbeatAgeMS int64   `json:"heartbeat_age_ms"`
	StartedAt      int64   `json:"started_at"`
	Version        string  `json:"version"`
	Load           float64 `json:"load"`
}

// PresenceClient is one connection in a room's presence (contract 19).
type PresenceClient struct {
	User   string          `json:"user"`
	ConnID string          `json:"conn_id"`
	Node   string          `json:"node"`
	Device string          `json:"device"`
	Info   json.RawMessage `json:"info,omitempty"`
}

// RoomPresence is the answer of a room presence read: the counts, and
// unless only the counts were asked, the connections (a page of them:
// Cursor, when not empty, reads the next).
type RoomPresence struct {
	Users       int64            `json:"users"`
	Connections int64            `json:"connections"`
	Clients     []PresenceClient `json:"clients,omitempty"`
	Cursor      string           `json:"cursor,omitempty"`
}

// RoomCount is a room with a presence, and its counts.
type RoomCount struct {
	Room        string `json:"room"`
	Users       int64  `json:"users"`
	Connections int64  `json:"connections"`
}

// RoomList is a page of ListRooms; Cursor (empty at the end) reads the
// next.
type RoomList struct {
	Rooms  []RoomCount `json:"rooms"`
	Cursor string      `json:"cursor,omitempty"`
}

// HistoryQuery is one history read (contract 5 and 19): forwards, the
// messages with seq > Since, oldest first; with Reverse, backwards, the
// messages with seq < Before (0: from the newest), newest first; at most
// Limit (0: HistoryReadDefault).
type HistoryQuery struct {
	Since, Before int64
	Limit         int
	Reverse       bool
}

// ConnEntry is one open connection of a node.
type ConnEntry struct {
	ConnID      string   `json:"conn_id"`
	User        string   `json:"user"`
	Device      string   `json:"device"`
	Transport   string   `json:"transport"`
	Rooms       []string `json:"rooms"`
	ConnectedAt int64    `json:"connected_at"` // Unix ms
}

// ConnPage is a page of a node's connections, in connection id order;
// Cursor, when not empty, reads the next.
type ConnPage struct {
	Connections []ConnEntry `json:"connections"`
	Cursor      string      `json:"cursor,omitempty"`
}

// ConnQuery asks a node for a page of its connections after Cursor, or
// for the one connection Conn.
type ConnQuery struct {
	Limit  int    `json:"limit,omitempty"`
	Cursor string `json:"cursor,omitempty"`
	Conn   string `json:"conn,omitempty"`
}

// Limits of the reads (contract §5, §19): at most MaxHistoryRead
// messages of a room's history per call, HistoryReadDefault when the call
// names no limit; at most MaxPresenceRead connections of a room's presence
// (PresenceReadDefault); at most ConnsMax connections of a node
// (ConnsDefault). The rest is paged with the answer's cursor.
const (
	HistoryReadDefault  = 100
	MaxHistoryRead      = 1000
	PresenceReadDefault = 1000
	MaxPresenceRead     = 10000
	ConnsDefault        = 100
	ConnsMax            = 1000
)

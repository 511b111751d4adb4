package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

// Room presence reads list at most maxPresenceRead connections per call,
// presenceReadDefault when the call names no limit; the rest is paged
// with the answer's cursor.
const (
	presenceReadDefault = 1000
	maxPresenceRead     = 10000
)

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

// ReadRoomPresence reads room's presence: the counts, and with limit > 0
// up to about limit connections from cursor. The operation behind the API
// and the presence frame.
func (n *Node) ReadRoomPresence(ctx context.Context, room, cursor string, limit int) (RoomPresence, error) {
	if err := protocol.ValidName("room", room); err != nil {
		return RoomPresence{}, badRequest("%v", err)
	}
	if !n.tracksPresence(room) {
		return RoomPresence{}, &APIError{Status: http.StatusNotFound, Code: "not_found",
			Message: fmt.Sprintf("room %s has no presence: no namespace of WSGATE_ROOMS_FILE with presence: true matches it", room)}
	}
	counts, list, next, err := n.pres.RoomPresence(ctx, room, cursor, limit)
	if errors.Is(err, cluster.ErrBadCursor) {
		return RoomPresence{}, badRequest("cursor %q is not one a presence read answered", cursor)
	}
	if err != nil {
		return RoomPresence{}, unavailable("room presence", err)
	}
	out := RoomPresence{Users: counts.Users, Connections: counts.Conns, Cursor: next}
	if limit > 0 {
		out.Clients = make([]PresenceClient, 0, len(list))
		for _, e := range list {
			out.Clients = append(out.Clients, PresenceClient{User: e.User, ConnID: e.ConnID, Node: e.Node, Device: e.Device, Info: e.Info})
		}
	}
	return out, nil
}

// apiRoomPresence answers GET /api/v1/rooms/{room}/presence
// [?counts=true] [&limit=M&cursor=C].
func (n *Node) apiRoomPresence(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryInt(r, "limit", presenceReadDefault, 1, maxPresenceRead)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if q.Get("counts") == "true" {
		limit = 0
	}
	p, err := n.ReadRoomPresence(r.Context(), r.PathValue("room"), q.Get("cursor"), int(limit))
	if err != nil {
		return err
	}
	if limit > 0 && p.Clients == nil {
		p.Clients = []PresenceClient{}
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// presenceFrame answers a member connection's presence frame with the
// room's presence (its first page).
func (c *conn) presenceFrame(ctx context.Context, cf *protocol.ClientFrame) {
	c.mu.Lock()
	member := c.x != nil && c.x.pres[cf.Room] != nil
	c.mu.Unlock()
	if !member {
		c.replyRefused(cf.ID, protocol.ErrForbidden, "not in the presence of room "+cf.Room+" (join it first)")
		return
	}
	p, err := c.n.ReadRoomPresence(ctx, cf.Room, "", presenceReadDefault)
	if err != nil {
		c.reply(cf.ID, err, 0)
		return
	}
	if p.Clients == nil {
		p.Clients = []PresenceClient{}
	}
	res, _ := json.Marshal(p)
	b, err := protocol.EncodeReply(c.format, &protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, OK: true, Result: res})
	if err != nil {
		return
	}
	c.send(c.dataFrame(b))
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

// ListRooms lists the rooms with a presence whose name starts with
// prefix, in name order, after cursor, at most limit (0: 100): the
// operation behind the API and gRPC.
func (n *Node) ListRooms(ctx context.Context, prefix, cursor string, limit int) (RoomList, error) {
	if limit == 0 {
		limit = 100
	}
	if limit < 0 || limit > 1000 {
		return RoomList{}, badRequest("limit must be 1 to 1000, got %d", limit)
	}
	if n.pres == nil {
		return RoomList{}, unavailable("room list", errors.New("the backend keeps no presence"))
	}
	list, err := n.pres.PresenceRooms(ctx, prefix, cursor, limit)
	if err != nil {
		return RoomList{}, unavailable("room list", err)
	}
	out := RoomList{Rooms: make([]RoomCount, 0, len(list))}
	for _, x := range list {
		out.Rooms = append(out.Rooms, RoomCount{x.Room, x.Users, x.Conns})
	}
	if len(list) == limit {
		out.Cursor = list[len(list)-1].Room
	}
	return out, nil
}

// apiRooms answers GET /api/v1/rooms?prefix=P&cursor=C&limit=M.
func (n *Node) apiRooms(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryInt(r, "limit", 100, 1, 1000)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	out, err := n.ListRooms(r.Context(), q.Get("prefix"), q.Get("cursor"), int(limit))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

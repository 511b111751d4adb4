package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

// ReadRoomPresence reads room's presence: the counts, and with limit > 0
// up to about limit connections from cursor. The operation behind the API
// and the presence frame.
func (n *Node) ReadRoomPresence(ctx context.Context, room, cursor string, limit int) (api.RoomPresence, error) {
	if err := protocol.ValidName("room", room); err != nil {
		return api.RoomPresence{}, api.BadRequest("%v", err)
	}
	if !n.tracksPresence(room) {
		return api.RoomPresence{}, &api.Error{Status: http.StatusNotFound, Code: "not_found",
			Message: fmt.Sprintf("room %s has no presence: no namespace of WSGATE_ROOMS_FILE with presence: true matches it", room)}
	}
	counts, list, next, err := n.pres.RoomPresence(ctx, room, cursor, limit)
	if errors.Is(err, cluster.ErrBadCursor) {
		return api.RoomPresence{}, api.BadRequest("cursor %q is not one a presence read answered", cursor)
	}
	if err != nil {
		return api.RoomPresence{}, api.Unavailable("room presence", err)
	}
	out := api.RoomPresence{Users: counts.Users, Connections: counts.Conns, Cursor: next}
	if limit > 0 {
		out.Clients = make([]api.PresenceClient, 0, len(list))
		for _, e := range list {
			out.Clients = append(out.Clients, api.PresenceClient{User: e.User, ConnID: e.ConnID, Node: e.Node, Device: e.Device, Info: e.Info})
		}
	}
	return out, nil
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
	p, err := c.n.ReadRoomPresence(ctx, cf.Room, "", api.PresenceReadDefault)
	if err != nil {
		c.reply(cf.ID, err, 0)
		return
	}
	if p.Clients == nil {
		p.Clients = []api.PresenceClient{}
	}
	res, _ := json.Marshal(p)
	b, err := protocol.EncodeReply(c.format, &protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, OK: true, Result: res})
	if err != nil {
		return
	}
	c.send(c.dataFrame(b))
}

// ListRooms lists the rooms with a presence whose name starts with
// prefix, in name order, after cursor, at most limit (0: 100): the
// operation behind the API and gRPC.
func (n *Node) ListRooms(ctx context.Context, prefix, cursor string, limit int) (api.RoomList, error) {
	if limit == 0 {
		limit = 100
	}
	if limit < 0 || limit > 1000 {
		return api.RoomList{}, api.BadRequest("limit must be 1 to 1000, got %d", limit)
	}
	if n.pres == nil {
		return api.RoomList{}, api.Unavailable("room list", errors.New("the backend keeps no presence"))
	}
	list, err := n.pres.PresenceRooms(ctx, prefix, cursor, limit)
	if err != nil {
		return api.RoomList{}, api.Unavailable("room list", err)
	}
	out := api.RoomList{Rooms: make([]api.RoomCount, 0, len(list))}
	for _, x := range list {
		out.Rooms = append(out.Rooms, api.RoomCount{Room: x.Room, Users: x.Users, Connections: x.Conns})
	}
	if len(list) == limit {
		out.Cursor = list[len(list)-1].Room
	}
	return out, nil
}

package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/protocol"
)

// The operations of the server API: the node is the api.Service that the
// JSON handlers and the gRPC/Connect service of internal/api call (they
// decode the request, call one of these and encode the answer or the
// *api.Error). The rest are in publish.go, publish_batch.go, rooms.go,
// history.go, presence_read.go, conns.go and stats.go.

var _ api.Service = (*Node)(nil)

// RoomMembers lists a room's members (never nil).
func (n *Node) RoomMembers(ctx context.Context, room string) ([]string, error) {
	if err := protocol.ValidName("room", room); err != nil {
		return nil, api.BadRequest("%v", err)
	}
	members, err := n.backend.RoomMembers(ctx, room)
	if err != nil {
		return nil, api.Unavailable("room members", err)
	}
	if members == nil {
		members = []string{}
	}
	return members, nil
}

// Presence lists a user's live connections in the cluster (never nil).
func (n *Node) Presence(ctx context.Context, user string) ([]api.PresenceConn, error) {
	if err := protocol.ValidName("user", user); err != nil {
		return nil, api.BadRequest("%v", err)
	}
	routes, err := n.backend.UserRoutes(ctx, user)
	if err != nil {
		return nil, api.Unavailable("routes", err)
	}
	conns := make([]api.PresenceConn, 0, len(routes))
	for _, rt := range routes {
		conns = append(conns, api.PresenceConn{ConnID: rt.ConnID, Node: rt.Node, ConnectedAt: rt.ConnectedAt, Device: cmp.Or(rt.Device, protocol.DefaultDevice), Info: rawOrNil(rt.Info)})
	}
	return conns, nil
}

// DisconnectUser closes every connection of user with 4003 and reason,
// on whichever node, and answers how many closes were confirmed within
// 4 s (their nodes go on being asked afterwards, see closeConns).
func (n *Node) DisconnectUser(ctx context.Context, user, reason string) (int, error) {
	if err := protocol.ValidName("user", user); err != nil {
		return 0, api.BadRequest("%v", err)
	}
	if reason == "" {
		reason = "disconnected by the server"
	}
	routes, err := n.backend.UserRoutes(ctx, user)
	if err != nil {
		return 0, api.Unavailable("routes", err)
	}
	byNode := map[string][]string{}
	for _, rt := range routes {
		byNode[rt.Node] = append(byNode[rt.Node], rt.ConnID)
	}
	wait, cancel := context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	return n.closeConns(wait, user, byNode, protocol.CloseDisconnected, reason), nil
}

// ListNodes lists the live nodes of the cluster (this one always).
func (n *Node) ListNodes(ctx context.Context) ([]api.NodeEntry, error) {
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		return nil, api.Unavailable("nodes", err)
	}
	now := time.Now()
	out := make([]api.NodeEntry, 0, len(nodes))
	for _, x := range nodes {
		if x.ID != n.cfg.NodeID && allocator.Stale(x, now, n.staleAfter()) {
			continue // dead: no heartbeat for three periods
		}
		out = append(out, api.NodeEntry{ID: x.ID, URL: x.URL, Status: string(x.Status), Connections: x.Connections, Weight: x.Weight,
			HeartbeatAgeMS: max(0, now.UnixMilli()-x.Heartbeat), StartedAt: x.StartedAt, Version: x.Version, Load: x.Load})
	}
	return out, nil
}

// DrainNode starts the drain of node id (this one or another): the answer
// comes once that node has the request, or at ctx's end.
func (n *Node) DrainNode(ctx context.Context, id string) error {
	if id == n.cfg.NodeID {
		n.draining.Store(true) // new handshakes refused from now on
		n.goFunc(func() { n.Drain("api") })
		return nil
	}
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		return api.Unavailable("nodes", err)
	}
	found := false
	for _, x := range nodes {
		if x.ID == id {
			found = true
		}
	}
	if !found {
		return &api.Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no node %q in the cluster", id)}
	}
	// The request is sent until the node answers or says draining (or is
	// dead); the answer waits for that at most the request's time.
	asked := make(chan struct{})
	if !n.goFunc(func() {
		defer close(asked)
		n.ask(n.ctx, id, envelope{Kind: kindDrain}, n.drainNeeded(id))
	}) {
		return api.Unavailable("drain", errors.New("node shutting down"))
	}
	select {
	case <-asked:
	case <-ctx.Done():
	}
	return nil
}

// rawOrNil is s as raw JSON, nil when empty.
func rawOrNil(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

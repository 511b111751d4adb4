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
	"github.com/wsgate/wsgate/protocol"
)

// The operations of the server API, shared by its transports: the JSON
// handlers (api.go) and the gRPC/Connect service (grpc.go) decode their
// request, call one of these and encode the answer or the *APIError.

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

const maxBatch = 1000

// checkBatchSize bounds a batch to maxBatch messages.
func checkBatchSize(n int) error {
	if n > maxBatch {
		return badRequest("at most %d messages per batch, got %d", maxBatch, n)
	}
	return nil
}

// RoomMembers lists a room's members (never nil).
func (n *Node) RoomMembers(ctx context.Context, room string) ([]string, error) {
	if err := protocol.ValidName("room", room); err != nil {
		return nil, badRequest("%v", err)
	}
	members, err := n.backend.RoomMembers(ctx, room)
	if err != nil {
		return nil, unavailable("room members", err)
	}
	if members == nil {
		members = []string{}
	}
	return members, nil
}

// Presence lists a user's live connections in the cluster (never nil).
func (n *Node) Presence(ctx context.Context, user string) ([]PresenceConn, error) {
	if err := protocol.ValidName("user", user); err != nil {
		return nil, badRequest("%v", err)
	}
	routes, err := n.backend.UserRoutes(ctx, user)
	if err != nil {
		return nil, unavailable("routes", err)
	}
	conns := make([]PresenceConn, 0, len(routes))
	for _, rt := range routes {
		conns = append(conns, PresenceConn{ConnID: rt.ConnID, Node: rt.Node, ConnectedAt: rt.ConnectedAt, Device: cmp.Or(rt.Device, protocol.DefaultDevice), Info: rawOrNil(rt.Info)})
	}
	return conns, nil
}

// DisconnectUser closes every connection of user with 4003 and reason,
// on whichever node, and answers how many closes were confirmed within
// 4 s (their nodes go on being asked afterwards, see closeConns).
func (n *Node) DisconnectUser(ctx context.Context, user, reason string) (int, error) {
	if err := protocol.ValidName("user", user); err != nil {
		return 0, badRequest("%v", err)
	}
	if reason == "" {
		reason = "disconnected by the server"
	}
	routes, err := n.backend.UserRoutes(ctx, user)
	if err != nil {
		return 0, unavailable("routes", err)
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
func (n *Node) ListNodes(ctx context.Context) ([]NodeEntry, error) {
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		return nil, unavailable("nodes", err)
	}
	now := time.Now()
	out := make([]NodeEntry, 0, len(nodes))
	for _, x := range nodes {
		if x.ID != n.cfg.NodeID && allocator.Stale(x, now, n.staleAfter()) {
			continue // dead: no heartbeat for three periods
		}
		out = append(out, NodeEntry{ID: x.ID, URL: x.URL, Status: string(x.Status), Connections: x.Connections, Weight: x.Weight,
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
		return unavailable("nodes", err)
	}
	found := false
	for _, x := range nodes {
		if x.ID == id {
			found = true
		}
	}
	if !found {
		return &APIError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no node %q in the cluster", id)}
	}
	// The request is sent until the node answers or says draining (or is
	// dead); the answer waits for that at most the request's time.
	asked := make(chan struct{})
	if !n.goFunc(func() {
		defer close(asked)
		n.ask(n.ctx, id, envelope{Kind: kindDrain}, n.drainNeeded(id))
	}) {
		return unavailable("drain", errors.New("node shutting down"))
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

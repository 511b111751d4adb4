package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

// The connections of a node, and the disconnect of one connection (wsgate
// extensions of the server API for the console, docs/api.md). A node
// knows its own connections (their transport and rooms are not in the
// cluster's routes): the API of another node asks it over the bus
// (kindConns, answered kindConnsPage) and waits for the answer as a
// forwarded post does (awaitReply). A disconnect finds the connection's
// node by the id's prefix (in the node's record), its user by that
// listing, and closes it as the user disconnect does (closeConns).

// connsWait bounds how long the API waits for another node's answer.
const connsWait = 4 * time.Second

// parseConnsCursor reads a cursor of the listing: the hex counter of the
// last connection of the page before.
func parseConnsCursor(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || len(s) > 16 {
		return 0, api.BadRequest("cursor %q is not one a connections listing answered", s)
	}
	return v, nil
}

// splitConnID splits a connection id into its node's prefix and counter.
func splitConnID(id string) (prefix string, seq uint64, ok bool) {
	const p = 8 // hex digits of a node's prefix (node.go)
	if len(id) <= p || len(id) > p+16 {
		return "", 0, false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", 0, false
		}
	}
	seq, err := strconv.ParseUint(id[p:], 16, 64)
	return id[:p], seq, err == nil
}

// localConns answers an api.ConnQuery from this node's connections.
func (n *Node) localConns(q api.ConnQuery) api.ConnPage {
	after, _ := parseConnsCursor(q.Cursor)
	var want uint64
	if q.Conn != "" {
		prefix, seq, ok := splitConnID(q.Conn)
		if !ok || prefix != n.idPrefix {
			return api.ConnPage{Connections: []api.ConnEntry{}}
		}
		want = seq
	}
	var picked []*conn
	for _, c := range n.hub.all() {
		if (want != 0 && c.idSeq != want) || (want == 0 && c.idSeq <= after) {
			continue
		}
		c.mu.Lock()
		open := c.state < stClosing // open, or resuming (its welcome on the way)
		c.mu.Unlock()
		if open {
			picked = append(picked, c)
		}
	}
	slices.SortFunc(picked, func(a, b *conn) int { return cmp.Compare(a.idSeq, b.idSeq) })
	limit := cmp.Or(q.Limit, api.ConnsDefault)
	page := api.ConnPage{Connections: make([]api.ConnEntry, 0, min(len(picked), limit))}
	for i, c := range picked {
		if i == limit {
			page.Cursor = strconv.FormatUint(picked[i-1].idSeq, 16)
			break
		}
		page.Connections = append(page.Connections, api.ConnEntry{ConnID: c.connID(), User: c.user, Device: c.deviceName(),
			Transport: tpNames[c.tp], Rooms: n.hub.connRoomList(c), ConnectedAt: c.connectedAt})
	}
	return page
}

// liveNode reads node id's record; 404 when the cluster has no live node
// of that id.
func (n *Node) liveNode(ctx context.Context, id string) (cluster.NodeInfo, error) {
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		return cluster.NodeInfo{}, api.Unavailable("nodes", err)
	}
	for _, x := range nodes {
		if x.ID == id && (id == n.cfg.NodeID || !allocator.Stale(x, time.Now(), n.staleAfter())) {
			return x, nil
		}
	}
	return cluster.NodeInfo{}, &api.Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no node %q in the cluster", id)}
}

// NodeConns answers a page of node's connections, on whichever node.
func (n *Node) NodeConns(ctx context.Context, node string, q api.ConnQuery) (api.ConnPage, error) {
	if _, err := parseConnsCursor(q.Cursor); err != nil {
		return api.ConnPage{}, err
	}
	if node == n.cfg.NodeID {
		return n.localConns(q), nil
	}
	if _, err := n.liveNode(ctx, node); err != nil {
		return api.ConnPage{}, err
	}
	body, _ := json.Marshal(q)
	req := n.newID()
	ch := n.connPages.add(req)
	defer n.connPages.remove(req)
	env := encodeEnvelope(envelope{Kind: kindConns, Req: req, From: n.cfg.NodeID}, body)
	raw, got, dead := awaitReply(ctx, n, node, env, ch, connsWait)
	switch {
	case dead:
		return api.ConnPage{}, &api.Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("node %q left the cluster", node)}
	case !got:
		return api.ConnPage{}, &api.Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: fmt.Sprintf("node %q did not answer within %s", node, connsWait)}
	}
	var page api.ConnPage
	if err := json.Unmarshal(raw, &page); err != nil {
		return api.ConnPage{}, &api.Error{Status: http.StatusBadGateway, Code: "bad_answer", Message: fmt.Sprintf("node %q answered a page that is not JSON: %v", node, err)}
	}
	if page.Connections == nil {
		page.Connections = []api.ConnEntry{}
	}
	return page, nil
}

// onConns answers another node's api.ConnQuery (kindConns).
func (n *Node) onConns(e envelope, body []byte) {
	if e.Req == "" || e.From == "" {
		return
	}
	var q api.ConnQuery
	if json.Unmarshal(body, &q) != nil || q.Limit < 0 || q.Limit > api.ConnsMax {
		q = api.ConnQuery{Conn: "-"} // answers no connection
	}
	page, _ := json.Marshal(n.localConns(q))
	n.sendAnswer(e.From, encodeEnvelope(envelope{Kind: kindConnsPage, Req: e.Req}, page))
}

// DisconnectConn closes the connection connID with 4003 and reason, on
// whichever node holds it, and answers how many closes were confirmed
// within 4 s (1, or 0 when its node did not confirm yet: it goes on being
// asked as for the user disconnect). An id no live node holds is 404.
func (n *Node) DisconnectConn(ctx context.Context, connID, reason string) (int, error) {
	prefix, _, ok := splitConnID(connID)
	if !ok {
		return 0, api.BadRequest("%q is not a connection id (the conn_id of a welcome, presence or connections listing)", connID)
	}
	if reason == "" {
		reason = "disconnected by the server"
	}
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		return 0, api.Unavailable("nodes", err)
	}
	for _, x := range nodes {
		if x.IDPrefix != prefix || (x.ID != n.cfg.NodeID && allocator.Stale(x, time.Now(), n.staleAfter())) {
			continue
		}
		page, err := n.NodeConns(ctx, x.ID, api.ConnQuery{Conn: connID})
		if err != nil {
			return 0, err
		}
		if len(page.Connections) == 0 {
			continue
		}
		wait, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		return n.closeConns(wait, page.Connections[0].User, map[string][]string{x.ID: {connID}}, protocol.CloseDisconnected, reason), nil
	}
	return 0, &api.Error{Status: http.StatusNotFound, Code: "unknown_connection", Message: fmt.Sprintf("no open connection %q in the cluster", connID)}
}

package gateway

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
	"github.com/wsgate/wsgate/web"
)

const maxBodyBytes = 1 << 20

// routes builds the node's HTTP surface (contract §2).
func (n *Node) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", n.serveWS)
	mux.HandleFunc("/ws", n.serveWS) // other methods: 400 from the upgrade check
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", n.serveReady)
	mux.Handle("GET /metrics", n.metrics.Handler())
	mux.HandleFunc("GET /v1/allocate", n.serveAllocate)

	api := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.HandleFunc(pattern, n.apiHandler(h))
	}
	api("POST /api/v1/publish", n.apiPublish)
	api("POST /api/v1/publish/batch", n.apiPublishBatch)
	api("PUT /api/v1/rooms/{room}/members/{user}", n.apiJoin)
	api("DELETE /api/v1/rooms/{room}/members/{user}", n.apiLeave)
	api("GET /api/v1/rooms/{room}/members", n.apiMembers)
	api("GET /api/v1/users/{user}/presence", n.apiPresence)
	api("POST /api/v1/users/{user}/disconnect", n.apiDisconnect)
	api("GET /api/v1/nodes", n.apiNodes)
	api("POST /api/v1/nodes/{node}/drain", n.apiDrain)
	api("/api/", func(w http.ResponseWriter, r *http.Request) error {
		return &APIError{Status: http.StatusNotFound, Code: "not_found", Message: "no such API endpoint: " + r.Method + " " + r.URL.Path}
	})
	web.Register(mux)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// apiHandler checks the API key, bounds the request to 5 s and turns
// errors into the contract's error bodies.
func (n *Node) apiHandler(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := n.checkKey(r); err != nil {
			writeError(w, http.StatusUnauthorized, "unauthorized", err.Error())
			return
		}
		// 4.5 s of work, so that the answer (503 at worst) leaves within
		// the contract's 5 s.
		ctx, cancel := context.WithTimeout(r.Context(), 4500*time.Millisecond)
		defer cancel()
		err := h(w, r.WithContext(ctx))
		if err == nil {
			return
		}
		var ae *APIError
		if !errors.As(err, &ae) {
			ae = unavailable("request", err)
		}
		if ae.Status >= 500 {
			n.log.Warn("API request failed", "method", r.Method, "path", r.URL.Path, "err", ae.Message)
		}
		if ae.Status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, ae.Status, ae.Code, ae.Message)
	}
}

func (n *Node) checkKey(r *http.Request) error {
	if n.cfg.APIKey == "" {
		if n.cfg.Dev {
			return nil
		}
		return errors.New("the server API is disabled: WSGATE_API_KEY is not set")
	}
	a := r.Header.Get("Authorization")
	if len(a) < 7 || !strings.EqualFold(a[:7], "bearer ") {
		return errors.New("missing Authorization: Bearer <api key>")
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(a[7:])), []byte(n.cfg.APIKey)) != 1 {
		return errors.New("invalid API key")
	}
	return nil
}

// readBody reads a JSON body of at most 1 MiB.
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, badRequest("cannot read the body: %v", err)
	}
	if len(b) > maxBodyBytes {
		return nil, &APIError{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: "body larger than 1 MiB"}
	}
	return b, nil
}

// publishBody is the API's publish object; fields are decoded one by one
// so that each wrong type gets its own message.
type publishBody struct {
	Target         json.RawMessage `json:"target"`
	Event          json.RawMessage `json:"event"`
	Data           json.RawMessage `json:"data"`
	Reliable       json.RawMessage `json:"reliable"`
	Class          json.RawMessage `json:"class"`
	IdempotencyKey json.RawMessage `json:"idempotency_key"`
}

func decodePublish(raw []byte) (PublishRequest, error) {
	var req PublishRequest
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return req, badRequest("empty body: expected a JSON object")
	}
	if raw[0] != '{' {
		return req, badRequest("the body must be a JSON object")
	}
	var b publishBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return req, badRequest("invalid JSON: %v", err)
	}
	if len(b.Target) == 0 || string(b.Target) == "null" {
		return req, badRequest("target is required: {\"type\":\"user|room|broadcast\",\"id\":\"...\"}")
	}
	if b.Target[0] != '{' {
		return req, badRequest("target must be an object {\"type\",\"id\"}")
	}
	if err := json.Unmarshal(b.Target, &req.Target); err != nil {
		return req, badRequest("target: %v", err)
	}
	if err := optString(b.Event, &req.Event); err != nil {
		return req, badRequest("event must be a string")
	}
	if err := optString(b.Class, &req.Class); err != nil {
		return req, badRequest("class must be a string")
	}
	if err := optString(b.IdempotencyKey, &req.IdempotencyKey); err != nil {
		return req, badRequest("idempotency_key must be a string")
	}
	if len(b.Reliable) > 0 && string(b.Reliable) != "null" {
		if err := json.Unmarshal(b.Reliable, &req.Reliable); err != nil {
			return req, badRequest("reliable must be true or false")
		}
	}
	req.Data = b.Data
	return req, nil
}

func optString(raw json.RawMessage, dst *string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, dst)
}

func (n *Node) apiPublish(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	req, err := decodePublish(body)
	if err != nil {
		return err
	}
	res, err := n.Publish(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

const maxBatch = 1000

func (n *Node) apiPublishBatch(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return badRequest("the body must be a JSON object {\"messages\":[...]}")
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return badRequest("invalid JSON: %v", err)
	}
	if b.Messages == nil {
		return badRequest("messages is required")
	}
	if len(b.Messages) > maxBatch {
		return badRequest("at most %d messages per batch, got %d", maxBatch, len(b.Messages))
	}
	results := n.publishBatch(r.Context(), b.Messages)
	writeJSON(w, http.StatusOK, map[string]any{"results": results})
	return nil
}

// batchParallel bounds the targets a batch publishes to at once.
const batchParallel = 64

// publishBatch publishes every message of a batch. Messages to the same
// target keep their order (one after the other); different targets run in
// parallel, so that their backend round trips overlap (and the Redis
// backend pipelines them).
func (n *Node) publishBatch(ctx context.Context, msgs []json.RawMessage) []any {
	results := make([]any, len(msgs))
	groups := map[protocol.Target][]int{}
	var order []protocol.Target
	reqs := make([]PublishRequest, len(msgs))
	for i, raw := range msgs {
		req, err := decodePublish(raw)
		if err != nil {
			results[i] = map[string]protocol.ErrorBody{"error": errorBody(err)}
			continue
		}
		reqs[i] = req
		if _, ok := groups[req.Target]; !ok {
			order = append(order, req.Target)
		}
		groups[req.Target] = append(groups[req.Target], i)
	}
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	for _, t := range order {
		idx := groups[t]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, i := range idx {
				res, err := n.Publish(ctx, reqs[i])
				if err != nil {
					results[i] = map[string]protocol.ErrorBody{"error": errorBody(err)}
				} else {
					results[i] = res
				}
			}
		}()
	}
	wg.Wait()
	return results
}

func errorBody(err error) protocol.ErrorBody {
	var ae *APIError
	if errors.As(err, &ae) {
		return protocol.ErrorBody{Code: ae.Code, Message: ae.Message}
	}
	return protocol.ErrorBody{Code: "unavailable", Message: err.Error()}
}

func (n *Node) apiJoin(w http.ResponseWriter, r *http.Request) error {
	if err := n.JoinRoom(r.Context(), r.PathValue("room"), r.PathValue("user")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (n *Node) apiLeave(w http.ResponseWriter, r *http.Request) error {
	if err := n.LeaveRoom(r.Context(), r.PathValue("room"), r.PathValue("user")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (n *Node) apiMembers(w http.ResponseWriter, r *http.Request) error {
	room := r.PathValue("room")
	if err := protocol.ValidName("room", room); err != nil {
		return badRequest("%v", err)
	}
	members, err := n.backend.RoomMembers(r.Context(), room)
	if err != nil {
		return unavailable("room members", err)
	}
	if members == nil {
		members = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"members": members})
	return nil
}

type presenceConn struct {
	ConnID      string `json:"conn_id"`
	Node        string `json:"node"`
	ConnectedAt int64  `json:"connected_at"`
}

func (n *Node) apiPresence(w http.ResponseWriter, r *http.Request) error {
	user := r.PathValue("user")
	if err := protocol.ValidName("user", user); err != nil {
		return badRequest("%v", err)
	}
	routes, err := n.backend.UserRoutes(r.Context(), user)
	if err != nil {
		return unavailable("routes", err)
	}
	conns := make([]presenceConn, 0, len(routes))
	for _, rt := range routes {
		conns = append(conns, presenceConn{ConnID: rt.ConnID, Node: rt.Node, ConnectedAt: rt.ConnectedAt})
	}
	writeJSON(w, http.StatusOK, map[string]any{"online": len(conns) > 0, "connections": conns})
	return nil
}

func (n *Node) apiDisconnect(w http.ResponseWriter, r *http.Request) error {
	user := r.PathValue("user")
	if err := protocol.ValidName("user", user); err != nil {
		return badRequest("%v", err)
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b struct {
		Reason string `json:"reason"`
	}
	if t := bytes.TrimSpace(body); len(t) > 0 {
		if t[0] != '{' || json.Unmarshal(t, &b) != nil {
			return badRequest("the body must be a JSON object {\"reason\":\"...\"}")
		}
	}
	reason := b.Reason
	if reason == "" {
		reason = "disconnected by the server"
	}
	routes, err := n.backend.UserRoutes(r.Context(), user)
	if err != nil {
		return unavailable("routes", err)
	}
	var remote []string
	for _, id := range routeNodes(routes) {
		if id == n.cfg.NodeID {
			for _, c := range n.hub.userConns(user) {
				c.close(protocol.CloseDisconnected, reason)
			}
		} else {
			remote = append(remote, id)
		}
	}
	if len(remote) > 0 {
		env := encodeEnvelope(envelope{Kind: kindKick, User: user, Code: protocol.CloseDisconnected, Reason: reason}, nil)
		if err := n.backend.Send(r.Context(), remote, env); err != nil {
			return unavailable("bus", err)
		}
	}
	writeJSON(w, http.StatusOK, map[string]int{"disconnected": len(routes)})
	return nil
}

type nodeEntry struct {
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

func (n *Node) apiNodes(w http.ResponseWriter, r *http.Request) error {
	nodes, err := n.backend.Nodes(r.Context())
	if err != nil {
		return unavailable("nodes", err)
	}
	now := time.Now()
	out := make([]nodeEntry, 0, len(nodes))
	for _, x := range nodes {
		if x.ID != n.cfg.NodeID && allocator.Stale(x, now, n.staleAfter()) {
			continue // dead: no heartbeat for three periods
		}
		out = append(out, nodeEntry{ID: x.ID, URL: x.URL, Status: string(x.Status), Connections: x.Connections, Weight: x.Weight,
			HeartbeatAgeMS: max(0, now.UnixMilli()-x.Heartbeat), StartedAt: x.StartedAt, Version: x.Version, Load: x.Load})
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": out})
	return nil
}

func (n *Node) apiDrain(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("node")
	if id == n.cfg.NodeID {
		go n.Drain("api")
		writeJSON(w, http.StatusAccepted, map[string]string{"node": id, "status": "draining"})
		return nil
	}
	nodes, err := n.backend.Nodes(r.Context())
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
	if err := n.backend.Send(r.Context(), []string{id}, encodeEnvelope(envelope{Kind: kindDrain}, nil)); err != nil {
		return unavailable("bus", err)
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"node": id, "status": "draining"})
	return nil
}

func (n *Node) serveReady(w http.ResponseWriter, r *http.Request) {
	if n.Ready() {
		writeJSON(w, http.StatusOK, map[string]string{"status": string(n.Status())})
		return
	}
	w.Header().Set("Retry-After", "5")
	writeError(w, http.StatusServiceUnavailable, "unavailable", n.notReadyReason())
}

func (n *Node) serveAllocate(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "cluster backend unavailable")
		return
	}
	ServeAllocation(w, nodes, n.staleAfter())
}

// ServeAllocation answers /v1/allocate from a node list (shared with the
// standalone allocator).
func ServeAllocation(w http.ResponseWriter, nodes []cluster.NodeInfo, staleAfter time.Duration) {
	choice, ok := allocator.Choose(nodes, time.Now(), staleAfter, nil)
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "no node available")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"node": choice.ID, "url": choice.URL})
}

package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/wsgate/wsgate/protocol"
)

// Service is what the API's endpoints call: the node's operations. Each
// returns an *Error for what the caller did wrong (and 503 for what the
// cluster could not do); any other error is answered 503.
type Service interface {
	Publish(ctx context.Context, r PublishRequest) (PublishResult, error)
	// PublishBatch publishes the messages whose decoding did not fail
	// (errs[i] == nil; errs may be nil): each result is a PublishResult
	// or {"error": ErrorBody}, in the batch's order.
	PublishBatch(ctx context.Context, reqs []PublishRequest, errs []error) []any
	JoinRoom(ctx context.Context, room, user string) error
	LeaveRoom(ctx context.Context, room, user string) error
	RoomMembers(ctx context.Context, room string) ([]string, error)
	HistoryPage(ctx context.Context, room string, q HistoryQuery) (int64, []protocol.Message, error)
	ReadRoomPresence(ctx context.Context, room, cursor string, limit int) (RoomPresence, error)
	ListRooms(ctx context.Context, prefix, cursor string, limit int) (RoomList, error)
	Presence(ctx context.Context, user string) ([]PresenceConn, error)
	DisconnectUser(ctx context.Context, user, reason string) (int, error)
	ListNodes(ctx context.Context) ([]NodeEntry, error)
	DrainNode(ctx context.Context, id string) error
	NodeConns(ctx context.Context, node string, q ConnQuery) (ConnPage, error)
	DisconnectConn(ctx context.Context, connID, reason string) (int, error)
	// Stats is the answer of GET /api/v1/stats: the node's samples after
	// since (Unix ms).
	Stats(since int64) any
}

// Handler serves the API of one node: the JSON endpoints and the gRPC
// service, each behind the Guard.
type Handler struct {
	svc   Service
	guard *Guard
	log   *slog.Logger
}

// NewHandler is the API of svc, guarded by g.
func NewHandler(svc Service, g *Guard, log *slog.Logger) *Handler {
	return &Handler{svc: svc, guard: g, log: log}
}

// Register adds the API's routes to mux: /api/v1/..., the gRPC service's
// path, and a 404 in the contract's shape for any other /api/ path.
func (h *Handler) Register(mux *http.ServeMux) {
	handle := func(pattern string, f func(http.ResponseWriter, *http.Request) error) {
		mux.HandleFunc(pattern, h.guarded(f))
	}
	handle("POST /api/v1/publish", h.apiPublish)
	handle("POST /api/v1/publish/batch", h.apiPublishBatch)
	handle("PUT /api/v1/rooms/{room}/members/{user}", h.apiJoin)
	handle("DELETE /api/v1/rooms/{room}/members/{user}", h.apiLeave)
	handle("GET /api/v1/rooms/{room}/members", h.apiMembers)
	handle("GET /api/v1/rooms/{room}/history", h.apiHistory)
	handle("GET /api/v1/rooms/{room}/presence", h.apiRoomPresence)
	handle("GET /api/v1/rooms", h.apiRooms)
	handle("GET /api/v1/users/{user}/presence", h.apiPresence)
	handle("POST /api/v1/users/{user}/disconnect", h.apiDisconnect)
	handle("GET /api/v1/nodes", h.apiNodes)
	handle("POST /api/v1/nodes/{node}/drain", h.apiDrain)
	handle("GET /api/v1/nodes/{node}/connections", h.apiConnections)
	handle("POST /api/v1/connections/{conn}/disconnect", h.apiDisconnectConn)
	handle("GET /api/v1/stats", h.apiStats)
	mux.Handle(h.grpcHandler())
	handle("/api/", func(w http.ResponseWriter, r *http.Request) error {
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such API endpoint: " + r.Method + " " + r.URL.Path}
	})
}

func (h *Handler) apiPublish(w http.ResponseWriter, r *http.Request) error {
	body, err := ReadBody(r)
	if err != nil {
		return err
	}
	req, err := DecodePublish(body)
	if err != nil {
		return err
	}
	req.Traceparent = r.Header.Get("traceparent")
	res, err := h.svc.Publish(r.Context(), req)
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, res)
	return nil
}

func (h *Handler) apiPublishBatch(w http.ResponseWriter, r *http.Request) error {
	body, err := ReadBody(r)
	if err != nil {
		return err
	}
	var b struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return BadRequest("the body must be a JSON object {\"messages\":[...]}")
	}
	var ok bool
	if b.Messages, ok = ScanBatch(body); !ok {
		if err := json.Unmarshal(body, &b); err != nil {
			return BadRequest("invalid JSON: %v", err)
		}
	}
	if b.Messages == nil {
		return BadRequest("messages is required")
	}
	if err := CheckBatchSize(len(b.Messages)); err != nil {
		return err
	}
	reqs, errs := DecodeBatch(b.Messages, r.Header.Get("traceparent"))
	results := h.svc.PublishBatch(r.Context(), reqs, errs)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(AppendResults(make([]byte, 0, 16+64*len(results)), results))
	return nil
}

// DecodeBatch decodes the JSON messages of a batch, each with the trace
// context tp ("" for none); errs[i] is message i's 400.
func DecodeBatch(msgs []json.RawMessage, tp string) (reqs []PublishRequest, errs []error) {
	reqs = make([]PublishRequest, len(msgs))
	errs = make([]error, len(msgs))
	for i, raw := range msgs {
		reqs[i], errs[i] = DecodeBatchMessage(raw)
		reqs[i].Traceparent = tp
	}
	return reqs, errs
}

func (h *Handler) apiJoin(w http.ResponseWriter, r *http.Request) error {
	if err := h.svc.JoinRoom(r.Context(), r.PathValue("room"), r.PathValue("user")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) apiLeave(w http.ResponseWriter, r *http.Request) error {
	if err := h.svc.LeaveRoom(r.Context(), r.PathValue("room"), r.PathValue("user")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) apiMembers(w http.ResponseWriter, r *http.Request) error {
	members, err := h.svc.RoomMembers(r.Context(), r.PathValue("room"))
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, map[string]any{"members": members})
	return nil
}

func (h *Handler) apiPresence(w http.ResponseWriter, r *http.Request) error {
	conns, err := h.svc.Presence(r.Context(), r.PathValue("user"))
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, map[string]any{"online": len(conns) > 0, "connections": conns})
	return nil
}

func (h *Handler) apiDisconnect(w http.ResponseWriter, r *http.Request) error {
	user := r.PathValue("user")
	if err := protocol.ValidName("user", user); err != nil {
		return BadRequest("%v", err)
	}
	reason, err := readReason(r)
	if err != nil {
		return err
	}
	closed, err := h.svc.DisconnectUser(r.Context(), user, reason)
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, map[string]int{"disconnected": closed})
	return nil
}

// readReason reads a disconnect's optional body {"reason":"..."}.
func readReason(r *http.Request) (string, error) {
	body, err := ReadBody(r)
	if err != nil {
		return "", err
	}
	var b struct {
		Reason string `json:"reason"`
	}
	if t := bytes.TrimSpace(body); len(t) > 0 {
		if t[0] != '{' || json.Unmarshal(t, &b) != nil {
			return "", BadRequest("the body must be a JSON object {\"reason\":\"...\"}")
		}
	}
	return b.Reason, nil
}

func (h *Handler) apiNodes(w http.ResponseWriter, r *http.Request) error {
	nodes, err := h.svc.ListNodes(r.Context())
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, map[string]any{"nodes": nodes})
	return nil
}

func (h *Handler) apiDrain(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("node")
	if err := h.svc.DrainNode(r.Context(), id); err != nil {
		return err
	}
	WriteJSON(w, http.StatusAccepted, map[string]string{"node": id, "status": "draining"})
	return nil
}

// apiHistory answers GET /api/v1/rooms/{room}/history?since=N&limit=M
// (contract 5), and ?before=N&limit=M&reverse=true (contract 19): the kept
// messages of a reliable room after since oldest first, or before before
// newest first, at most M, each as the message frame members got, and
// the room's last seq.
func (h *Handler) apiHistory(w http.ResponseWriter, r *http.Request) error {
	var q HistoryQuery
	var err error
	if q.Since, err = QueryInt(r, "since", 0, 0, 1<<62); err != nil {
		return err
	}
	if q.Before, err = QueryInt(r, "before", 0, 0, 1<<62); err != nil {
		return err
	}
	limit, err := QueryInt(r, "limit", HistoryReadDefault, 1, MaxHistoryRead)
	if err != nil {
		return err
	}
	q.Limit = int(limit)
	switch v := r.URL.Query().Get("reverse"); v {
	case "", "false":
	case "true":
		q.Reverse = true
	default:
		return BadRequest("reverse must be true or false, got %s", strconv.Quote(v))
	}
	if r.URL.Query().Has("since") && q.Reverse || r.URL.Query().Has("before") && !q.Reverse {
		return BadRequest("since reads forwards and before backwards: before needs reverse=true, since goes without it")
	}
	top, msgs, err := h.svc.HistoryPage(r.Context(), r.PathValue("room"), q)
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, HistoryResult(top, msgs))
	return nil
}

// HistoryResult is the answer of a history read, {"seq","messages"}, as
// the API and the history frame give it.
func HistoryResult(top int64, msgs []protocol.Message) map[string]any {
	out := make([]json.RawMessage, len(msgs))
	for i := range msgs {
		out[i] = protocol.AppendMessageJSON(nil, &msgs[i])
	}
	return map[string]any{"seq": top, "messages": out}
}

// apiRoomPresence answers GET /api/v1/rooms/{room}/presence
// [?counts=true] [&limit=M&cursor=C].
func (h *Handler) apiRoomPresence(w http.ResponseWriter, r *http.Request) error {
	limit, err := QueryInt(r, "limit", PresenceReadDefault, 1, MaxPresenceRead)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if q.Get("counts") == "true" {
		limit = 0
	}
	p, err := h.svc.ReadRoomPresence(r.Context(), r.PathValue("room"), q.Get("cursor"), int(limit))
	if err != nil {
		return err
	}
	if limit > 0 && p.Clients == nil {
		p.Clients = []PresenceClient{}
	}
	WriteJSON(w, http.StatusOK, p)
	return nil
}

// apiRooms answers GET /api/v1/rooms?prefix=P&cursor=C&limit=M.
func (h *Handler) apiRooms(w http.ResponseWriter, r *http.Request) error {
	limit, err := QueryInt(r, "limit", 100, 1, 1000)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	out, err := h.svc.ListRooms(r.Context(), q.Get("prefix"), q.Get("cursor"), int(limit))
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, out)
	return nil
}

// apiConnections answers GET /api/v1/nodes/{node}/connections?limit=&cursor=.
func (h *Handler) apiConnections(w http.ResponseWriter, r *http.Request) error {
	limit, err := QueryInt(r, "limit", ConnsDefault, 1, ConnsMax)
	if err != nil {
		return err
	}
	page, err := h.svc.NodeConns(r.Context(), r.PathValue("node"), ConnQuery{Limit: int(limit), Cursor: r.URL.Query().Get("cursor")})
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, page)
	return nil
}

// apiDisconnectConn answers POST /api/v1/connections/{conn}/disconnect.
func (h *Handler) apiDisconnectConn(w http.ResponseWriter, r *http.Request) error {
	reason, err := readReason(r)
	if err != nil {
		return err
	}
	closed, err := h.svc.DisconnectConn(r.Context(), strings.TrimSpace(r.PathValue("conn")), reason)
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, map[string]int{"disconnected": closed})
	return nil
}

// apiStats answers GET /api/v1/stats[?since=T]: the samples after T (Unix
// ms; default: all, the last 5 minutes) and the sampling period.
func (h *Handler) apiStats(w http.ResponseWriter, r *http.Request) error {
	since, err := QueryInt(r, "since", 0, 0, 1<<53)
	if err != nil {
		return err
	}
	WriteJSON(w, http.StatusOK, h.svc.Stats(since))
	return nil
}

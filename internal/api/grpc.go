package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/wsgate/wsgate/internal/admission"
	wsgatev1 "github.com/wsgate/wsgate/proto/wsgate/v1"
	"github.com/wsgate/wsgate/proto/wsgate/v1/wsgatev1connect"
	"github.com/wsgate/wsgate/protocol"
)

// The server API as the protobuf service wsgate.v1.APIService
// (proto/wsgate/v1/proto), served by connect-go: gRPC (also over
// plain-text HTTP/2), gRPC-Web and Connect clients. Each method decodes
// its message, calls the operation the JSON API calls (the Service) and
// maps an *Error to the code of its HTTP status.

// grpcAPI implements wsgatev1connect.APIServiceHandler.
type grpcAPI struct{ svc Service }

var _ wsgatev1connect.APIServiceHandler = grpcAPI{}

// grpcHandler is the service's path prefix and handler, with the API key
// and (open dev API) Origin checks and the request bound of the JSON API.
func (h *Handler) grpcHandler() (string, http.Handler) {
	path, svc := wsgatev1connect.NewAPIServiceHandler(grpcAPI{h.svc},
		connect.WithReadMaxBytes(MaxBodyBytes),
		connect.WithInterceptors(connect.UnaryInterceptorFunc(h.grpcErrors)))
	ew := connect.NewErrorWriter()
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ae, wait := h.guard.keyRefusal(r); ae != nil {
			if wait > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(admission.RetrySecs(wait)))
			}
			ew.Write(w, r, grpcError(ae))
			return
		}
		// The open dev API: no foreign page may call it. A browser needs
		// a preflight (never answered) for every content type Connect
		// and gRPC-Web take, so the Origin is the only check left.
		if ae := h.guard.checkOrigin(r); ae != nil {
			ew.Write(w, r, grpcError(ae))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 4500*time.Millisecond)
		defer cancel()
		svc.ServeHTTP(w, r.WithContext(ctx))
	})
}

// grpcErrors turns the operations' errors into Connect errors.
func (h *Handler) grpcErrors(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if err == nil {
			return res, nil
		}
		var ce *connect.Error
		if errors.As(err, &ce) {
			return nil, err // from connect itself (decoding, size)
		}
		var ae *Error
		if !errors.As(err, &ae) {
			ae = Unavailable("request", err)
		}
		if ae.Status >= 500 {
			h.log.Warn("API request failed", "procedure", req.Spec().Procedure, "err", ae.Message)
		}
		return nil, grpcError(ae)
	}
}

// grpcError is the Connect error of an API error: the code of its HTTP
// status, the JSON API's code in the wsgate-error-code metadata.
func grpcError(ae *Error) *connect.Error {
	code := connect.CodeInternal
	switch ae.Status {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType:
		code = connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		code = connect.CodeUnauthenticated
	case http.StatusForbidden:
		code = connect.CodePermissionDenied
	case http.StatusNotFound:
		code = connect.CodeNotFound
	case http.StatusConflict:
		code = connect.CodeAlreadyExists
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		code = connect.CodeResourceExhausted
	case http.StatusServiceUnavailable:
		code = connect.CodeUnavailable
	}
	ce := connect.NewError(code, errors.New(ae.Message))
	ce.Meta().Set("wsgate-error-code", ae.Code)
	return ce
}

// publishRequest converts a protobuf publish into the API's request, with
// the trace context of the call's metadata.
func publishRequest(m *wsgatev1.PublishRequest, header http.Header) (PublishRequest, error) {
	if m.GetTarget() == nil {
		return PublishRequest{}, BadRequest("target is required: {\"type\":\"user|room|broadcast\",\"id\":\"...\"}")
	}
	r := PublishRequest{
		Target:         protocol.Target{Type: m.GetTarget().GetType(), ID: m.GetTarget().GetId()},
		Event:          m.GetEvent(),
		Reliable:       m.GetReliable(),
		Class:          m.GetClass(),
		IdempotencyKey: m.GetIdempotencyKey(),
		Traceparent:    header.Get("traceparent"),
		Key:            m.GetKey(),
	}
	if d := m.GetData(); d != "" {
		if !json.Valid([]byte(d)) {
			return r, BadRequest("data must be JSON text")
		}
		r.Data = json.RawMessage(d)
	}
	return r, nil
}

func publishResponse(res PublishResult) *wsgatev1.PublishResponse {
	return &wsgatev1.PublishResponse{Id: res.ID, Seq: res.Seq, Online: res.Online}
}

func (g grpcAPI) Publish(ctx context.Context, req *connect.Request[wsgatev1.PublishRequest]) (*connect.Response[wsgatev1.PublishResponse], error) {
	r, err := publishRequest(req.Msg, req.Header())
	if err != nil {
		return nil, err
	}
	res, err := g.svc.Publish(ctx, r)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(publishResponse(res)), nil
}

func (g grpcAPI) PublishBatch(ctx context.Context, req *connect.Request[wsgatev1.PublishBatchRequest]) (*connect.Response[wsgatev1.PublishBatchResponse], error) {
	msgs := req.Msg.GetMessages()
	if err := CheckBatchSize(len(msgs)); err != nil {
		return nil, err
	}
	reqs := make([]PublishRequest, len(msgs))
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		reqs[i], errs[i] = publishRequest(m, req.Header())
	}
	out := &wsgatev1.PublishBatchResponse{Results: make([]*wsgatev1.PublishBatchResult, 0, len(msgs))}
	for _, r := range g.svc.PublishBatch(ctx, reqs, errs) {
		res := &wsgatev1.PublishBatchResult{}
		switch r := r.(type) {
		case PublishResult:
			res.Result = &wsgatev1.PublishBatchResult_Ok{Ok: publishResponse(r)}
		case map[string]protocol.ErrorBody:
			res.Result = &wsgatev1.PublishBatchResult_Error{Error: &wsgatev1.Error{Code: r["error"].Code, Message: r["error"].Message}}
		}
		out.Results = append(out.Results, res)
	}
	return connect.NewResponse(out), nil
}

func (g grpcAPI) AddMember(ctx context.Context, req *connect.Request[wsgatev1.AddMemberRequest]) (*connect.Response[wsgatev1.AddMemberResponse], error) {
	if err := g.svc.JoinRoom(ctx, req.Msg.GetRoom(), req.Msg.GetUser()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&wsgatev1.AddMemberResponse{}), nil
}

func (g grpcAPI) RemoveMember(ctx context.Context, req *connect.Request[wsgatev1.RemoveMemberRequest]) (*connect.Response[wsgatev1.RemoveMemberResponse], error) {
	if err := g.svc.LeaveRoom(ctx, req.Msg.GetRoom(), req.Msg.GetUser()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&wsgatev1.RemoveMemberResponse{}), nil
}

func (g grpcAPI) ListMembers(ctx context.Context, req *connect.Request[wsgatev1.ListMembersRequest]) (*connect.Response[wsgatev1.ListMembersResponse], error) {
	members, err := g.svc.RoomMembers(ctx, req.Msg.GetRoom())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&wsgatev1.ListMembersResponse{Members: members}), nil
}

func (g grpcAPI) GetHistory(ctx context.Context, req *connect.Request[wsgatev1.GetHistoryRequest]) (*connect.Response[wsgatev1.GetHistoryResponse], error) {
	q := HistoryQuery{Since: req.Msg.GetSince(), Before: req.Msg.GetBefore(), Limit: int(req.Msg.GetLimit()), Reverse: req.Msg.GetReverse()}
	top, msgs, err := g.svc.HistoryPage(ctx, req.Msg.GetRoom(), q)
	if err != nil {
		return nil, err
	}
	out := &wsgatev1.GetHistoryResponse{Seq: top}
	for _, m := range msgs {
		out.Messages = append(out.Messages, &wsgatev1.HistoryMessage{Id: m.ID, Event: m.Event, Data: string(m.Data), Ts: m.TS, Seq: m.Seq, From: m.From})
	}
	return connect.NewResponse(out), nil
}

func (g grpcAPI) GetPresence(ctx context.Context, req *connect.Request[wsgatev1.GetPresenceRequest]) (*connect.Response[wsgatev1.GetPresenceResponse], error) {
	conns, err := g.svc.Presence(ctx, req.Msg.GetUser())
	if err != nil {
		return nil, err
	}
	out := &wsgatev1.GetPresenceResponse{Online: len(conns) > 0}
	for _, c := range conns {
		out.Connections = append(out.Connections, &wsgatev1.Connection{ConnId: c.ConnID, Node: c.Node, ConnectedAt: c.ConnectedAt, Device: c.Device, InfoJson: string(c.Info)})
	}
	return connect.NewResponse(out), nil
}

func (g grpcAPI) Disconnect(ctx context.Context, req *connect.Request[wsgatev1.DisconnectRequest]) (*connect.Response[wsgatev1.DisconnectResponse], error) {
	closed, err := g.svc.DisconnectUser(ctx, req.Msg.GetUser(), req.Msg.GetReason())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&wsgatev1.DisconnectResponse{Disconnected: int32(closed)}), nil
}

func (g grpcAPI) ListNodes(ctx context.Context, req *connect.Request[wsgatev1.ListNodesRequest]) (*connect.Response[wsgatev1.ListNodesResponse], error) {
	nodes, err := g.svc.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := &wsgatev1.ListNodesResponse{Nodes: make([]*wsgatev1.Node, 0, len(nodes))}
	for _, x := range nodes {
		out.Nodes = append(out.Nodes, &wsgatev1.Node{Id: x.ID, Url: x.URL, Status: x.Status, Connections: int32(x.Connections), Weight: int32(x.Weight),
			HeartbeatAgeMs: x.HeartbeatAgeMS, StartedAt: x.StartedAt, Version: x.Version, Load: x.Load})
	}
	return connect.NewResponse(out), nil
}

func (g grpcAPI) ListRooms(ctx context.Context, req *connect.Request[wsgatev1.ListRoomsRequest]) (*connect.Response[wsgatev1.ListRoomsResponse], error) {
	list, err := g.svc.ListRooms(ctx, req.Msg.GetPrefix(), req.Msg.GetCursor(), int(req.Msg.GetLimit()))
	if err != nil {
		return nil, err
	}
	out := &wsgatev1.ListRoomsResponse{Cursor: list.Cursor, Rooms: make([]*wsgatev1.RoomCount, 0, len(list.Rooms))}
	for _, r := range list.Rooms {
		out.Rooms = append(out.Rooms, &wsgatev1.RoomCount{Room: r.Room, Users: r.Users, Connections: r.Connections})
	}
	return connect.NewResponse(out), nil
}

func (g grpcAPI) GetRoomPresence(ctx context.Context, req *connect.Request[wsgatev1.GetRoomPresenceRequest]) (*connect.Response[wsgatev1.GetRoomPresenceResponse], error) {
	limit := int(req.Msg.GetLimit())
	switch {
	case req.Msg.GetCountsOnly():
		limit = 0
	case limit == 0:
		limit = PresenceReadDefault
	case limit < 0 || limit > MaxPresenceRead:
		return nil, BadRequest("limit must be 1 to %d, got %d", MaxPresenceRead, limit)
	}
	p, err := g.svc.ReadRoomPresence(ctx, req.Msg.GetRoom(), req.Msg.GetCursor(), limit)
	if err != nil {
		return nil, err
	}
	out := &wsgatev1.GetRoomPresenceResponse{Users: p.Users, Connections: p.Connections, Cursor: p.Cursor}
	for _, c := range p.Clients {
		out.Clients = append(out.Clients, &wsgatev1.PresenceClient{User: c.User, ConnId: c.ConnID, Node: c.Node, Device: c.Device, InfoJson: string(c.Info)})
	}
	return connect.NewResponse(out), nil
}

func (g grpcAPI) DrainNode(ctx context.Context, req *connect.Request[wsgatev1.DrainNodeRequest]) (*connect.Response[wsgatev1.DrainNodeResponse], error) {
	id := req.Msg.GetNode()
	if err := g.svc.DrainNode(ctx, id); err != nil {
		return nil, err
	}
	return connect.NewResponse(&wsgatev1.DrainNodeResponse{Node: id, Status: "draining"}), nil
}

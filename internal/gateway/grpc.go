package gateway

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
// (proto/wsgate/v1/api.proto), served by connect-go: gRPC (also over
// plain-text HTTP/2), gRPC-Web and Connect clients. Each method decodes
// its message, calls the operation the JSON API calls (apiops.go) and
// maps an *APIError to the code of its HTTP status.

// grpcAPI implements wsgatev1connect.APIServiceHandler.
type grpcAPI struct{ n *Node }

var _ wsgatev1connect.APIServiceHandler = grpcAPI{}

// grpcHandler is the service's path prefix and handler, with the API key
// and (open dev API) Origin checks and the request bound of the JSON API.
func (n *Node) grpcHandler() (string, http.Handler) {
	path, h := wsgatev1connect.NewAPIServiceHandler(grpcAPI{n},
		connect.WithReadMaxBytes(maxBodyBytes),
		connect.WithInterceptors(connect.UnaryInterceptorFunc(n.grpcErrors)))
	ew := connect.NewErrorWriter()
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ae, wait := n.keyRefusal(r); ae != nil {
			if wait > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(admission.RetrySecs(wait)))
			}
			ew.Write(w, r, grpcError(ae))
			return
		}
		// The open dev API: no foreign page may call it. A browser needs
		// a preflight (never answered) for every content type Connect
		// and gRPC-Web take, so the Origin is the only check left.
		if ae := n.checkOrigin(r); ae != nil {
			ew.Write(w, r, grpcError(ae))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 4500*time.Millisecond)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// grpcErrors turns the operations' errors into Connect errors.
func (n *Node) grpcErrors(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if err == nil {
			return res, nil
		}
		var ce *connect.Error
		if errors.As(err, &ce) {
			return nil, err // from connect itself (decoding, size)
		}
		var ae *APIError
		if !errors.As(err, &ae) {
			ae = unavailable("request", err)
		}
		if ae.Status >= 500 {
			n.log.Warn("API request failed", "procedure", req.Spec().Procedure, "err", ae.Message)
		}
		return nil, grpcError(ae)
	}
}

// grpcError is the Connect error of an API error: the code of its HTTP
// status, the JSON API's code in the wsgate-error-code metadata.
func grpcError(ae *APIError) *connect.Error {
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
		return PublishRequest{}, badRequest("target is required: {\"type\":\"user|room|broadcast\",\"id\":\"...\"}")
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
			return r, badRequest("data must be JSON text")
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
	res, err := g.n.Publish(ctx, r)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(publishResponse(res)), nil
}

func (g grpcAPI) PublishBatch(ctx context.Context, req *connect.Request[wsgatev1.PublishBatchRequest]) (*connect.Response[wsgatev1.PublishBatchResponse], error) {
	msgs := req.Msg.GetMessages()
	if err := checkBatchSize(len(msgs)); err != nil {
		return nil, err
	}
	reqs := make([]PublishRequest, len(msgs))
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		reqs[i], errs[i] = publishRequest(m, req.Header())
	}
	out := &wsgatev1.PublishBatchResponse{Results: make([]*wsgatev1.PublishBatchResult, 0, len(msgs))}
	for _, r := range g.n.PublishBatch(ctx, reqs, errs) {
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
	if err := g.n.JoinRoom(ctx, req.Msg.GetRoom(), req.Msg.GetUser()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&wsgatev1.AddMemberResponse{}), nil
}

func (g grpcAPI) RemoveMember(ctx context.Context, req *connect.Request[wsgatev1.RemoveMemberRequest]) (*connect.Response[wsgatev1.RemoveMemberResponse], error) {
	if err := g.n.LeaveRoom(ctx, req.Msg.GetRoom(), req.Msg.GetUser()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&wsgatev1.RemoveMemberResponse{}), nil
}

func (g grpcAPI) ListMembers(ctx context.Context, req *connect.Request[wsgatev1.ListMembersRequest]) (*connect.Response[wsgatev1.ListMembersResponse], error) {
	members, err := g.n.RoomMembers(ctx, req.Msg.GetRoom())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&wsgatev1.ListMembersResponse{Members: members}), nil
}

func (g grpcAPI) GetHistory(ctx context.Context, req *connect.Request[wsgatev1.GetHistoryRequest]) (*connect.Response[wsgatev1.GetHistoryResponse], error) {
	q := HistoryQuery{Since: req.Msg.GetSince(), Before: req.Msg.GetBefore(), Limit: int(req.Msg.GetLimit()), Reverse: req.Msg.GetReverse()}
	top, msgs, err := g.n.HistoryPage(ctx, req.Msg.GetRoom(), q)
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
	conns, err := g.n.Presence(ctx, req.Msg.GetUser())
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
	closed, err := g.n.DisconnectUser(ctx, req.Msg.GetUser(), req.Msg.GetReason())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&wsgatev1.DisconnectResponse{Disconnected: int32(closed)}), nil
}

func (g grpcAPI) ListNodes(ctx context.Context, req *connect.Request[wsgatev1.ListNodesRequest]) (*connect.Response[wsgatev1.ListNodesResponse], error) {
	nodes, err := g.n.ListNodes(ctx)
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
	list, err := g.n.ListRooms(ctx, req.Msg.GetPrefix(), req.Msg.GetCursor(), int(req.Msg.GetLimit()))
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
		limit = presenceReadDefault
	case limit < 0 || limit > maxPresenceRead:
		return nil, badRequest("limit must be 1 to %d, got %d", maxPresenceRead, limit)
	}
	p, err := g.n.ReadRoomPresence(ctx, req.Msg.GetRoom(), req.Msg.GetCursor(), limit)
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
	if err := g.n.DrainNode(ctx, id); err != nil {
		return nil, err
	}
	return connect.NewResponse(&wsgatev1.DrainNodeResponse{Node: id, Status: "draining"}), nil
}

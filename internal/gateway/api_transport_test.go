package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/config"
	wsgatev1 "github.com/wsgate/wsgate/proto/wsgate/v1"
	"github.com/wsgate/wsgate/proto/wsgate/v1/wsgatev1connect"
	"github.com/wsgate/wsgate/protocol"
)

// apiTransport is one way to call the server API: the JSON API or the
// protobuf service over gRPC, gRPC-Web or Connect. The shared API tests
// run against each (forEachTransport); an error is compared as the HTTP
// status and contract code it stands for.
type apiTransport interface {
	publish(key string, r api.PublishRequest, hdr http.Header) (api.PublishResult, *apiErr)
	batch(key string, rs []api.PublishRequest) ([]batchItem, *apiErr)
	join(key, room, user string) *apiErr
	leave(key, room, user string) *apiErr
	members(key, room string) ([]string, *apiErr)
	history(key, room string, since int64, limit int) (int64, []protocol.Message, *apiErr)
	presence(key, user string) ([]api.PresenceConn, *apiErr)
	disconnect(key, user, reason string) (int, *apiErr)
	nodes(key string) ([]api.NodeEntry, *apiErr)
	drain(key, node string) *apiErr
}

// apiErr is an API error: the HTTP status (or the status the gRPC code
// stands for) and the contract's code.
type apiErr struct {
	status  int
	code    string
	message string
}

// batchItem is one result of a batch: a publish answer or an error.
type batchItem struct {
	res api.PublishResult
	err *apiErr
}

// forEachTransport runs f against a fresh node over every transport.
func forEachTransport(t *testing.T, f func(t *testing.T, n *testNode, tr apiTransport)) {
	for _, name := range []string{"http", "grpc", "grpcweb", "connect"} {
		t.Run(name, func(t *testing.T) {
			n := startNode(t, nil)
			f(t, n, newTransport(t, n, name))
		})
	}
}

func newTransport(t *testing.T, n *testNode, name string) apiTransport {
	if name == "http" {
		return httpTransport{t: t, base: "http://" + n.addr}
	}
	// Plain-text HTTP/2 (prior knowledge) as gRPC clients speak it.
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: protos}}
	t.Cleanup(hc.CloseIdleConnections)
	var opts []connect.ClientOption
	switch name {
	case "grpc":
		opts = append(opts, connect.WithGRPC())
	case "grpcweb":
		opts = append(opts, connect.WithGRPCWeb())
	}
	return grpcTransport{c: wsgatev1connect.NewAPIServiceClient(hc, "http://"+n.addr, opts...)}
}

type httpTransport struct {
	t    *testing.T
	base string
}

// call sends a JSON API request and decodes the answer into out (or the
// error body).
func (h httpTransport) call(method, path, key string, body []byte, hdr http.Header, out any) *apiErr {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.base+path, bytes.NewReader(body))
	for k, v := range hdr {
		req.Header[k] = v
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(b, &e)
		return &apiErr{status: resp.StatusCode, code: e.Error.Code, message: e.Error.Message}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return nil
}

// publishJSON is a publish as the JSON API takes it.
func publishJSON(r api.PublishRequest) map[string]any {
	m := map[string]any{"target": r.Target, "event": r.Event, "reliable": r.Reliable, "class": r.Class, "idempotency_key": r.IdempotencyKey}
	if r.Data != nil {
		m["data"] = r.Data
	}
	if r.Key != "" {
		m["key"] = r.Key
	}
	return m
}

func (h httpTransport) publish(key string, r api.PublishRequest, hdr http.Header) (api.PublishResult, *apiErr) {
	b, _ := json.Marshal(publishJSON(r))
	var res api.PublishResult
	return res, h.call("POST", "/api/v1/publish", key, b, hdr, &res)
}

func (h httpTransport) batch(key string, rs []api.PublishRequest) ([]batchItem, *apiErr) {
	msgs := make([]any, len(rs))
	for i, r := range rs {
		msgs[i] = publishJSON(r)
	}
	b, _ := json.Marshal(map[string]any{"messages": msgs})
	var out struct {
		Results []struct {
			api.PublishResult
			Error *struct{ Code, Message string }
		}
	}
	if e := h.call("POST", "/api/v1/publish/batch", key, b, nil, &out); e != nil {
		return nil, e
	}
	items := make([]batchItem, len(out.Results))
	for i, r := range out.Results {
		items[i].res = r.PublishResult
		if r.Error != nil {
			items[i].err = &apiErr{status: 200, code: r.Error.Code, message: r.Error.Message}
		}
	}
	return items, nil
}

func (h httpTransport) join(key, room, user string) *apiErr {
	return h.call("PUT", "/api/v1/rooms/"+url.PathEscape(room)+"/members/"+url.PathEscape(user), key, nil, nil, nil)
}

func (h httpTransport) leave(key, room, user string) *apiErr {
	return h.call("DELETE", "/api/v1/rooms/"+url.PathEscape(room)+"/members/"+url.PathEscape(user), key, nil, nil, nil)
}

func (h httpTransport) members(key, room string) ([]string, *apiErr) {
	var out struct{ Members []string }
	e := h.call("GET", "/api/v1/rooms/"+url.PathEscape(room)+"/members", key, nil, nil, &out)
	return out.Members, e
}

func (h httpTransport) history(key, room string, since int64, limit int) (int64, []protocol.Message, *apiErr) {
	var out struct {
		Seq      int64
		Messages []protocol.Message
	}
	q := url.Values{"since": {strconv.FormatInt(since, 10)}, "limit": {strconv.Itoa(limit)}}
	e := h.call("GET", "/api/v1/rooms/"+url.PathEscape(room)+"/history?"+q.Encode(), key, nil, nil, &out)
	return out.Seq, out.Messages, e
}

func (h httpTransport) presence(key, user string) ([]api.PresenceConn, *apiErr) {
	var out struct {
		Online      bool
		Connections []api.PresenceConn
	}
	e := h.call("GET", "/api/v1/users/"+url.PathEscape(user)+"/presence", key, nil, nil, &out)
	if e == nil && out.Online != (len(out.Connections) > 0) {
		h.t.Errorf("presence: online %v with %d connections", out.Online, len(out.Connections))
	}
	return out.Connections, e
}

func (h httpTransport) disconnect(key, user, reason string) (int, *apiErr) {
	b, _ := json.Marshal(map[string]string{"reason": reason})
	var out struct{ Disconnected int }
	e := h.call("POST", "/api/v1/users/"+url.PathEscape(user)+"/disconnect", key, b, nil, &out)
	return out.Disconnected, e
}

func (h httpTransport) nodes(key string) ([]api.NodeEntry, *apiErr) {
	var out struct{ Nodes []api.NodeEntry }
	e := h.call("GET", "/api/v1/nodes", key, nil, nil, &out)
	return out.Nodes, e
}

func (h httpTransport) drain(key, node string) *apiErr {
	return h.call("POST", "/api/v1/nodes/"+url.PathEscape(node)+"/drain", key, nil, nil, nil)
}

type grpcTransport struct {
	c wsgatev1connect.APIServiceClient
}

// grpcStatus is the HTTP status a Connect code stands for (internal/api/grpc.go).
var grpcStatus = map[connect.Code]int{
	connect.CodeInvalidArgument:    400,
	connect.CodeUnauthenticated:    401,
	connect.CodePermissionDenied:   403,
	connect.CodeNotFound:           404,
	connect.CodeAlreadyExists:      409,
	connect.CodeResourceExhausted:  413,
	connect.CodeUnavailable:        503,
	connect.CodeInternal:           500,
	connect.CodeDeadlineExceeded:   504,
	connect.CodeFailedPrecondition: 412,
}

func asAPIErr(err error) *apiErr {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return &apiErr{status: -1, message: err.Error()}
	}
	return &apiErr{status: grpcStatus[ce.Code()], code: ce.Meta().Get("wsgate-error-code"), message: ce.Message()}
}

func request[T any](key string, m *T, hdr http.Header) *connect.Request[T] {
	req := connect.NewRequest(m)
	for k, v := range hdr {
		req.Header()[k] = v
	}
	if key != "" {
		req.Header().Set("Authorization", "Bearer "+key)
	}
	return req
}

func grpcCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func publishMessage(r api.PublishRequest) *wsgatev1.PublishRequest {
	m := &wsgatev1.PublishRequest{Event: r.Event, Data: string(r.Data), Reliable: r.Reliable, Class: r.Class, IdempotencyKey: r.IdempotencyKey, Key: r.Key}
	if r.Target != (protocol.Target{}) {
		m.Target = &wsgatev1.Target{Type: r.Target.Type, Id: r.Target.ID}
	}
	return m
}

func publishResult(m *wsgatev1.PublishResponse) api.PublishResult {
	return api.PublishResult{ID: m.GetId(), Seq: m.GetSeq(), Online: m.Online}
}

func (g grpcTransport) publish(key string, r api.PublishRequest, hdr http.Header) (api.PublishResult, *apiErr) {
	ctx, cancel := grpcCtx()
	defer cancel()
	res, err := g.c.Publish(ctx, request(key, publishMessage(r), hdr))
	if err != nil {
		return api.PublishResult{}, asAPIErr(err)
	}
	return publishResult(res.Msg), nil
}

func (g grpcTransport) batch(key string, rs []api.PublishRequest) ([]batchItem, *apiErr) {
	ctx, cancel := grpcCtx()
	defer cancel()
	m := &wsgatev1.PublishBatchRequest{}
	for _, r := range rs {
		m.Messages = append(m.Messages, publishMessage(r))
	}
	res, err := g.c.PublishBatch(ctx, request(key, m, nil))
	if err != nil {
		return nil, asAPIErr(err)
	}
	items := make([]batchItem, len(res.Msg.GetResults()))
	for i, r := range res.Msg.GetResults() {
		if e := r.GetError(); e != nil {
			items[i].err = &apiErr{status: 200, code: e.GetCode(), message: e.GetMessage()}
		} else {
			items[i].res = publishResult(r.GetOk())
		}
	}
	return items, nil
}

func (g grpcTransport) join(key, room, user string) *apiErr {
	ctx, cancel := grpcCtx()
	defer cancel()
	_, err := g.c.AddMember(ctx, request(key, &wsgatev1.AddMemberRequest{Room: room, User: user}, nil))
	return asAPIErr(err)
}

func (g grpcTransport) leave(key, room, user string) *apiErr {
	ctx, cancel := grpcCtx()
	defer cancel()
	_, err := g.c.RemoveMember(ctx, request(key, &wsgatev1.RemoveMemberRequest{Room: room, User: user}, nil))
	return asAPIErr(err)
}

func (g grpcTransport) members(key, room string) ([]string, *apiErr) {
	ctx, cancel := grpcCtx()
	defer cancel()
	res, err := g.c.ListMembers(ctx, request(key, &wsgatev1.ListMembersRequest{Room: room}, nil))
	if err != nil {
		return nil, asAPIErr(err)
	}
	return res.Msg.GetMembers(), nil
}

func (g grpcTransport) history(key, room string, since int64, limit int) (int64, []protocol.Message, *apiErr) {
	ctx, cancel := grpcCtx()
	defer cancel()
	res, err := g.c.GetHistory(ctx, request(key, &wsgatev1.GetHistoryRequest{Room: room, Since: since, Limit: int32(limit)}, nil))
	if err != nil {
		return 0, nil, asAPIErr(err)
	}
	var out []protocol.Message
	for _, m := range res.Msg.GetMessages() {
		out = append(out, protocol.Message{ID: m.GetId(), Event: m.GetEvent(), Data: json.RawMessage(m.GetData()), TS: m.GetTs(), Seq: m.GetSeq(), From: m.GetFrom()})
	}
	return res.Msg.GetSeq(), out, nil
}

func (g grpcTransport) presence(key, user string) ([]api.PresenceConn, *apiErr) {
	ctx, cancel := grpcCtx()
	defer cancel()
	res, err := g.c.GetPresence(ctx, request(key, &wsgatev1.GetPresenceRequest{User: user}, nil))
	if err != nil {
		return nil, asAPIErr(err)
	}
	var out []api.PresenceConn
	for _, c := range res.Msg.GetConnections() {
		out = append(out, api.PresenceConn{ConnID: c.GetConnId(), Node: c.GetNode(), ConnectedAt: c.GetConnectedAt(), Device: c.GetDevice(), Info: rawOrNil(c.GetInfoJson())})
	}
	if res.Msg.GetOnline() != (len(out) > 0) {
		return out, &apiErr{status: -1, message: "online disagrees with the connections"}
	}
	return out, nil
}

func (g grpcTransport) disconnect(key, user, reason string) (int, *apiErr) {
	ctx, cancel := grpcCtx()
	defer cancel()
	res, err := g.c.Disconnect(ctx, request(key, &wsgatev1.DisconnectRequest{User: user, Reason: reason}, nil))
	if err != nil {
		return 0, asAPIErr(err)
	}
	return int(res.Msg.GetDisconnected()), nil
}

func (g grpcTransport) nodes(key string) ([]api.NodeEntry, *apiErr) {
	ctx, cancel := grpcCtx()
	defer cancel()
	res, err := g.c.ListNodes(ctx, request(key, &wsgatev1.ListNodesRequest{}, nil))
	if err != nil {
		return nil, asAPIErr(err)
	}
	var out []api.NodeEntry
	for _, x := range res.Msg.GetNodes() {
		out = append(out, api.NodeEntry{ID: x.GetId(), URL: x.GetUrl(), Status: x.GetStatus(), Connections: int(x.GetConnections()), Weight: int(x.GetWeight()),
			HeartbeatAgeMS: x.GetHeartbeatAgeMs(), StartedAt: x.GetStartedAt(), Version: x.GetVersion(), Load: x.GetLoad()})
	}
	return out, nil
}

func (g grpcTransport) drain(key, node string) *apiErr {
	ctx, cancel := grpcCtx()
	defer cancel()
	_, err := g.c.DrainNode(ctx, request(key, &wsgatev1.DrainNodeRequest{Node: node}, nil))
	return asAPIErr(err)
}

// wantErr checks an error's status, code and message.
func wantErr(t *testing.T, what string, e *apiErr, status int, code, msg string) {
	t.Helper()
	if e == nil {
		t.Errorf("%s: no error, want %d %s", what, status, code)
		return
	}
	if e.status != status || e.code != code || !strings.Contains(e.message, msg) {
		t.Errorf("%s: got %d %q %q, want %d %q mentioning %q", what, e.status, e.code, e.message, status, code, msg)
	}
}

func TestAPIPublishErrors(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n *testNode, tr apiTransport) {
		u := protocolTarget("user", "u")
		for _, tc := range []struct {
			r   api.PublishRequest
			msg string
		}{
			{api.PublishRequest{Target: protocolTarget("planet", "x")}, "target.type"},
			{api.PublishRequest{Target: u, Class: "urgent"}, "class"},
			{api.PublishRequest{Target: protocolTarget("broadcast", ""), Reliable: true}, "reliable"},
			{api.PublishRequest{Target: protocolTarget("user", "")}, "target."},
			{api.PublishRequest{Event: "e"}, "target"},
			{api.PublishRequest{Target: u, Event: strings.Repeat("e", 300)}, "event"},
		} {
			_, e := tr.publish("k", tc.r, nil)
			wantErr(t, "publish "+tc.msg, e, 400, "bad_request", tc.msg)
		}
		_, e := tr.publish("k", api.PublishRequest{Target: u, Data: raw(`"` + strings.Repeat("x", 1<<20) + `"`)}, nil)
		if e == nil || e.status != 413 {
			t.Errorf("a message over 1 MiB: %+v, want 413 (resource_exhausted)", e)
		}
		_, e = tr.publish("", api.PublishRequest{Target: u}, nil)
		wantErr(t, "no key", e, 401, "unauthorized", "Bearer")
		_, e = tr.publish("kk", api.PublishRequest{Target: u}, nil)
		wantErr(t, "wrong key", e, 401, "unauthorized", "invalid API key")
		body := api.PublishRequest{Target: u, Event: "a", IdempotencyKey: "key-1"}
		if _, e := tr.publish("k", body, nil); e != nil {
			t.Fatalf("publish: %+v", e)
		}
		body.Event = "b"
		_, e = tr.publish("k", body, nil)
		wantErr(t, "key reused with another body", e, 409, "conflict", "idempotency_key")
	})
}

func protocolTarget(typ, id string) protocol.Target {
	return protocol.Target{Type: typ, ID: id}
}

func TestAPIPublishDeliversAndRetriesByKey(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n *testNode, tr apiTransport) {
		c := n.connect(t, "ivy", "")
		body := api.PublishRequest{Target: protocolTarget("user", "ivy"), Event: "once", Data: raw(`{"n":1}`), Reliable: true, IdempotencyKey: "order-42"}
		r1, e1 := tr.publish("k", body, nil)
		r2, e2 := tr.publish("k", body, nil)
		if e1 != nil || e2 != nil || r1.ID != r2.ID || r1.Seq != 1 || r2.Seq != 1 || r1.Online == nil || !*r1.Online {
			t.Fatalf("retry answered differently: %+v %+v / %+v %+v", r1, e1, r2, e2)
		}
		if m := c.expect("message"); m["event"] != "once" || m["data"].(map[string]any)["n"] != 1.0 {
			t.Fatalf("delivered %v", m)
		}
		if _, e := tr.publish("k", api.PublishRequest{Target: protocolTarget("user", "ivy"), Event: "marker"}, nil); e != nil {
			t.Fatal(e)
		}
		if m := c.expect("message"); m["event"] != "marker" {
			t.Fatalf("duplicate delivery: %v", m)
		}
	})
}

func TestAPIBatchKeepsGoodMessages(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n *testNode, tr apiTransport) {
		c := n.connect(t, "gus", "")
		gus := protocolTarget("user", "gus")
		items, e := tr.batch("k", []api.PublishRequest{
			{Target: gus, Event: "one", Reliable: true},
			{Target: protocolTarget("nowhere", "")},
			{Target: gus, Event: "two", Reliable: true},
		})
		if e != nil || len(items) != 3 {
			t.Fatalf("batch: %+v %+v", items, e)
		}
		if items[0].err != nil || items[0].res.Seq != 1 || items[2].err != nil || items[2].res.Seq != 2 {
			t.Fatalf("results %+v", items)
		}
		wantErr(t, "bad message", items[1].err, 200, "bad_request", "target.type")
		if c.expect("message")["event"] != "one" || c.expect("message")["event"] != "two" {
			t.Fatal("batch order")
		}
		big := make([]api.PublishRequest, 1001)
		for i := range big {
			big[i].Target = protocolTarget("broadcast", "")
		}
		_, e = tr.batch("k", big)
		wantErr(t, "1001 messages", e, 400, "bad_request", "at most 1000")
		_, e = tr.batch("", big[:1])
		wantErr(t, "no key", e, 401, "unauthorized", "Bearer")
	})
}

func TestAPIRoomHistory(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n *testNode, tr apiTransport) {
		room := protocolTarget("room", "h")
		for i := 1; i <= 3; i++ {
			res, e := tr.publish("k", api.PublishRequest{Target: room, Event: "e", Data: raw(strconv.Itoa(i)), Reliable: true}, nil)
			if e != nil || res.Seq != int64(i) {
				t.Fatalf("publish %d: %+v %+v", i, res, e)
			}
		}
		top, msgs, e := tr.history("k", "h", 1, 1)
		if e != nil || top != 3 || len(msgs) != 1 || msgs[0].Seq != 2 || string(msgs[0].Data) != "2" || msgs[0].Event != "e" || msgs[0].ID == "" || msgs[0].TS == 0 {
			t.Fatalf("history since 1 limit 1: seq %d %+v %+v", top, msgs, e)
		}
		if top, msgs, e := tr.history("k", "h", 0, 10); e != nil || top != 3 || len(msgs) != 3 {
			t.Fatalf("history since 0: seq %d %d messages %+v", top, len(msgs), e)
		}
		if top, msgs, e := tr.history("k", "never-reliable", 0, 10); e != nil || top != 0 || len(msgs) != 0 {
			t.Fatalf("history of a plain room: seq %d %+v %+v", top, msgs, e)
		}
		_, _, e = tr.history("k", "h", 0, 5000)
		wantErr(t, "history limit 5000", e, 400, "bad_request", "limit")
		_, _, e = tr.history("k", strings.Repeat("r", 300), 0, 1)
		wantErr(t, "history of a bad name", e, 400, "bad_request", "room")
		_, _, e = tr.history("", "h", 0, 1)
		wantErr(t, "history without a key", e, 401, "unauthorized", "Bearer")
	})
}

func TestAPIPresenceMembersDisconnect(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n *testNode, tr apiTransport) {
		c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "hal", map[string]any{"info": map[string]any{"seat": 9}})}}, true)
		c.expect("welcome")
		conns, e := tr.presence("k", "hal")
		if e != nil || len(conns) != 1 || conns[0].Node != "t1" || conns[0].ConnID == "" || conns[0].ConnectedAt == 0 || string(conns[0].Info) != `{"seat":9}` {
			t.Fatalf("presence %+v %+v", conns, e)
		}
		if conns, e := tr.presence("k", "nobody"); e != nil || len(conns) != 0 {
			t.Fatalf("presence of nobody %+v %+v", conns, e)
		}
		_, e = tr.presence("k", strings.Repeat("u", 300))
		wantErr(t, "presence of a bad name", e, 400, "bad_request", "user")
		if e := tr.join("k", "r1", "hal"); e != nil {
			t.Fatalf("join %+v", e)
		}
		if m, e := tr.members("k", "r1"); e != nil || len(m) != 1 || m[0] != "hal" {
			t.Fatalf("members %v %+v", m, e)
		}
		if e := tr.leave("k", "r1", "hal"); e != nil {
			t.Fatalf("leave %+v", e)
		}
		if m, e := tr.members("k", "r1"); e != nil || m == nil || len(m) != 0 {
			// The JSON API answers [] (never null); protobuf has no null.
			if _, isHTTP := tr.(httpTransport); isHTTP || e != nil || len(m) != 0 {
				t.Fatalf("members after leave %v %+v", m, e)
			}
		}
		_, e = tr.members("", "r1")
		wantErr(t, "members without a key", e, 401, "unauthorized", "Bearer")
		if d, e := tr.disconnect("k", "hal", "bye"); e != nil || d != 1 {
			t.Fatalf("disconnect %d %+v", d, e)
		}
		if code := c.waitClosed(5 * time.Second); code != 4003 {
			t.Fatalf("close %d", code)
		}
		eventually(t, 5*time.Second, "the route removed", func() bool {
			conns, e := tr.presence("k", "hal")
			return e == nil && len(conns) == 0
		})
		if d, e := tr.disconnect("k", "hal", ""); e != nil || d != 0 {
			t.Fatalf("disconnect again %d %+v", d, e)
		}
		nodes, e := tr.nodes("k")
		if e != nil || len(nodes) != 1 || nodes[0].ID != "t1" || nodes[0].Status != "active" || nodes[0].URL == "" {
			t.Fatalf("nodes %+v %+v", nodes, e)
		}
		wantErr(t, "drain an unknown node", tr.drain("k", "ghost"), 404, "not_found", "ghost")
		if e := tr.drain("k", "t1"); e != nil {
			t.Fatalf("drain %+v", e)
		}
		<-n.drained
	})
}

// The open API of wsgate dev answers its own pages only, over gRPC and
// Connect too: a foreign Origin is permission_denied.
func TestGRPCDevAPIRefusesForeignOrigin(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.APIKey = ""; c.Dev = true })
	for _, name := range []string{"grpc", "connect"} {
		tr := newTransport(t, n, name)
		if _, e := tr.publish("", api.PublishRequest{Target: protocolTarget("broadcast", "")}, nil); e != nil {
			t.Fatalf("%s: dev API without Origin: %+v", name, e)
		}
		_, e := tr.publish("", api.PublishRequest{Target: protocolTarget("broadcast", "")}, http.Header{"Origin": {"https://evil.example"}})
		wantErr(t, name+" from a foreign Origin", e, 403, "origin_forbidden", "own pages")
	}
}

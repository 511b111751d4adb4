package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

// PublishRequest is one message to publish (API body, client publish).
type PublishRequest struct {
	Target         protocol.Target
	Event          string
	Data           json.RawMessage
	Reliable       bool
	Class          string
	IdempotencyKey string
}

// PublishResult is the API's answer to a publish.
type PublishResult struct {
	ID     string `json:"id"`
	Seq    int64  `json:"seq,omitempty"`
	Online *bool  `json:"online,omitempty"`
}

// APIError is an error with its HTTP status and contract code.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string { return e.Message }

func badRequest(format string, a ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf(format, a...)}
}

// unavailable converts a backend failure into the API's 503.
func unavailable(op string, err error) *APIError {
	return &APIError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: fmt.Sprintf("cluster backend unavailable (%s): %v", op, err)}
}

// Validate checks a publish request and fills defaults.
func (r *PublishRequest) Validate() (class, error) {
	switch r.Target.Type {
	case protocol.TargetUser, protocol.TargetRoom:
		if err := protocol.ValidName("target.id", r.Target.ID); err != nil {
			return 0, badRequest("%v", err)
		}
	case protocol.TargetBroadcast:
		r.Target.ID = ""
	case "":
		return 0, badRequest("target.type is required (user, room or broadcast)")
	default:
		return 0, badRequest("target.type must be user, room or broadcast, got %q", r.Target.Type)
	}
	cl, ok := parseClass(r.Class)
	if !ok {
		return 0, badRequest("class must be realtime, chat or notify, got %q", r.Class)
	}
	if r.Reliable && r.Target.Type != protocol.TargetUser {
		return 0, badRequest("reliable is only for user targets in v1")
	}
	if len(r.Event) > protocol.MaxNameBytes {
		return 0, badRequest("event is longer than %d bytes", protocol.MaxNameBytes)
	}
	if len(r.Data) == 0 {
		r.Data = json.RawMessage("null")
	}
	return cl, nil
}

// idempotencyTTL is how long a publish answer is kept for its key.
const idempotencyTTL = 5 * time.Minute

// Publish delivers a message to its target wherever in the cluster it is:
// to the nodes that hold the user's connections, the nodes with a member
// of the room online, or every node. With an idempotency key, a retry
// within 5 minutes gets the first answer and delivers nothing again.
func (n *Node) Publish(ctx context.Context, r PublishRequest) (PublishResult, error) {
	cl, err := r.Validate()
	if err != nil {
		return PublishResult{}, err
	}
	if r.IdempotencyKey == "" {
		return n.publish(ctx, r, cl)
	}
	if len(r.IdempotencyKey) > protocol.MaxNameBytes {
		return PublishResult{}, badRequest("idempotency_key is longer than %d bytes", protocol.MaxNameBytes)
	}
	for {
		claimed, answer, err := n.backend.ClaimKey(ctx, r.IdempotencyKey, idempotencyTTL)
		if err != nil {
			return PublishResult{}, unavailable("idempotency key", err)
		}
		if claimed {
			break
		}
		if answer != nil {
			var res PublishResult
			if err := json.Unmarshal(answer, &res); err != nil {
				return PublishResult{}, unavailable("idempotency key", err)
			}
			return res, nil
		}
		// The first publish with this key is still running: wait for its
		// answer, within the request's deadline.
		select {
		case <-ctx.Done():
			return PublishResult{}, &APIError{Status: http.StatusConflict, Code: "conflict", Message: "a publish with this idempotency_key is still in progress"}
		case <-time.After(20 * time.Millisecond):
		}
	}
	res, err := n.publish(ctx, r, cl)
	// The key outlives the request's deadline: store it on a fresh one.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*time.Second)
	defer cancel()
	if err != nil {
		_ = n.backend.ReleaseKey(sctx, r.IdempotencyKey)
		return res, err
	}
	b, _ := json.Marshal(res)
	if err := n.backend.StoreKey(sctx, r.IdempotencyKey, b, idempotencyTTL); err != nil {
		n.log.Warn("idempotency answer not stored; a retry would publish again", "err", err)
	}
	return res, nil
}

func (n *Node) publish(ctx context.Context, r PublishRequest, cl class) (PublishResult, error) {
	now := time.Now()
	msg := protocol.Message{ID: n.newID(), Event: r.Event, Data: r.Data, TS: now.UnixMilli(), Target: r.Target}
	res := PublishResult{ID: msg.ID}
	n.metrics.Published.WithLabelValues(r.Target.Type).Inc()
	switch r.Target.Type {
	case protocol.TargetUser:
		var routes []cluster.Route
		if r.Reliable {
			stored := protocol.AppendMessageJSON(nil, &msg)
			start := time.Now()
			ar, err := n.backend.AppendInbox(ctx, r.Target.ID, stored, n.inboxOpts())
			n.observe("publish", start, err)
			if err != nil {
				return PublishResult{}, unavailable("inbox append", err)
			}
			msg.Seq, res.Seq, routes = ar.Seq, ar.Seq, ar.Routes
		} else {
			start := time.Now()
			var err error
			routes, err = n.backend.UserRoutes(ctx, r.Target.ID)
			n.observe("route", start, err)
			if err != nil {
				return PublishResult{}, unavailable("routes", err)
			}
		}
		online := len(routes) > 0
		res.Online = &online
		nodes := routeNodes(routes)
		n.route(ctx, nodes, &msg, cl, now)
	case protocol.TargetRoom:
		start := time.Now()
		nodes, err := n.backend.RoomNodes(ctx, r.Target.ID)
		n.observe("rooms", start, err)
		if err != nil {
			return PublishResult{}, unavailable("room nodes", err)
		}
		n.route(ctx, nodes, &msg, cl, now)
	case protocol.TargetBroadcast:
		// Over the bus first: a broadcast answered 503 is delivered
		// nowhere, so that a retry does not deliver it twice here.
		body := protocol.AppendMessageJSON(nil, &msg)
		env := encodeEnvelope(envelope{Kind: kindMessage, TType: r.Target.Type, Class: uint8(cl), PubAt: now.UnixNano(), Origin: n.cfg.NodeID}, body)
		start := time.Now()
		err := n.backend.Broadcast(ctx, env)
		n.observe("bus", start, err)
		if err != nil {
			return PublishResult{}, unavailable("broadcast", err)
		}
		n.deliverLocal(r.Target, newDelivery(body, cl, 0, now.UnixNano()))
	}
	return res, nil
}

// route delivers msg locally if this node is among nodes, and sends it to
// the others over the bus.
func (n *Node) route(ctx context.Context, nodes []string, msg *protocol.Message, cl class, now time.Time) {
	if len(nodes) == 0 {
		return
	}
	body := protocol.AppendMessageJSON(nil, msg)
	var remote []string
	for _, id := range nodes {
		if id == n.cfg.NodeID {
			n.deliverLocal(msg.Target, newDelivery(body, cl, msg.Seq, now.UnixNano()))
		} else {
			remote = append(remote, id)
		}
	}
	if len(remote) == 0 {
		return
	}
	env := encodeEnvelope(envelope{Kind: kindMessage, TType: msg.Target.Type, TID: msg.Target.ID, Class: uint8(cl), Seq: msg.Seq, PubAt: now.UnixNano(), Origin: n.cfg.NodeID}, body)
	start := time.Now()
	err := n.backend.Send(ctx, remote, env)
	n.observe("bus", start, err)
	if err != nil {
		n.log.Warn("bus send failed", "nodes", remote, "seq", msg.Seq, "err", err)
		if msg.Seq > 0 {
			// The message is in the inbox, but an open connection would
			// see it only behind the next one: send again in the
			// background (a connection drops a seq it already has).
			n.goFunc(func() { n.resend(remote, env) })
		}
	}
}

// resend retries a reliable message's bus envelope for up to a minute.
func (n *Node) resend(nodes []string, env []byte) {
	delay := 200 * time.Millisecond
	for attempt := 0; attempt < 12; attempt++ {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(delay):
		}
		ctx, cancel := context.WithTimeout(n.ctx, 4*time.Second)
		err := n.backend.Send(ctx, nodes, env)
		cancel()
		if err == nil {
			return
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// deliverLocal hands a message to this node's connections of the target.
func (n *Node) deliverLocal(t protocol.Target, d *delivery) {
	switch t.Type {
	case protocol.TargetUser:
		n.deliverAll(n.hub.userConns(t.ID), d)
	case protocol.TargetRoom:
		n.deliverAll(n.hub.roomConns(t.ID), d)
	case protocol.TargetBroadcast:
		n.deliverAll(n.hub.all(), d)
	}
}

func routeNodes(routes []cluster.Route) []string {
	var out []string
	for _, r := range routes {
		dup := false
		for _, x := range out {
			if x == r.Node {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, r.Node)
		}
	}
	return out
}

// isUnavailable reports a backend outage.
func isUnavailable(err error) bool { return errors.Is(err, cluster.ErrUnavailable) }

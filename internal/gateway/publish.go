package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/tracing"
	"github.com/wsgate/wsgate/protocol"
)

// validate checks a publish request and fills defaults.
func validate(r *api.PublishRequest) (class, error) {
	switch r.Target.Type {
	case protocol.TargetUser, protocol.TargetRoom:
		if err := protocol.ValidName("target.id", r.Target.ID); err != nil {
			return 0, api.BadRequest("%v", err)
		}
	case protocol.TargetBroadcast:
		r.Target.ID = ""
	case "":
		return 0, api.BadRequest("target.type is required (user, room or broadcast)")
	default:
		return 0, api.BadRequest("target.type must be user, room or broadcast, got %q", r.Target.Type)
	}
	cl, ok := parseClass(r.Class)
	if !ok {
		return 0, api.BadRequest("class must be realtime, chat or notify, got %q", r.Class)
	}
	if r.Reliable && r.Target.Type == protocol.TargetBroadcast {
		return 0, api.BadRequest("reliable is for user and room targets, not broadcast")
	}
	if len(r.Event) > protocol.MaxNameBytes {
		return 0, api.BadRequest("event is longer than %d bytes", protocol.MaxNameBytes)
	}
	if r.Except != "" {
		if err := protocol.ValidName("except", r.Except); err != nil {
			return 0, api.BadRequest("%v", err)
		}
	}
	if err := validKey(r.Key, cl, r.Reliable); err != nil {
		return 0, err
	}
	if len(r.Data) == 0 {
		r.Data = json.RawMessage("null")
	}
	return cl, nil
}

// idempotencyTTL is how long a publish answer is kept for its key.
const idempotencyTTL = cluster.KeyLifetime

// Publish delivers a message to its target wherever in the cluster it is:
// to the nodes that hold the user's connections, the nodes with a member
// of the room online, or every node. With an idempotency key, a retry
// within 5 minutes gets the first answer and stores and delivers nothing
// again, also when the first try ended in an error after which the message
// may have been stored: the key keeps the first try's message id, and the
// inbox append is bound to the key (cluster.InboxAppend.Key). A key reused
// with another body is answered 409.
func (n *Node) Publish(ctx context.Context, r api.PublishRequest) (api.PublishResult, error) {
	n.applyNamespace(&r)
	cl, err := validate(&r)
	if err != nil {
		return api.PublishResult{}, err
	}
	if r.IdempotencyKey == "" {
		return n.publish(ctx, r, cl, n.newID())
	}
	if len(r.IdempotencyKey) > protocol.MaxNameBytes {
		return api.PublishResult{}, api.BadRequest("idempotency_key is longer than %d bytes", protocol.MaxNameBytes)
	}
	fp := fingerprint(&r, cl)
	id := n.newID()
	for {
		kc, err := n.backend.ClaimKey(ctx, r.IdempotencyKey, fp, id, idempotencyTTL)
		if err != nil {
			return api.PublishResult{}, api.Unavailable("idempotency key", err)
		}
		if kc.Conflict {
			return api.PublishResult{}, &api.Error{Status: http.StatusConflict, Code: "conflict", Message: "idempotency_key was used with another message (target, event, data, reliable or class differ)"}
		}
		if kc.Claimed {
			id = kc.ID
			break
		}
		if kc.Answer != nil {
			var res api.PublishResult
			if err := json.Unmarshal(kc.Answer, &res); err != nil {
				return api.PublishResult{}, api.Unavailable("idempotency key", err)
			}
			return res, nil
		}
		// The first publish with this key is still running: wait for its
		// answer, within the request's deadline. Without it the outcome is
		// not known yet: 503, retry with the same key (409 is only for a
		// key reused with another body).
		select {
		case <-ctx.Done():
			return api.PublishResult{}, &api.Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "a publish with this idempotency_key is still in progress; retry with the same key"}
		case <-time.After(20 * time.Millisecond):
		}
	}
	res, err := n.publish(ctx, r, cl, id)
	// The key outlives the request's deadline: store it on a fresh one.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*time.Second)
	defer cancel()
	if err != nil {
		// The claim stays with its fingerprint and message id; a retry
		// takes it over (and finds the message if it was stored).
		_ = n.backend.ReleaseKey(sctx, r.IdempotencyKey)
		return res, err
	}
	b, _ := json.Marshal(res)
	if err := n.backend.StoreKey(sctx, r.IdempotencyKey, b, idempotencyTTL); err != nil {
		n.log.Warn("idempotency answer not stored; a retry would publish again", "err", err)
	}
	return res, nil
}

// fingerprint identifies the body of a publish for its idempotency key:
// target, event, data, reliable and class.
func fingerprint(r *api.PublishRequest, cl class) string {
	h := sha256.New()
	for _, f := range []string{r.Target.Type, r.Target.ID, r.Event, string(r.Data)} {
		var l [8]byte
		binary.BigEndian.PutUint64(l[:], uint64(len(f)))
		h.Write(l[:])
		h.Write([]byte(f))
	}
	h.Write([]byte{byte(cl), boolByte(r.Reliable)})
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func (n *Node) publish(ctx context.Context, r api.PublishRequest, cl class, id string) (api.PublishResult, error) {
	if r.Traceparent != "" {
		if p, ok := tracing.Parse(r.Traceparent); ok {
			return n.publishTraced(ctx, r, cl, id, p)
		}
	}
	return n.publishMsg(ctx, r, cl, id, "")
}

// publishTraced publishes a message with a trace context: under a span
// (when spans are exported), logged with its trace id, the context sent
// on with the message (tp of the envelopes).
func (n *Node) publishTraced(ctx context.Context, r api.PublishRequest, cl class, id string, p tracing.Parent) (api.PublishResult, error) {
	span := n.tracer.Start(ctx, "wsgate.publish", p, trace.SpanKindServer,
		attribute.String("wsgate.target.type", r.Target.Type), attribute.String("wsgate.target.id", r.Target.ID),
		attribute.String("wsgate.message.id", id), attribute.Bool("wsgate.reliable", r.Reliable))
	res, err := n.publishMsg(ctx, r, cl, id, span.Parent(p).String())
	span.End(err)
	n.log.Info("publish", "message_id", id, "target_type", r.Target.Type, "target", r.Target.ID, "seq", res.Seq, "trace_id", p.TraceIDString(), "err", err)
	return res, err
}

// publishMsg publishes a validated message; tp is the trace context its
// envelopes carry ("" for none).
func (n *Node) publishMsg(ctx context.Context, r api.PublishRequest, cl class, id, tp string) (api.PublishResult, error) {
	now := time.Now()
	msg := protocol.Message{ID: id, Event: r.Event, Data: r.Data, TS: now.UnixMilli(), Target: r.Target, From: r.From}
	res := api.PublishResult{ID: msg.ID}
	n.metrics.Published.WithLabelValues(r.Target.Type).Inc()
	switch r.Target.Type {
	case protocol.TargetUser:
		var routes []cluster.Route
		if r.Reliable {
			stored := protocol.AppendMessageJSON(nil, &msg)
			start := time.Now()
			var ar cluster.AppendResult
			var err error
			if r.IdempotencyKey == "" {
				ar, err = n.backend.AppendInbox(ctx, r.Target.ID, stored, n.inboxOpts())
			} else {
				// Bound to the key in the same step: a retry after an
				// error finds the message and its seq.
				o := n.backend.AppendInboxes(ctx, []cluster.InboxAppend{{User: r.Target.ID, Payload: stored, Key: r.IdempotencyKey}}, n.inboxOpts())[0]
				ar, err = o.AppendResult, o.Err
			}
			n.observe("publish", start, err)
			if err != nil {
				return api.PublishResult{}, api.Unavailable("inbox append", err)
			}
			msg.Seq, res.Seq, routes = ar.Seq, ar.Seq, ar.Routes
			if !ar.Existing && n.events.undeliveredOn() {
				n.events.appended(ctx, []cluster.Due{{User: r.Target.ID, Seq: ar.Seq, MessageID: msg.ID, Event: msg.Event}})
			}
		} else {
			start := time.Now()
			var err error
			routes, err = n.lb.AllUserRoutes(ctx, r.Target.ID)
			n.observe("route", start, err)
			if err != nil {
				return api.PublishResult{}, api.Unavailable("routes", err)
			}
		}
		// Delivered to every route's node (one that is only late with its
		// heartbeat still gets it; a dead one's channel has no listener),
		// counted as online only for the live ones.
		online := len(n.lb.Live(routes)) > 0
		res.Online = &online
		nodes := routeNodes(routes)
		n.route(ctx, nodes, &msg, cl, now, tp, r.Except, r.Key)
	case protocol.TargetRoom:
		if r.Reliable {
			// One step: the room's next seq, the history and its trim,
			// and the room's nodes (cluster.Backend.AppendRooms).
			start := time.Now()
			o := n.backend.AppendRooms(ctx, []cluster.RoomAppend{{Room: r.Target.ID, Payload: protocol.AppendMessageJSON(nil, &msg), Key: r.IdempotencyKey}}, n.historyOpts(r.Target.ID))[0]
			n.observe("publish", start, o.Err)
			if o.Err != nil {
				return api.PublishResult{}, api.Unavailable("room history append", o.Err)
			}
			if !o.Existing {
				n.metrics.RoomHistory.Inc()
			}
			msg.Seq, res.Seq = o.Seq, o.Seq
			n.route(ctx, o.Nodes, &msg, cl, now, tp, r.Except, r.Key)
			break
		}
		start := time.Now()
		nodes, err := n.backend.RoomNodes(ctx, r.Target.ID)
		n.observe("rooms", start, err)
		if err != nil {
			return api.PublishResult{}, api.Unavailable("room nodes", err)
		}
		n.route(ctx, nodes, &msg, cl, now, tp, r.Except, r.Key)
	case protocol.TargetBroadcast:
		// Over the bus first: a broadcast answered 503 is delivered
		// nowhere, so that a retry does not deliver it twice here.
		// The envelope carries the send's deadline: a receiver drops it
		// when it arrives after the caller was answered 503.
		bctx, cancel := context.WithTimeout(ctx, busSendTimeout)
		defer cancel()
		dl, _ := bctx.Deadline()
		body := protocol.AppendMessageJSON(nil, &msg)
		env := encodeEnvelope(envelope{Kind: kindMessage, TType: r.Target.Type, Class: uint8(cl), PubAt: now.UnixNano(), Origin: n.cfg.NodeID, Deadline: dl.UnixMilli(), TP: tp, Except: r.Except, Key: r.Key}, body)
		start := time.Now()
		err := n.backend.Broadcast(bctx, env)
		n.observe("bus", start, err)
		if err != nil {
			return api.PublishResult{}, api.Unavailable("broadcast", err)
		}
		d := newDelivery(body, cl, 0, now.UnixNano()).keyed(r.Target, r.Key)
		d.except = r.Except
		n.deliverLocal(r.Target, d)
		n.logTraced(tp, r.Target, 0)
	}
	return res, nil
}

// busSendTimeout bounds a bus send whose failure is answered to the caller
// (a broadcast): below the Redis read timeout, so that the send fails at
// its context's deadline at the earliest, the deadline its envelope
// carries.
const busSendTimeout = 1500 * time.Millisecond

// route delivers msg locally if this node is among nodes, and sends it to
// the others over the bus (with the trace context tp, if any, the
// connection that does not get it, if any, and the conflation key, if any).
func (n *Node) route(ctx context.Context, nodes []string, msg *protocol.Message, cl class, now time.Time, tp, except, key string) {
	if len(nodes) == 0 {
		return
	}
	body := protocol.AppendMessageJSON(nil, msg)
	var remote []string
	for _, id := range nodes {
		if id == n.cfg.NodeID {
			d := newBusDelivery(msg.Target.Type, msg.Target.ID, body, cl, msg.Seq, now.UnixNano()).keyed(msg.Target, key)
			d.except = except
			n.deliverLocal(msg.Target, d)
			n.logTraced(tp, msg.Target, msg.Seq)
		} else {
			remote = append(remote, id)
		}
	}
	if len(remote) == 0 {
		return
	}
	env := encodeEnvelope(envelope{Kind: kindMessage, TType: busTargetType(msg.Target.Type, msg.Seq), TID: msg.Target.ID, Class: uint8(cl), Seq: msg.Seq, PubAt: now.UnixNano(), Origin: n.cfg.NodeID, TP: tp, Except: except, Key: key}, body)
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

// bulkMsg is one message of publishBulk.
type bulkMsg struct {
	req   *api.PublishRequest
	cl    class
	msg   protocol.Message
	nodes []string // where the user's connections are
	live  bool     // one of them is on a live node (answered online)
	res   *any     // where its answer goes
	ok    bool     // stored (reliable) or routed: it is answered and delivered
	body  []byte   // the message as delivered (once answered and online)
}

// publishBulk publishes the user messages of a batch (no idempotency key)
// together: every inbox append in one pipeline (AppendInboxes), every
// route lookup of the non-reliable ones in another (UsersRoutes), then
// one bus envelope per node carrying all of that node's messages in batch
// order (SendEach). Messages to one user keep their order: their seqs
// follow the batch order, and so do their places in each envelope and in
// the local deliveries. Each message gets its own answer in results.
func (n *Node) publishBulk(ctx context.Context, reqs []api.PublishRequest, classes []class, idx []int, results []any) {
	now := time.Now()
	ms := make([]bulkMsg, len(idx))
	var appends []cluster.InboxAppend
	var appendAt []int // index in ms of each append
	var users []string
	userAt := map[string]int{}
	var plainAt []int // index in ms of each non-reliable message
	for k, i := range idx {
		r := &reqs[i]
		m := &ms[k]
		m.req, m.cl, m.res = r, classes[i], &results[i]
		id := r.MessageID
		if id == "" {
			id = n.newID()
		}
		m.msg = protocol.Message{ID: id, Event: r.Event, Data: r.Data, TS: now.UnixMilli(), Target: r.Target, From: r.From}
		if r.Reliable {
			// IdempotencyKey: a downstream record's, bound at the append
			// (publishRecord); the API's batches come without one.
			appends = append(appends, cluster.InboxAppend{User: r.Target.ID, Payload: protocol.AppendMessageJSON(make([]byte, 0, msgSize(&m.msg)), &m.msg), Key: r.IdempotencyKey})
			appendAt = append(appendAt, k)
			continue
		}
		if _, ok := userAt[r.Target.ID]; !ok {
			userAt[r.Target.ID] = len(users)
			users = append(users, r.Target.ID)
		}
		plainAt = append(plainAt, k)
	}
	n.metrics.Published.WithLabelValues(protocol.TargetUser).Add(float64(len(idx)))

	// The appends and the route reads are independent: run them at once.
	var wg sync.WaitGroup
	if len(users) > 0 {
		wg.Go(func() {
			start := time.Now()
			all, err := n.lb.AllUsersRoutes(ctx, users)
			n.observe("route", start, err)
			for _, k := range plainAt {
				m := &ms[k]
				if err != nil {
					*m.res = map[string]protocol.ErrorBody{"error": api.ErrorBody(api.Unavailable("routes", err))}
					continue
				}
				routes := all[userAt[m.req.Target.ID]]
				m.nodes, m.live, m.ok = routeNodes(routes), len(n.lb.Live(routes)) > 0, true
			}
		})
	}
	if len(appends) > 0 {
		start := time.Now()
		outs := n.backend.AppendInboxes(ctx, appends, n.inboxOpts())
		var dues []cluster.Due // undelivered checks, when on
		var firstErr error
		for j, o := range outs {
			m := &ms[appendAt[j]]
			if o.Err != nil {
				firstErr = cmpOr(firstErr, o.Err)
				*m.res = map[string]protocol.ErrorBody{"error": api.ErrorBody(api.Unavailable("inbox append", o.Err))}
				continue
			}
			m.msg.Seq = o.Seq
			m.nodes, m.live, m.ok = routeNodes(o.Routes), len(n.lb.Live(o.Routes)) > 0, true
			if !o.Existing && n.events.undeliveredOn() {
				dues = append(dues, cluster.Due{User: m.req.Target.ID, Seq: o.Seq, MessageID: m.msg.ID, Event: m.msg.Event})
			}
		}
		n.observe("publish", start, firstErr)
		n.events.appended(ctx, dues)
	}
	wg.Wait()

	// Answers and local deliveries; then one envelope per other node,
	// sized beforehand.
	pubAt := now.UnixNano()
	size := map[string]int{}
	for k := range ms {
		m := &ms[k]
		if !m.ok {
			continue
		}
		online := m.live
		*m.res = api.PublishResult{ID: m.msg.ID, Seq: m.msg.Seq, Online: &online}
		if len(m.nodes) == 0 {
			continue
		}
		m.body = protocol.AppendMessageJSON(make([]byte, 0, msgSize(&m.msg)), &m.msg)
		for _, id := range m.nodes {
			if id == n.cfg.NodeID {
				n.deliverLocal(m.msg.Target, newDelivery(m.body, m.cl, m.msg.Seq, pubAt))
			} else {
				size[id] += recordSize(m.msg.Target, m.body)
			}
		}
	}
	var envs []cluster.BusMessage
	envAt := make(map[string]int, len(size))
	for k := range ms {
		m := &ms[k]
		if m.body == nil {
			continue
		}
		for _, id := range m.nodes {
			if id == n.cfg.NodeID {
				continue
			}
			e, ok := envAt[id]
			if !ok {
				e = len(envs)
				envAt[id] = e
				envs = append(envs, cluster.BusMessage{Node: id, Payload: append(make([]byte, 0, len(batchHeader)+size[id]), batchHeader...)})
			}
			envs[e].Payload = appendRecord(envs[e].Payload, m.msg.Target, m.cl, m.msg.Seq, pubAt, m.body)
		}
	}
	if len(envs) == 0 {
		return
	}
	start := time.Now()
	err := n.backend.SendEach(ctx, envs)
	n.observe("bus", start, err)
	if err == nil {
		return
	}
	n.log.Warn("bus send failed", "nodes", len(envs), "messages", len(ms), "err", err)
	// The reliable messages are in the inboxes, but an open connection
	// would see them only behind the next one: send them again in the
	// background (a connection drops a seq it already has). The others
	// are not sent twice.
	for _, e := range envs {
		again := append([]byte(nil), batchHeader...)
		for k := range ms {
			m := &ms[k]
			if m.body != nil && m.msg.Seq > 0 && slices.Contains(m.nodes, e.Node) {
				again = appendRecord(again, m.msg.Target, m.cl, m.msg.Seq, pubAt, m.body)
			}
		}
		if len(again) > len(batchHeader) {
			n.goFunc(func() { n.resend([]string{e.Node}, again) })
		}
	}
}

// msgSize is room for a message's JSON (AppendMessageJSON), so that it is
// built without growing: the fixed keys, the numbers, and the strings with
// room for a few escapes.
func msgSize(m *protocol.Message) int {
	return 128 + len(m.Data) + 2*(len(m.ID)+len(m.Event)+len(m.Target.ID)+len(m.From))
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
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

// applyNamespace makes a publish to a room of a reliable namespace
// reliable.
func (n *Node) applyNamespace(r *api.PublishRequest) {
	if r.Target.Type == protocol.TargetRoom && n.ns(r.Target.ID).Reliable {
		r.Reliable = true
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

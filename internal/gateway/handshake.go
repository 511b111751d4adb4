package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/netpoll"
	"github.com/wsgate/wsgate/protocol"
)

const subprotocol = "wsgate.v1"

var upgrader = ws.HTTPUpgrader{
	// Only wsgate.v1 is ever selected: a bearer.<jwt> entry is read for
	// the token and never echoed back.
	Protocol: func(p string) bool { return p == subprotocol },
}

// refuse answers a handshake through net/http.
func (n *Node) refuse(w http.ResponseWriter, f *admission.Refusal) {
	n.metrics.HandshakeRejected.WithLabelValues(f.Reason).Inc()
	if s := f.RetryAfterSecs(); s > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(s))
	}
	api.WriteError(w, f.Status, f.Code, f.Msg)
}

// admit runs the checks of contract §3 that need no backend call, in the
// contract's order. On success the caller owns an IP slot (see admission.Params).
func (n *Node) admit(req *admission.Request) (admission.Params, *admission.Refusal) {
	a, f := n.gate.Peer(req)
	if f != nil {
		return a, f
	}
	a.Deflate = n.acceptsDeflate(req)
	if f := a.ParseQuery(req.Query, admission.MaxRoomSince); f != nil {
		return a, f
	}
	return n.gate.Credentials(context.Background(), req, a, false)
}

// admitHTTP runs every check of a handshake that net/http holds (the
// wait for a key set included): admit, the connect proxy, the user's
// connection limit. A refusal releases what admit took.
func (n *Node) admitHTTP(ctx context.Context, req *admission.Request) (admission.Params, *admission.Refusal) {
	a, f := n.admit(req)
	if f != nil && f.AwaitKeys {
		a, f = n.gate.Credentials(ctx, req, a, true)
	}
	if f == nil {
		if f = n.gate.AskProxy(ctx, &a); f == nil {
			f = n.checkUserLimit(ctx, a.Claims.Subject)
		}
		if f != nil {
			n.gate.Release(&a)
		}
	}
	return a, f
}

// checkUserLimit applies WSGATE_MAX_CONNS_PER_USER (a backend read).
func (n *Node) checkUserLimit(ctx context.Context, user string) *admission.Refusal {
	max := n.cfg.MaxConnsPerUser
	if max <= 0 {
		return nil
	}
	ctx, cancel := n.bctx(ctx)
	routes, err := n.backend.UserRoutes(ctx, user)
	cancel()
	if err != nil {
		f := admission.Refuse(http.StatusServiceUnavailable, "unavailable", "cluster backend unavailable")
		f.RetryAfter = 5 * time.Second
		return f
	}
	if len(routes) >= max && n.cfg.DevicePolicy != config.DeviceSingle {
		return userLimitRefusal(user)
	}
	return nil
}

func userLimitRefusal(user string) *admission.Refusal {
	f := admission.Refuse(http.StatusTooManyRequests, "rate_limited", "user "+user+" has too many connections")
	f.Reason, f.RetryAfter = "conn_limit", 5*time.Second
	return f
}

// connLimit is WSGATE_MAX_CONNS_PER_USER as Connect applies it atomically
// (the single device policy replaces connections instead).
func (n *Node) connLimit() cluster.ConnLimit {
	if n.cfg.DevicePolicy == config.DeviceSingle {
		return cluster.ConnLimit{}
	}
	return cluster.ConnLimit{Max: max(n.cfg.MaxConnsPerUser, 0)}
}

// newConn is the connection of an admitted handshake (not yet in the hub).
func (n *Node) newConn(a *admission.Params, fd int, tlsc *tlsIO, tp uint8) *conn {
	now := time.Now()
	c := &conn{
		n: n, fd: fd, tlsc: tlsc, tp: tp, format: a.Format, deflate: a.Deflate, idSeq: n.idSeq.Add(1), user: a.Claims.Subject,
		connectedAt: now.UnixMilli(), lastRead: now.Unix(),
		nextPing: now.Add(n.cfg.PingInterval).Unix(),
	}
	if n.cfg.MaxConnsPerIP > 0 {
		c.ip = a.IP // the connection releases its IP slot when it ends
	}
	if tp == tpPusher {
		c.user = n.pusherSocketID(c.idSeq) // nobody is authenticated (pusher.go)
	}
	c.meta = n.metas.get(grants(a.Claims), a.Device)
	c.exp = n.connExp(a.Claims)
	if len(a.Claims.Info) > 0 { // for presence (the route) and the connect record
		c.extra().info = a.Claims.Info
	}
	n.metrics.ConnectionsTotal.WithLabelValues(tpNames[tp]).Inc()
	n.accepted.Add(1)
	return c
}

// serveWS is the WebSocket endpoint through net/http: TLS 1.2 clients,
// requests on kept-alive HTTP connections and Handler() users. TCP
// listeners, plain or TLS 1.3, take the node's own accept path.
func (n *Node) serveWS(w http.ResponseWriter, r *http.Request) {
	if !admission.IsUpgrade(r) {
		n.refuse(w, admission.Refuse(http.StatusBadRequest, "bad_request", "not a WebSocket upgrade request (GET with Upgrade: websocket, Sec-WebSocket-Version: 13)"))
		return
	}
	if p := headOf(r).problem(); p != "" {
		n.refuse(w, admission.Refuse(http.StatusBadRequest, "bad_request", p))
		return
	}
	if !n.startHandshake() {
		n.refuse(w, admission.ShuttingDown())
		return
	}
	defer n.endHandshake()
	req := admission.FromHTTP(r)
	a, f := n.admitHTTP(r.Context(), &req)
	if f != nil {
		n.refuse(w, f)
		return
	}
	netConn, rw, _, err := httpUpgrader(&a).Upgrade(r, w)
	if err != nil {
		n.gate.Release(&a)
		n.metrics.HandshakeRejected.WithLabelValues("bad_request").Inc()
		return // gobwas has answered 400
	}
	// The server's read deadline (a request arrives whole within 10 s)
	// must not end the connection.
	_ = netConn.SetDeadline(time.Time{})
	var initial []byte
	if rw != nil && rw.Reader.Buffered() > 0 {
		initial, _ = rw.Reader.Peek(rw.Reader.Buffered())
		initial = append([]byte(nil), initial...)
	}
	fd, tlsc, ok := n.takeUpgraded(netConn, &a)
	if !ok {
		return
	}
	n.establish(n.newConn(&a, fd, tlsc, tpWS), a.IP, a.Since, a.HasSince, a.RoomSince, initial)
}

// takeUpgraded takes a connection net/http upgraded: its descriptor into
// the event loop, or a TLS connection as crypto/tls keeps it (a reader
// and a writer goroutine, see tls.go). On failure it releases a and
// closes the connection.
func (n *Node) takeUpgraded(netConn net.Conn, a *admission.Params) (fd int, tlsc *tlsIO, ok bool) {
	if tc, ok := netConn.(tlsStream); ok {
		return -1, newTLSIO(tc), true
	}
	fd, err := netpoll.TakeFD(netConn)
	if err != nil {
		n.gate.Release(a)
		netConn.Close()
		n.log.Error("cannot take the socket into the event loop", "err", err)
		return -1, nil, false
	}
	return fd, nil, true
}

// establish registers the upgraded connection, sends welcome, the gap and
// the replay, then the live messages held meanwhile, and starts reading.
func (n *Node) establish(c *conn, ip string, since int64, hasSince bool, roomSince map[string]int64, initial []byte) {
	n.hub.add(c)
	ctx, cancel := n.bctx(n.hsCtx)
	defer cancel()
	refuseOrClose := func(f *admission.Refusal, code int) {
		c.mu.Lock()
		if c.preamble && c.state == stResuming {
			// The 101 has not gone out (own accept path): refuse instead.
			n.metrics.HandshakeRejected.WithLabelValues(f.Reason).Inc()
			c.writeRawLocked(f.Response())
			c.outq = nil
		} else {
			c.closeWithReasonLocked(code, f.Msg)
		}
		c.mu.Unlock()
		c.teardown("setup failed")
	}
	fail := func(what string, err error) {
		c.logger().Warn("connection setup failed", "step", what, "err", err)
		f := admission.Refuse(http.StatusServiceUnavailable, "unavailable", "cluster backend unavailable")
		f.RetryAfter = 5 * time.Second
		if n.hsCtx.Err() != nil {
			f = admission.ShuttingDown()
		}
		refuseOrClose(f, 1011)
	}
	// One backend step: the route is stored, then the user's rooms and
	// inbox are read (see cluster.Backend.Connect for why in that order).
	start := time.Now()
	// Without since the backend reads from the device's acknowledgement.
	from := since
	if !hasSince {
		from = -1
	}
	cr, err := n.backend.Connect(ctx, c.route(), n.cfg.RouteTTL, from, n.inboxOpts(), n.connLimit())
	n.observe("route", start, err)
	if errors.Is(err, cluster.ErrConnLimit) {
		// checkUserLimit let it through, but concurrent handshakes of the
		// user took the last places first: the atomic check decides.
		refuseOrClose(userLimitRefusal(c.user), protocol.CloseRateLimited)
		return
	}
	if err != nil {
		fail("connect", err)
		return
	}
	rd := cr.Inbox
	if n.cfg.DevicePolicy == config.DeviceSingle {
		n.replaceOthers(ctx, c)
	}
	if added := n.hub.setRooms(c.user, cr.Rooms); len(added) > 0 {
		if err := n.declareInterestCtx(ctx, added); err != nil {
			fail("room interest", err)
			return
		}
	}

	// The reliable rooms, read after the room interest is declared: a
	// room message appended later comes live (held until open).
	rooms, err := n.resumeRooms(ctx, cr.Rooms, roomSince)
	if err != nil {
		fail("room history", err)
		return
	}

	w := protocol.Welcome{
		Type: protocol.TypeWelcome, ConnID: c.connID(), Node: n.cfg.NodeID, User: c.user,
		PingIntervalMS: n.cfg.PingInterval.Milliseconds(), InboxSeq: rd.LastSeq, Device: c.deviceName(), Rooms: rooms.seqs,
	}
	if isHTTPStream(c.tp) {
		w.Session, w.Transport = n.session(c.connID()), tpNames[c.tp]
	}
	welcome, _ := protocol.Encode(c.format, w)
	c.mu.Lock()
	if c.state != stResuming {
		c.mu.Unlock()
		return
	}
	head := 0
	if c.preamble { // the 101 answer stays first
		head, c.preamble = 1, false
	}
	c.outq = slices.Insert(c.outq, head, c.dataFrame(welcome))
	// Open, then queue the replays and what arrived live meanwhile. The
	// socket of a new connection is writable: the welcome and the replay
	// go out from here (a full queue is written inline, never taken for
	// a slow client).
	c.state = stOpen
	if n.events != nil {
		n.events.openedLocked(c, ip, c.extra().info)
	}
	// After a data loss the node lowers the inbox's position
	// (recoverConnections).
	c.sess.ResumeInbox(c.driver(), since, hasSince, sessionRead(rd), cr.Unconfirmed)
	if !cr.Unconfirmed {
		c.kickLocked()
	}
	rooms.queueLocked(c)
	if c.sess.Release(c.driver()) {
		c.kickLocked()
	}
	c.writeOutLocked()
	c.kickLocked()
	c.mu.Unlock()
	if n.log.Enabled(ctx, slog.LevelInfo) {
		c.logger().Info("connection open", "ip", ip, "format", c.format.String(), "since", since, "replayed", len(rd.Messages), "tls", c.tlsc != nil || c.tr != nil)
	}
	// Bytes that came with the handshake are parsed before the socket's
	// reader starts, so that one reader at a time touches the parser.
	c.feed(initial)
	c.startReading()
	n.presenceEnterRooms(c)
}

// startReading hands the socket to its reader: the event loop, or for a
// TLS connection its own reader and writer goroutines.
func (c *conn) startReading() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stClosed {
		return
	}
	if c.tlsc != nil {
		c.n.goFunc(c.tlsReader)
		c.n.goFunc(c.tlsWriter)
		return
	}
	if c.token.Registered() {
		// Own accept path: the socket is registered already; from now on
		// its events go to the connection.
		if err := c.n.poller.Rebind(c.fd, c.token, c); err != nil {
			c.teardownLocked("rebind: " + err.Error())
		}
		return
	}
	tok, err := c.n.poller.Register(c.fd, c)
	if err != nil {
		c.teardownLocked("register: " + err.Error())
		return
	}
	c.token = tok
}

// replaceOthers applies the single device policy once c's route is
// stored: of all the user's connections the newest (by connect time, then
// id) stays; every node closes the older ones it holds with 4009, and a
// connection that finds a newer one closes itself. Whatever the timing of
// two logins on two nodes, the later reader sees both routes, so exactly
// one connection remains.
func (n *Node) replaceOthers(ctx context.Context, c *conn) {
	routes, err := n.backend.UserRoutes(ctx, c.user)
	if err != nil {
		return
	}
	me := c.connID()
	newer := func(r cluster.Route) bool {
		return r.ConnectedAt > c.connectedAt || (r.ConnectedAt == c.connectedAt && r.ConnID > me)
	}
	older := map[string][]string{} // node -> conn ids to close
	for _, r := range routes {
		if r.ConnID == me {
			continue
		}
		if newer(r) {
			c.close(protocol.CloseReplaced, "replaced by a newer connection")
			return
		}
		older[r.Node] = append(older[r.Node], r.ConnID)
	}
	// The older connections close before the new one is welcomed; a node
	// that does not confirm within 2 s is still asked afterwards, until
	// the connection is gone or the node is dead.
	wait, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n.closeConns(wait, c.user, older, protocol.CloseReplaced, "replaced by a newer connection")
}

// forget removes an ended connection from the hub, the cluster and the
// limits. Runs once per connection, off the lock.
func (n *Node) forget(c *conn) {
	n.presenceClose(c) // before the hub forgets c: a change racing the close finds it closed
	emptied, found := n.hub.remove(c)
	if !found {
		return
	}
	if c.tp == tpPusher {
		n.pusherRates.Delete(c)
	}
	if c.ip != "" {
		n.gate.IPConns().Release(c.ip)
	}
	n.removeRoute(cluster.Route{User: c.user, ConnID: c.connID(), Node: n.cfg.NodeID})
	if len(emptied) > 0 {
		n.dropInterest(emptied)
	}
}

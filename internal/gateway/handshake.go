package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/auth"
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

// refusal is a handshake answered before the upgrade (contract §3).
type refusal struct {
	status     int
	code       string // the error code in the body
	reason     string // the metric label
	msg        string
	retryAfter time.Duration
	awaitKeys  bool // the token names a kid the key set lacks: retry after a refresh (admitToken)
}

func refuseWith(status int, code, msg string) *refusal {
	return &refusal{status: status, code: code, reason: code, msg: msg}
}

// retryAfterSecs is the Retry-After value of a 429 or 503 refusal (0: none).
func (f *refusal) retryAfterSecs() int {
	if f.status != http.StatusTooManyRequests && f.status != http.StatusServiceUnavailable {
		return 0
	}
	return retrySecs(f.retryAfter)
}

// retrySecs is a wait as a Retry-After value: whole seconds, rounded up,
// at least 1.
func retrySecs(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

func (f *refusal) body() []byte { return errorJSON(f.code, f.msg) }

// errorJSON is the body of every refused request (contract §3, §5).
func errorJSON(code, msg string) []byte {
	b, _ := json.Marshal(map[string]protocol.ErrorBody{"error": {Code: code, Message: msg}})
	return append(b, '\n')
}

// refuse answers a handshake through net/http.
func (n *Node) refuse(w http.ResponseWriter, f *refusal) {
	n.metrics.HandshakeRejected.WithLabelValues(f.reason).Inc()
	if s := f.retryAfterSecs(); s > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(s))
	}
	writeError(w, f.status, f.code, f.msg)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(errorJSON(code, msg))
}

func isUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet &&
		headerHasToken(r.Header, "Connection", "upgrade") &&
		headerHasToken(r.Header, "Upgrade", "websocket") &&
		r.Header.Get("Sec-WebSocket-Version") == "13" &&
		r.Header.Get("Sec-WebSocket-Key") != ""
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// wsRequest is what a handshake is judged on, read by net/http (serveWS)
// or by the node's own accept path (accept.go).
type wsRequest struct {
	ip        string
	query     url.Values
	origin    string
	host      string
	authz     string   // the Authorization header
	protocols []string // the Sec-WebSocket-Protocol headers
	xff       string   // X-Forwarded-For (all of them, comma-joined)
	realIP    string   // X-Real-IP
	cookie    string   // Cookie (all of them, "; "-joined), for WSGATE_CONNECT_URL
	userAgent string   // User-Agent, for WSGATE_CONNECT_URL
	exts      [][]byte // the Sec-WebSocket-Extensions headers (deflate.go)
	path      string   // the request's path (own accept path only)
}

func requestOf(r *http.Request) wsRequest {
	return wsRequest{
		ip: peerIP(r), query: r.URL.Query(), origin: r.Header.Get("Origin"), host: r.Host,
		authz: r.Header.Get("Authorization"), protocols: r.Header.Values("Sec-WebSocket-Protocol"),
		xff: strings.Join(r.Header.Values("X-Forwarded-For"), ","), realIP: r.Header.Get("X-Real-Ip"),
		cookie: strings.Join(r.Header.Values("Cookie"), "; "), userAgent: r.Header.Get("User-Agent"),
		exts: headerBytes(r.Header.Values("Sec-Websocket-Extensions")),
	}
}

// trustedPeer reports whether a peer address is one of
// WSGATE_TRUSTED_PROXIES.
func (n *Node) trustedPeer(ip string) bool {
	if len(n.trusted) == 0 {
		return false
	}
	a, err := netip.ParseAddr(ip)
	return err == nil && n.trustedAddr(a.Unmap())
}

func (n *Node) trustedAddr(a netip.Addr) bool {
	for _, p := range n.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP is the address the per-IP limits and logs use: the peer's, or
// for a trusted proxy the rightmost X-Forwarded-For entry that is not one
// of our proxies; X-Real-IP only when there is no X-Forwarded-For. An
// entry that does not parse ends the walk at the last hop we trust: what
// lies left of it is the client's to forge.
func (n *Node) clientIP(req *wsRequest) string {
	if !n.trustedPeer(req.ip) {
		return req.ip
	}
	if req.xff != "" {
		parts := strings.Split(req.xff, ",")
		for i := len(parts) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[i]))
			if err != nil {
				break
			}
			if a = a.Unmap(); !n.trustedAddr(a) {
				return a.String()
			}
		}
		return req.ip
	}
	if a, err := netip.ParseAddr(strings.TrimSpace(req.realIP)); err == nil {
		return a.Unmap().String()
	}
	return req.ip
}

// token reads the client token: Authorization header, then a
// bearer.<jwt> subprotocol entry, then the token query parameter.
func (n *Node) token(req *wsRequest) string {
	if a := req.authz; len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	for _, v := range req.protocols {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); strings.HasPrefix(p, "bearer.") {
				return p[len("bearer."):]
			}
		}
	}
	if n.cfg.AllowQueryToken {
		return req.query.Get("token")
	}
	return ""
}

func peerIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// admission is an accepted handshake's parameters. It holds one slot of
// the per-IP connection limit until the connection takes it over or
// release is called.
type admission struct {
	ip        string
	claims    *auth.Claims
	format    protocol.Format
	since     int64
	hasSince  bool
	device    string           // "" for the default device
	proxy     []byte           // the WSGATE_CONNECT_URL request still to make (claims is nil until then)
	roomSince map[string]int64 // room_since: reliable rooms to resume
	deflate   bool             // permessage-deflate accepted (deflate.go)
	tp        uint8            // the transport (tpWS, or tpPusher on /app/{key})
}

// admit runs the checks of contract §3 that need no backend call, in the
// contract's order. On success the caller owns an IP slot (see admission).
func (n *Node) admit(req *wsRequest) (admission, *refusal) {
	a, f := n.admitPeer(req)
	if f != nil {
		return a, f
	}
	a.deflate = n.acceptsDeflate(req)
	var err error
	if a.format, err = protocol.ParseFormat(req.query.Get("format")); err != nil {
		return a, refuseWith(http.StatusBadRequest, "bad_request", err.Error())
	}
	if s := req.query.Get("since"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return a, refuseWith(http.StatusBadRequest, "bad_request", "since must be a non-negative integer, got "+strconv.Quote(s))
		}
		a.since, a.hasSince = v, true
	}
	if d, ok := req.query["device"]; ok {
		if len(d) != 1 {
			return a, refuseWith(http.StatusBadRequest, "bad_request", "device must be given once")
		}
		if err := protocol.ValidDevice(d[0]); err != nil {
			return a, refuseWith(http.StatusBadRequest, "bad_request", err.Error())
		}
		if d[0] != protocol.DefaultDevice {
			a.device = d[0]
		}
	}
	if a.roomSince, err = parseRoomSince(req.query["room_since"], maxRoomSince); err != nil {
		return a, refuseWith(http.StatusBadRequest, "bad_request", err.Error())
	}
	return n.admitToken(context.Background(), req, a, false)
}

// admitPeer runs the first checks of every handshake, in the contract's
// order: the node accepts connections, the Origin, the handshake rate.
func (n *Node) admitPeer(req *wsRequest) (admission, *refusal) {
	req.ip = n.clientIP(req)
	a := admission{ip: req.ip}
	if !n.accepting() {
		f := refuseWith(http.StatusServiceUnavailable, "unavailable", "node not accepting connections ("+n.notReadyReason()+")")
		f.retryAfter = 5 * time.Second
		return a, f
	}
	if !n.origins.AllowOrigin(req.origin, req.host) {
		return a, refuseWith(http.StatusForbidden, "origin_forbidden", "Origin "+req.origin+" is not allowed")
	}
	if ok, after := n.hsLimiter.Allow(req.ip, time.Now()); !ok {
		f := refuseWith(http.StatusTooManyRequests, "rate_limited", "too many handshakes from "+req.ip)
		f.retryAfter = after
		return a, f
	}
	return a, nil
}

// admitToken is the rest of admit: the token, then the per-IP slot. On the
// event loop (wait false) it never blocks: a token naming a kid the key
// set lacks, when a refresh of the set is due, gets a refusal with
// awaitKeys, and the caller runs admitToken again with wait on a goroutine
// of its own.
// admitHTTP runs every check of a handshake that net/http holds (the
// wait for a key set included): admit, the connect proxy, the user's
// connection limit. A refusal releases what admit took.
func (n *Node) admitHTTP(ctx context.Context, req *wsRequest) (admission, *refusal) {
	a, f := n.admit(req)
	if f != nil && f.awaitKeys {
		a, f = n.admitToken(ctx, req, a, true)
	}
	if f == nil {
		if f = n.askProxy(ctx, &a); f == nil {
			f = n.checkUserLimit(ctx, a.claims.Subject)
		}
		if f != nil {
			n.release(&a)
		}
	}
	return a, f
}

func (n *Node) admitToken(ctx context.Context, req *wsRequest, a admission, wait bool) (admission, *refusal) {
	var err error
	if n.useConnectProxy(req) {
		// Asked off the event loop, once the IP slot is held (askProxy).
		a.proxy = connectRequest(req)
	} else if a.claims, err = n.authenticate(ctx, req, wait); err != nil {
		f := authRefusal(err)
		if !wait && errors.Is(err, auth.ErrTokenKid) && n.keys.RefreshDue() {
			f.awaitKeys = true
		}
		return a, f
	}
	return a, n.acquireIP(req.ip)
}

// acquireIP takes one slot of the per-IP connection limit (see admission).
func (n *Node) acquireIP(ip string) *refusal {
	if !n.ipConns.Acquire(ip) {
		f := refuseWith(http.StatusTooManyRequests, "rate_limited", "too many connections from "+ip)
		f.reason, f.retryAfter = "conn_limit", 5*time.Second
		return f
	}
	return nil
}

func (n *Node) release(a *admission) { n.ipConns.Release(a.ip) }

// shuttingDown refuses a handshake that comes once Shutdown has started.
func shuttingDown() *refusal {
	f := refuseWith(http.StatusServiceUnavailable, "unavailable", "node shutting down")
	f.retryAfter = time.Second
	return f
}

// checkUserLimit applies WSGATE_MAX_CONNS_PER_USER (a backend read).
func (n *Node) checkUserLimit(ctx context.Context, user string) *refusal {
	max := n.cfg.MaxConnsPerUser
	if max <= 0 {
		return nil
	}
	ctx, cancel := n.bctx(ctx)
	routes, err := n.backend.UserRoutes(ctx, user)
	cancel()
	if err != nil {
		f := refuseWith(http.StatusServiceUnavailable, "unavailable", "cluster backend unavailable")
		f.retryAfter = 5 * time.Second
		return f
	}
	if len(routes) >= max && n.cfg.DevicePolicy != config.DeviceSingle {
		return userLimitRefusal(user)
	}
	return nil
}

func userLimitRefusal(user string) *refusal {
	f := refuseWith(http.StatusTooManyRequests, "rate_limited", "user "+user+" has too many connections")
	f.reason, f.retryAfter = "conn_limit", 5*time.Second
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
func (n *Node) newConn(a *admission, fd int, tlsc *tlsIO, tp uint8) *conn {
	now := time.Now()
	c := &conn{
		n: n, fd: fd, tlsc: tlsc, tp: tp, format: a.format, deflate: a.deflate, idSeq: n.idSeq.Add(1), user: a.claims.Subject,
		connectedAt: now.UnixMilli(), lastRead: now.Unix(),
		nextPing: now.Add(n.cfg.PingInterval).Unix(),
	}
	if n.cfg.MaxConnsPerIP > 0 {
		c.ip = a.ip // the connection releases its IP slot when it ends
	}
	if tp == tpPusher {
		c.user = n.pusherSocketID(c.idSeq) // nobody is authenticated (pusher.go)
	}
	c.meta = n.metas.get(grants(a.claims), a.device)
	c.exp = n.connExp(a.claims)
	if len(a.claims.Info) > 0 { // for presence (the route) and the connect record
		c.extra().info = a.claims.Info
	}
	n.metrics.ConnectionsTotal.WithLabelValues(tpNames[tp]).Inc()
	n.accepted.Add(1)
	return c
}

// serveWS is the WebSocket endpoint through net/http: TLS 1.2 clients,
// requests on kept-alive HTTP connections and Handler() users. TCP
// listeners, plain or TLS 1.3, take the node's own accept path.
func (n *Node) serveWS(w http.ResponseWriter, r *http.Request) {
	if !isUpgrade(r) {
		n.refuse(w, refuseWith(http.StatusBadRequest, "bad_request", "not a WebSocket upgrade request (GET with Upgrade: websocket, Sec-WebSocket-Version: 13)"))
		return
	}
	if p := headOf(r).problem(); p != "" {
		n.refuse(w, refuseWith(http.StatusBadRequest, "bad_request", p))
		return
	}
	if !n.startHandshake() {
		n.refuse(w, shuttingDown())
		return
	}
	defer n.endHandshake()
	req := requestOf(r)
	a, f := n.admitHTTP(r.Context(), &req)
	if f != nil {
		n.refuse(w, f)
		return
	}
	netConn, rw, _, err := httpUpgrader(&a).Upgrade(r, w)
	if err != nil {
		n.release(&a)
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
	n.establish(n.newConn(&a, fd, tlsc, tpWS), a.ip, a.since, a.hasSince, a.roomSince, initial)
}

// takeUpgraded takes a connection net/http upgraded: its descriptor into
// the event loop, or a TLS connection as crypto/tls keeps it (a reader
// and a writer goroutine, see tls.go). On failure it releases a and
// closes the connection.
func (n *Node) takeUpgraded(netConn net.Conn, a *admission) (fd int, tlsc *tlsIO, ok bool) {
	if tc, ok := netConn.(tlsStream); ok {
		return -1, newTLSIO(tc), true
	}
	fd, err := netpoll.TakeFD(netConn)
	if err != nil {
		n.release(a)
		netConn.Close()
		n.log.Error("cannot take the socket into the event loop", "err", err)
		return -1, nil, false
	}
	return fd, nil, true
}

// authenticate verifies the token (or, in insecure mode, takes ?user=).
// With wait, a token that names a kid the key set lacks waits for one
// refresh of the set (see verify).
func (n *Node) authenticate(ctx context.Context, req *wsRequest, wait bool) (*auth.Claims, error) {
	tok := n.token(req)
	if tok == "" && n.cfg.AuthInsecure {
		user := req.query.Get("user")
		if user == "" {
			return nil, errUnauthorized("insecure mode: the user query parameter is required")
		}
		if err := protocol.ValidName("user", user); err != nil {
			return nil, errBadName(err.Error())
		}
		return &auth.Claims{Subject: user, Rooms: []string{"*"}, Pub: []string{"user:*", "room:*"}}, nil
	}
	if tok == "" {
		return nil, errUnauthorized("token missing: send Authorization: Bearer <jwt>, a bearer.<jwt> subprotocol or ?token=")
	}
	return n.verify(ctx, tok, wait)
}

// verify checks a client token. With wait, a token naming a kid that the
// key set lacks waits for one refresh of the set (at most one fetch every
// 30 s, shared by every waiter) and is checked again: a key added to the
// set is accepted without a restart. Without wait it never blocks.
func (n *Node) verify(ctx context.Context, tok string, wait bool) (*auth.Claims, error) {
	if n.verifier == nil {
		return nil, errUnauthorized("token verification is not configured on this node")
	}
	claims, err := n.verifier.Verify(tok, time.Time{})
	if err != nil && wait && errors.Is(err, auth.ErrTokenKid) && n.keys.Refresh(ctx) {
		claims, err = n.verifier.Verify(tok, time.Time{})
	}
	return claims, err
}

// authRefusal answers a failed authentication: 400 for a user id with
// characters no name may hold (the request is bad, not the credentials),
// 503 while the key set has never been fetched, else 401.
func authRefusal(err error) *refusal {
	var bad errBadName
	switch {
	case errors.As(err, &bad) || errors.Is(err, auth.ErrTokenSubjectName):
		return refuseWith(http.StatusBadRequest, "bad_request", err.Error())
	case errors.Is(err, auth.ErrKeysUnavailable):
		f := refuseWith(http.StatusServiceUnavailable, "unavailable", err.Error())
		f.retryAfter = 5 * time.Second
		return f
	}
	return refuseWith(http.StatusUnauthorized, "unauthorized", err.Error())
}

// errBadName is a user id (?user= in insecure mode) that is not a valid
// name.
type errBadName string

func (e errBadName) Error() string { return string(e) }

type errUnauthorized string

func (e errUnauthorized) Error() string { return string(e) }

// establish registers the upgraded connection, sends welcome, the gap and
// the replay, then the live messages held meanwhile, and starts reading.
func (n *Node) establish(c *conn, ip string, since int64, hasSince bool, roomSince map[string]int64, initial []byte) {
	n.hub.add(c)
	ctx, cancel := n.bctx(n.hsCtx)
	defer cancel()
	refuseOrClose := func(f *refusal, code int) {
		c.mu.Lock()
		if c.preamble && c.state == stResuming {
			// The 101 has not gone out (own accept path): refuse instead.
			n.metrics.HandshakeRejected.WithLabelValues(f.reason).Inc()
			c.writeRawLocked(f.response())
			c.outq = nil
		} else {
			c.closeWithReasonLocked(code, f.msg)
		}
		c.mu.Unlock()
		c.teardown("setup failed")
	}
	fail := func(what string, err error) {
		c.logger().Warn("connection setup failed", "step", what, "err", err)
		f := refuseWith(http.StatusServiceUnavailable, "unavailable", "cluster backend unavailable")
		f.retryAfter = 5 * time.Second
		if n.hsCtx.Err() != nil {
			f = shuttingDown()
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
	if n.events != nil {
		n.events.ended(c) // before the hub lets Shutdown go on
	}
	n.presenceClose(c) // before the hub forgets c: a change racing the close finds it closed
	emptied, found := n.hub.remove(c)
	if !found {
		return
	}
	if c.tp == tpPusher {
		n.pusherRates.Delete(c)
	}
	if c.ip != "" {
		n.ipConns.Release(c.ip)
	}
	n.removeRoute(cluster.Route{User: c.user, ConnID: c.connID(), Node: n.cfg.NodeID})
	if len(emptied) > 0 {
		n.dropInterest(emptied)
	}
}

package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/netpoll"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

const subprotocol = "wsgate.v1"

var upgrader = ws.HTTPUpgrader{
	// Only wsgate.v1 is ever selected: a bearer.<jwt> entry is read for
	// the token and never echoed back.
	Protocol: func(p string) bool { return p == subprotocol },
}

// refuse answers a handshake before the upgrade (contract §3).
func (n *Node) refuse(w http.ResponseWriter, status int, code, reason, msg string, retryAfter time.Duration) {
	n.metrics.HandshakeRejected.WithLabelValues(reason).Inc()
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		secs := int((retryAfter + time.Second - 1) / time.Second)
		if secs < 1 {
			secs = 1
		}
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	writeError(w, status, code, msg)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]protocol.ErrorBody{"error": {Code: code, Message: msg}})
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

// tokenFrom reads the client token: Authorization header, then a
// bearer.<jwt> subprotocol entry, then the token query parameter.
func (n *Node) tokenFrom(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			return strings.TrimSpace(a[7:])
		}
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); strings.HasPrefix(p, "bearer.") {
				return p[len("bearer."):]
			}
		}
	}
	if n.cfg.AllowQueryToken {
		return r.URL.Query().Get("token")
	}
	return ""
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// serveWS runs every check of contract §3 before the upgrade, then hands
// the socket to the event loop.
func (n *Node) serveWS(w http.ResponseWriter, r *http.Request) {
	if !isUpgrade(r) {
		n.refuse(w, http.StatusBadRequest, "bad_request", "bad_request", "not a WebSocket upgrade request (GET with Upgrade: websocket, Sec-WebSocket-Version: 13)", 0)
		return
	}
	if !n.Ready() {
		n.refuse(w, http.StatusServiceUnavailable, "unavailable", "unavailable", "node not accepting connections ("+n.notReadyReason()+")", 5*time.Second)
		return
	}
	if !n.origins.Allow(r) {
		n.refuse(w, http.StatusForbidden, "origin_forbidden", "origin_forbidden", "Origin "+r.Header.Get("Origin")+" is not allowed", 0)
		return
	}
	ip := clientIP(r)
	if ok, after := n.hsLimiter.Allow(ip, time.Now()); !ok {
		n.refuse(w, http.StatusTooManyRequests, "rate_limited", "rate_limited", "too many handshakes from "+ip, after)
		return
	}
	q := r.URL.Query()
	format, err := protocol.ParseFormat(q.Get("format"))
	if err != nil {
		n.refuse(w, http.StatusBadRequest, "bad_request", "bad_request", err.Error(), 0)
		return
	}
	since, hasSince := int64(0), false
	if s := q.Get("since"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			n.refuse(w, http.StatusBadRequest, "bad_request", "bad_request", "since must be a non-negative integer, got "+strconv.Quote(s), 0)
			return
		}
		since, hasSince = v, true
	}
	claims, err := n.authenticate(r)
	if err != nil {
		n.refuse(w, http.StatusUnauthorized, "unauthorized", "unauthorized", err.Error(), 0)
		return
	}
	if !n.ipConns.Acquire(ip) {
		n.refuse(w, http.StatusTooManyRequests, "rate_limited", "conn_limit", "too many connections from "+ip, 5*time.Second)
		return
	}
	released := false
	release := func() {
		if !released {
			released = true
			n.ipConns.Release(ip)
		}
	}
	if max := n.cfg.MaxConnsPerUser; max > 0 {
		ctx, cancel := n.bctx(r.Context())
		routes, err := n.backend.UserRoutes(ctx, claims.Subject)
		cancel()
		if err != nil {
			release()
			n.refuse(w, http.StatusServiceUnavailable, "unavailable", "unavailable", "cluster backend unavailable", 5*time.Second)
			return
		}
		if len(routes) >= max && n.cfg.DevicePolicy != config.DeviceSingle {
			release()
			n.refuse(w, http.StatusTooManyRequests, "rate_limited", "conn_limit", "user "+claims.Subject+" has too many connections", 5*time.Second)
			return
		}
	}

	netConn, rw, _, err := upgrader.Upgrade(r, w)
	if err != nil {
		release()
		n.metrics.HandshakeRejected.WithLabelValues("bad_request").Inc()
		return // gobwas has answered 400
	}
	var initial []byte
	if rw != nil && rw.Reader.Buffered() > 0 {
		initial, _ = rw.Reader.Peek(rw.Reader.Buffered())
		initial = append([]byte(nil), initial...)
	}
	fd := -1
	var tlsc *tlsIO
	if tc, ok := netConn.(*tls.Conn); ok {
		// TLS is decrypted in Go: the connection gets a reader and a
		// writer goroutine (see tls.go).
		tlsc = newTLSIO(tc)
	} else if fd, err = netpoll.TakeFD(netConn); err != nil {
		release()
		netConn.Close()
		n.log.Error("cannot take the socket into the event loop", "err", err)
		return
	}
	c := &conn{
		n: n, fd: fd, tlsc: tlsc, format: format, idSeq: n.idSeq.Add(1), user: claims.Subject,
		connectedAt: time.Now().UnixMilli(), lastRead: time.Now().Unix(),
		nextPing: time.Now().Add(n.cfg.PingInterval).Unix(),
	}
	if n.cfg.MaxConnsPerIP > 0 {
		c.ip = ip // the connection releases its IP slot when it ends
	}
	if len(claims.Rooms) > 0 || len(claims.Pub) > 0 {
		c.claims = claims
	}
	released = true
	if !claims.ExpiresAt.IsZero() {
		c.exp = claims.ExpiresAt.Unix()
	}
	n.metrics.ConnectionsTotal.Inc()
	n.accepted.Add(1)
	n.establish(c, ip, since, hasSince, initial)
}

// authenticate verifies the token (or, in insecure mode, takes ?user=).
func (n *Node) authenticate(r *http.Request) (*auth.Claims, error) {
	tok := n.tokenFrom(r)
	if tok == "" && n.cfg.AuthInsecure {
		user := r.URL.Query().Get("user")
		if err := protocol.ValidName("user", user); err != nil {
			return nil, errUnauthorized("insecure mode: the user query parameter is required (" + err.Error() + ")")
		}
		return &auth.Claims{Subject: user, Rooms: []string{"*"}, Pub: []string{"user:*", "room:*"}}, nil
	}
	if tok == "" {
		return nil, errUnauthorized("token missing: send Authorization: Bearer <jwt>, a bearer.<jwt> subprotocol or ?token=")
	}
	if n.verifier == nil {
		return nil, errUnauthorized("token verification is not configured on this node")
	}
	claims, err := n.verifier.Verify(tok, time.Now())
	if err != nil {
		return nil, err
	}
	if err := protocol.ValidName("sub", claims.Subject); err != nil {
		return nil, errUnauthorized("token " + err.Error())
	}
	return claims, nil
}

type errUnauthorized string

func (e errUnauthorized) Error() string { return string(e) }

// establish registers the upgraded connection, sends welcome, the gap and
// the replay, then the live messages held meanwhile, and starts reading.
func (n *Node) establish(c *conn, ip string, since int64, hasSince bool, initial []byte) {
	n.hub.add(c)
	ctx, cancel := n.bctx(n.ctx)
	defer cancel()
	fail := func(what string, err error) {
		c.logger().Warn("connection setup failed", "step", what, "err", err)
		c.mu.Lock()
		c.closeWithReasonLocked(1011, "cluster backend unavailable")
		c.mu.Unlock()
		c.teardown("setup failed")
	}
	// One backend step: the route is stored, then the user's rooms and
	// inbox are read (see cluster.Backend.Connect for why in that order).
	start := time.Now()
	route := cluster.Route{User: c.user, ConnID: c.connID(), Node: n.cfg.NodeID, ConnectedAt: c.connectedAt}
	cr, err := n.backend.Connect(ctx, route, n.cfg.RouteTTL, since, n.inboxOpts())
	n.observe("route", start, err)
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

	welcome, _ := protocol.Encode(c.format, protocol.Welcome{
		Type: protocol.TypeWelcome, ConnID: c.connID(), Node: n.cfg.NodeID, User: c.user,
		PingIntervalMS: n.cfg.PingInterval.Milliseconds(), InboxSeq: rd.LastSeq,
	})
	c.mu.Lock()
	if c.state != stResuming {
		c.mu.Unlock()
		return
	}
	frames := [][]byte{c.dataFrame(welcome)}
	if rd.GapFrom > 0 && rd.GapTo >= rd.GapFrom && rd.GapTo > since {
		from := max(rd.GapFrom, since+1)
		gap, _ := protocol.Encode(c.format, protocol.Gap{Type: protocol.TypeGap, From: from, To: rd.GapTo, Missed: rd.GapTo - from + 1})
		frames = append(frames, c.dataFrame(gap))
	}
	c.outq = append(frames, c.outq...)
	// A connection opened with since=N gets only seq > N, also when N is
	// above anything assigned yet (contract 4.3). After a data loss the
	// node lowers it (recoverConnections).
	base := rd.Acked
	if hasSince {
		base = since
	}
	c.lastSeq = max(base, rd.GapTo)
	var held []*delivery
	if c.x != nil {
		held, c.x.held = c.x.held, nil
	}
	// Open, then queue the replay and what arrived live meanwhile. The
	// socket of a new connection is writable: the welcome and the replay
	// go out from here (a full queue is written inline, never taken for
	// a slow client).
	c.state = stOpen
	c.queueInboxLocked(rd.Messages)
	c.releaseLocked(held)
	c.writeOutLocked()
	c.kickLocked()
	c.mu.Unlock()
	if n.log.Enabled(ctx, slog.LevelInfo) {
		c.logger().Info("connection open", "ip", ip, "format", c.format.String(), "since", since, "replayed", len(rd.Messages), "tls", c.tlsc != nil)
	}
	// Bytes that came with the handshake are parsed before the socket's
	// reader starts, so that one reader at a time touches the parser.
	c.feed(initial)
	c.startReading()
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
	for node, ids := range older {
		if node == n.cfg.NodeID {
			for _, o := range n.hub.userConns(c.user) {
				if slices.Contains(ids, o.connID()) {
					o.close(protocol.CloseReplaced, "replaced by a newer connection")
				}
			}
			continue
		}
		for _, id := range ids {
			env := encodeEnvelope(envelope{Kind: kindKick, User: c.user, Conn: id, Code: protocol.CloseReplaced, Reason: "replaced by a newer connection"}, nil)
			_ = n.backend.Send(ctx, []string{node}, env)
		}
	}
}

// forget removes an ended connection from the hub, the cluster and the
// limits. Runs once per connection, off the lock.
func (n *Node) forget(c *conn) {
	emptied, found := n.hub.remove(c)
	if !found {
		return
	}
	if c.ip != "" {
		n.ipConns.Release(c.ip)
	}
	n.removeRoute(cluster.Route{User: c.user, ConnID: c.connID(), Node: n.cfg.NodeID})
	if len(emptied) > 0 {
		n.dropInterest(emptied)
	}
}

var _ = wsframe.PingFrame

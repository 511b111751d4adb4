package gateway

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/netpoll"
	"github.com/wsgate/wsgate/internal/proxyproto"
	"github.com/wsgate/wsgate/internal/tlsrec"
)

// The node's own accept path, for plain TCP listeners.
//
// A WebSocket handshake through net/http costs a goroutine with a grown
// stack, a parsed http.Request, a hijack and about ten system calls; on
// this path it costs accept4, one epoll registration, one read and one
// write. The listening socket is watched by the event loop: the loop
// accepts, registers the socket, reads the request into its shared buffer
// and parses it in place (gobwas' zero-copy upgrader). A GET /ws is judged
// right there (every check of contract §3 that needs no backend call);
// the backend step runs on a short-lived goroutine, and the 101 answer
// leaves in one write with the welcome. Any other request (the API,
// metrics, the console) is handed to net/http with the bytes already
// read, on a connection of its own.
//
// A TLS listener takes the same path (see tlsaccept.go): the loop
// accepts, the TLS handshake and the request run on the short-lived
// handshake goroutine, and a TLS 1.3 connection is then held by the loop
// like a plain one.

const (
	maxRequestHeader = 16 << 10         // bytes of request line and headers
	handshakeTimeout = 10 * time.Second // to send a whole request
)

// acceptor owns the listening socket. As a net.Listener it yields the
// connections that are not WebSocket handshakes, for http.Server.Serve.
type acceptor struct {
	n    *Node
	addr net.Addr
	tls  *tls.Config // a TLS listener's (see tlsaccept.go); nil: plain

	// mu guards fd: every loop accepts under its read lock, Close
	// takes it to close the socket.
	mu       sync.RWMutex
	fd       int // -1 once closed
	reg      netpoll.Shared
	lastWarn atomic.Int64 // Unix s of the last accept failure logged

	pendMu  sync.Mutex
	pending map[*hsConn]struct{} // accepted, request not complete yet

	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

// serveOwn serves ln (a *net.TCPListener) through the own accept path,
// with TLS when tlsCfg is set.
func (n *Node) serveOwn(ln net.Listener, tlsCfg *tls.Config) error {
	addr := ln.Addr()
	fd, err := netpoll.TakeFD(ln)
	if err != nil {
		return err
	}
	// Accepted sockets inherit TCP_NODELAY from the listener. With
	// TCP_DEFER_ACCEPT the kernel hands over a connection once its first
	// bytes (the request) have arrived: accept and read take one wakeup,
	// and a client that connects and sends nothing costs no descriptor.
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		unix.Close(fd)
		return fmt.Errorf("listener: TCP_NODELAY: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, int(handshakeTimeout/time.Second))
	a := &acceptor{
		n: n, addr: addr, tls: tlsCfg, fd: fd, pending: map[*hsConn]struct{}{},
		conns: make(chan net.Conn, 256), done: make(chan struct{}),
	}
	// Every loop watches the listener (the kernel wakes one per
	// readiness): accepts and the handshakes' checks, which run inline,
	// spread over the loops.
	a.mu.Lock()
	a.reg, err = n.poller.RegisterShared(fd, a)
	a.mu.Unlock()
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, netpoll.ErrClosed) {
			return http.ErrServerClosed // Shutdown came first
		}
		return err
	}
	n.acceptor.Store(a)
	err = n.srv.Serve(a)
	a.Close() // also when Shutdown came before Serve
	return err
}

// OnReadable accepts every pending connection (the listener is
// edge-triggered); several loops may run it at once.
func (a *acceptor) OnReadable(buf []byte) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for a.fd >= 0 {
		fd, sa, err := unix.Accept4(a.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch err {
		case nil:
			if a.tls != nil {
				a.openTLS(fd, sa)
			} else {
				a.open(fd, sockaddrIP(sa), buf)
			}
		case unix.EINTR, unix.ECONNABORTED:
		case unix.EAGAIN:
			return
		default:
			// Out of descriptors or memory: the connections wait in the
			// backlog. No new edge may come for them, so look again soon.
			if now, last := time.Now().Unix(), a.lastWarn.Load(); now-last >= 10 && a.lastWarn.CompareAndSwap(last, now) {
				a.n.log.Warn("accept failed; retrying every 100ms", "err", err)
			}
			a.n.metrics.HandshakeRejected.WithLabelValues("accept_failed").Inc()
			a.n.goFunc(func() {
				t := time.NewTimer(100 * time.Millisecond)
				defer t.Stop()
				select {
				case <-t.C:
					a.rearm()
				case <-a.done:
				}
			})
			return
		}
	}
}

func (a *acceptor) OnWritable() {}

func (a *acceptor) rearm() {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.fd >= 0 {
		_ = a.n.poller.RearmShared(a.fd, a.reg)
	}
}

// open registers an accepted socket and reads what it sent (usually the
// whole request: see TCP_DEFER_ACCEPT); the rest comes with its events.
// buf is the calling loop's read buffer.
func (a *acceptor) open(fd int, ip string, buf []byte) {
	h := &hsConn{a: a, fd: fd, ip: ip, started: time.Now().Unix(), proxy: a.n.gate.TrustedPeer(ip)}
	h.mu.Lock() // events may reach h before Register returns
	defer h.mu.Unlock()
	tok, err := a.n.poller.Register(fd, h)
	if err != nil {
		h.done = true
		unix.Close(fd)
		return
	}
	h.tok = tok
	a.pendMu.Lock()
	a.pending[h] = struct{}{}
	a.pendMu.Unlock()
	h.readLocked(buf)
}

// expire closes the sockets that have not sent a whole request within
// handshakeTimeout (the sweep calls it once a second).
func (a *acceptor) expire(now int64) {
	var old []*hsConn
	a.pendMu.Lock()
	for h := range a.pending {
		if now-h.started >= int64(handshakeTimeout/time.Second) {
			old = append(old, h)
		}
	}
	a.pendMu.Unlock()
	for _, h := range old {
		h.mu.Lock()
		if !h.done {
			h.closeLocked()
		}
		h.mu.Unlock()
	}
}

// Accept, Close and Addr make the acceptor net/http's listener.
func (a *acceptor) Accept() (net.Conn, error) {
	select {
	case c := <-a.conns:
		return c, nil
	case <-a.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes the handshakes not finished.
func (a *acceptor) Close() error {
	a.closeOnce.Do(func() {
		close(a.done)
		a.mu.Lock()
		a.n.poller.UnregisterShared(a.fd, a.reg)
		unix.Close(a.fd)
		a.fd = -1
		a.mu.Unlock()
		a.expire(1 << 62)
	})
	return nil
}

func (a *acceptor) Addr() net.Addr { return a.addr }

// handOff gives a connection to net/http without blocking the loop.
func (a *acceptor) handOff(c net.Conn) {
	select {
	case a.conns <- c:
		return
	case <-a.done:
		c.Close()
		return
	default:
	}
	if !a.n.goFunc(func() {
		select {
		case a.conns <- c:
		case <-a.done:
			c.Close()
		}
	}) {
		c.Close()
	}
}

func sockaddrIP(sa unix.Sockaddr) string {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(sa.Addr).String()
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(sa.Addr).Unmap().String()
	}
	return ""
}

// hsConn is an accepted socket until its request is read.
type hsConn struct {
	a       *acceptor
	fd      int
	ip      string
	started int64 // Unix s

	mu    sync.Mutex
	tok   netpoll.Token
	buf   []byte     // a request split over several reads
	done  bool       // judged, handed on or closed: events are ignored
	proxy bool       // a trusted proxy's socket: a PROXY header may come first
	src   netip.Addr // the client's address from a PROXY header, if one came
}

var headerEnd = []byte("\r\n\r\n")

func (h *hsConn) OnReadable(buf []byte) {
	h.mu.Lock()
	h.readLocked(buf)
	h.mu.Unlock()
}

func (h *hsConn) readLocked(buf []byte) {
	for !h.done {
		n, err := unix.Read(h.fd, buf)
		switch {
		case n > 0:
			data := buf[:n]
			if len(h.buf) > 0 {
				h.buf = append(h.buf, data...)
				data = h.buf
			}
			rest, finished := h.consumeLocked(data)
			if finished {
				return
			}
			if len(rest) > maxRequestHeader { // a PROXY header that never ends
				h.refuseLocked(admission.TooLarge())
				return
			}
			h.buf = append(h.buf[:0:0], rest...) // a copy: data may be the loop's buffer
			if n < len(buf) {
				return // drained; the rest comes with a new edge
			}
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return
		default: // EOF or error
			h.closeLocked()
			return
		}
	}
}

func (h *hsConn) OnWritable() {}

// consumeLocked takes what has arrived: a PROXY header from a trusted
// proxy, then the request once it is whole. It returns the bytes to keep
// when the request is not complete yet.
func (h *hsConn) consumeLocked(data []byte) (rest []byte, finished bool) {
	if h.proxy {
		k, src, err := proxyproto.Parse(data)
		switch {
		case errors.Is(err, proxyproto.ErrIncomplete):
			return data, false
		case err != nil:
			h.refuseLocked(admission.Refuse(http.StatusBadRequest, "bad_request", err.Error()))
			return nil, true
		}
		h.proxy = false
		if src.IsValid() {
			h.ip = src.String()
			h.src = src
		}
		data = data[k:]
	}
	end := bytes.Index(data, headerEnd)
	head := data
	if end >= 0 {
		head = data[:end+4]
	}
	switch {
	case bareLF(head) >= 0:
		// net/http would take it; a client that sends it may wait for
		// the CRLF CRLF that never comes.
		h.refuseLocked(admission.Refuse(http.StatusBadRequest, "bad_request", errBareLF.Error()))
		return nil, true
	case len(head) > maxRequestHeader:
		h.refuseLocked(admission.TooLarge())
		return nil, true
	case end >= 0:
		h.finishLocked(head, data[end+4:])
		return nil, true
	}
	return data, false
}

// finishLocked takes a whole request: a GET /ws is judged here, anything
// else goes to net/http. req and rest may be the loop's buffer.
func (h *hsConn) finishLocked(req, rest []byte) {
	h.markDoneLocked()
	if isPusherRequestLine(req) && h.a.n.cfg.TransportOn("pusher") {
		h.pusherLocked(req, rest)
		return
	}
	if !isWSRequestLine(req) || !h.a.n.cfg.TransportOn("ws") {
		h.handOffLocked(append(append([]byte(nil), req...), rest...))
		return
	}
	n := h.a.n
	r, resp, ok := h.upgradeLocked(req)
	if !ok {
		return
	}
	adm, f := n.admit(&r)
	if f != nil && !f.AwaitKeys {
		h.refuseLocked(f)
		return
	}
	initial := append([]byte(nil), rest...)
	fd, tok := h.fd, h.tok
	setup := func() { n.establishOwn(fd, tok, nil, adm, resp, initial) }
	if f != nil {
		// The token names a kid the key set lacks: wait for a refresh
		// of the set off the event loop, then judge the token again.
		setup = func() {
			adm, f := n.gate.Credentials(n.hsCtx, &r, adm, true)
			if f != nil {
				n.refuseTaken(fd, tok, nil, f)
				return
			}
			n.establishOwn(fd, tok, nil, adm, resp, initial)
		}
	}
	// The socket now belongs to the connection being set up; this
	// handler ignores its events until the connection takes them over
	// (conn.startReading).
	if !n.goHandshake(setup) {
		n.gate.Release(&adm)
		h.refuseLocked(admission.ShuttingDown())
		return
	}
	h.fd = -1
}

// upgradeLocked checks a whole upgrade request and returns what the
// handshake's checks need and the 101 answer; a bad request is answered
// (400) and closed, and ok is false.
func (h *hsConn) upgradeLocked(req []byte) (r admission.Request, resp []byte, ok bool) {
	u, err := scanHead(req)
	if err == nil {
		if p := u.problem(); p != "" {
			err = errors.New(p)
		}
	}
	if err != nil {
		h.refuseLocked(admission.Refuse(http.StatusBadRequest, "bad_request", err.Error()))
		return r, nil, false
	}
	r, resp, err = parseUpgrade(req)
	if err != nil {
		h.a.n.metrics.HandshakeRejected.WithLabelValues("bad_request").Inc()
		h.writeCloseLocked(admission.Refuse(http.StatusBadRequest, "bad_request", "not a WebSocket upgrade request (GET with Upgrade: websocket, Sec-WebSocket-Version: 13)").Response())
		return r, nil, false
	}
	r.IP = h.ip
	return r, resp, true
}

// refuseTaken answers a handshake whose socket the handler has handed on
// (a goroutine of its own judges it) with f and closes it.
func (n *Node) refuseTaken(fd int, tok netpoll.Token, tr *tlsrec.State, f *admission.Refusal) {
	n.metrics.HandshakeRejected.WithLabelValues(f.Reason).Inc()
	b := f.Response()
	if tr != nil {
		b = tr.Out.Seal(nil, tlsrec.TypeAppData, b)
	}
	_, _ = unix.Write(fd, b)
	n.poller.Unregister(fd, tok)
	unix.Close(fd)
}

// establishOwn runs the backend step of an admitted handshake and sends
// the 101 with the welcome. tr is the record layer of a TLS connection
// (nil: plain).
func (n *Node) establishOwn(fd int, tok netpoll.Token, tr *tlsrec.State, a admission.Params, resp, initial []byte) {
	if a.Deflate { // both own paths, plain and TLS on the loop
		resp = with101Extension(resp)
	}
	f := n.gate.AskProxy(n.hsCtx, &a)
	if f == nil && a.Transport != tpPusher { // a Pusher connection's user is its own socket id
		f = n.checkUserLimit(n.hsCtx, a.Claims.Subject)
	}
	if f != nil {
		n.gate.Release(&a)
		n.refuseTaken(fd, tok, tr, f)
		return
	}
	c := n.newConn(&a, fd, nil, a.Transport)
	c.token, c.tr = tok, tr
	c.outq = [][]byte{resp}
	c.preamble = true
	n.establish(c, a.IP, a.Since, a.HasSince, a.RoomSince, initial)
}

func (h *hsConn) markDoneLocked() {
	h.done = true
	h.buf = nil
	h.a.pendMu.Lock()
	delete(h.a.pending, h)
	h.a.pendMu.Unlock()
}

func (h *hsConn) refuseLocked(f *admission.Refusal) {
	h.a.n.metrics.HandshakeRejected.WithLabelValues(f.Reason).Inc()
	h.writeCloseLocked(f.Response())
}

// writeCloseLocked sends a short answer (the socket's buffer is empty, so
// it is taken whole) and closes.
func (h *hsConn) writeCloseLocked(resp []byte) {
	_, _ = unix.Write(h.fd, resp)
	h.closeLocked()
}

func (h *hsConn) closeLocked() {
	if h.fd < 0 {
		return
	}
	h.markDoneLocked()
	h.a.n.poller.Unregister(h.fd, h.tok)
	unix.Close(h.fd)
	h.fd = -1
}

// handOffLocked gives the socket to net/http with the bytes read so far.
func (h *hsConn) handOffLocked(read []byte) {
	h.a.n.poller.Unregister(h.fd, h.tok)
	f := os.NewFile(uintptr(h.fd), "")
	h.fd = -1
	c, err := net.FileConn(f) // a duplicate, in the runtime's poller
	f.Close()
	if err != nil {
		h.a.n.log.Warn("cannot hand a connection to the HTTP server", "err", err)
		return
	}
	pc := &prefixConn{Conn: c, pre: read}
	if h.src.IsValid() {
		// The client's address, not the balancer's, for every request
		// the connection carries.
		pc.remote = net.TCPAddrFromAddrPort(netip.AddrPortFrom(h.src, 0))
	}
	h.a.handOff(pc)
}

// isWSRequestLine reports whether req starts with "GET /ws " or "GET /ws?".
func isWSRequestLine(req []byte) bool {
	const p = "GET /ws"
	return len(req) > len(p) && string(req[:len(p)]) == p && (req[len(p)] == ' ' || req[len(p)] == '?')
}

// parseUpgrade checks a WebSocket upgrade request with gobwas' zero-copy
// upgrader and returns what the checks need and the 101 answer (not sent).
func parseUpgrade(req []byte) (admission.Request, []byte, error) {
	var r admission.Request
	var qerr error
	u := ws.Upgrader{
		OnRequest: func(uri []byte) error {
			p, q, ok := bytes.Cut(uri, []byte{'?'})
			r.Path = string(p)
			if ok {
				r.Query, qerr = url.ParseQuery(string(q))
			}
			return nil
		},
		OnHost: func(host []byte) error {
			r.Host = string(host)
			return nil
		},
		OnHeader: func(k, v []byte) error {
			switch string(k) { // canonical form
			case "Origin":
				r.Origin = string(v)
			case "Authorization":
				r.Authz = string(v)
			case "X-Forwarded-For":
				if r.XFF != "" {
					r.XFF += ","
				}
				r.XFF += string(v)
			case "X-Real-Ip":
				r.RealIP = string(v)
			case "Cookie":
				if r.Cookie != "" {
					r.Cookie += "; "
				}
				r.Cookie += string(v)
			case "User-Agent":
				r.UserAgent = string(v)
			}
			return nil
		},
		// Read here, judged by admit (acceptsDeflate): an offer is
		// declined, never a reason to refuse the handshake.
		ExtensionCustom: func(v []byte, opts []httphead.Option) ([]httphead.Option, bool) {
			r.Exts = append(r.Exts, append([]byte(nil), v...))
			return opts, true
		},
		// Only wsgate.v1 is ever selected; a bearer.<jwt> entry is read
		// for the token and never echoed back.
		ProtocolCustom: func(v []byte) (string, bool) {
			r.Protocols = append(r.Protocols, string(v))
			for p := range bytes.SplitSeq(v, []byte{','}) {
				if string(bytes.TrimSpace(p)) == subprotocol {
					return subprotocol, true
				}
			}
			return "", true
		},
	}
	rw := &memRW{in: req}
	if _, err := u.Upgrade(rw); err != nil {
		return r, nil, err
	}
	if qerr != nil {
		return r, nil, qerr
	}
	if r.Query == nil {
		r.Query = url.Values{}
	}
	return r, rw.out, nil
}

// memRW feeds a request to the upgrader and keeps its answer.
type memRW struct {
	in  []byte
	out []byte
}

func (m *memRW) Read(p []byte) (int, error) {
	if len(m.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p, m.in)
	m.in = m.in[n:]
	return n, nil
}

func (m *memRW) Write(p []byte) (int, error) {
	m.out = append(m.out, p...)
	return len(p), nil
}

// prefixConn is a connection handed to net/http with the bytes the
// accept path read already.
type prefixConn struct {
	net.Conn
	pre    []byte
	remote net.Addr // from a PROXY header; nil: the socket's peer
}

func (c *prefixConn) RemoteAddr() net.Addr {
	if c.remote != nil {
		return c.remote
	}
	return c.Conn.RemoteAddr()
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// SyscallConn lets a hijacked connection (a WebSocket handshake that came
// on a kept-alive HTTP connection) move into the event loop.
func (c *prefixConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("%T has no descriptor", c.Conn)
	}
	return sc.SyscallConn()
}

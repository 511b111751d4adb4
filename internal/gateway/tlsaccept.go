package gateway

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/netpoll"
	"github.com/wsgate/wsgate/internal/tlsrec"
)

// TLS on the node's own accept path.
//
// The loop accepts a TLS connection and starts its handshake goroutine,
// which lives until the connection is set up (at most handshakeTimeout
// plus the backend step). On it crypto/tls runs the handshake over
// hsSock, the accepted non-blocking socket: a read that finds nothing
// waits for the loop's readable signal. The upgrade request is read
// through the tls.Conn too. For a TLS 1.3 WebSocket request the tls.Conn
// is then dropped and the connection is held by the event loop with the
// record layer of internal/tlsrec, keyed with the traffic secrets crypto/tls
// wrote to the connection's key log. For that hand-over to be exact,
// hsSock gives crypto/tls one record at a time, never a byte past the
// record it asked for: when the request is complete the tls.Conn holds
// nothing and the records read after it are still in hsSock's buffer.
// hsSock also opens a copy of every record read after the handshake with
// the client's first keys: if all were application data, the client's
// sequence number is their count, and the server, which sends no session
// ticket, has sent nothing (its sequence number is 0). A KeyUpdate or a
// ChangeCipherSpec before the request ended (contract §22) moves
// crypto/tls's keys past what the key log holds (and a KeyUpdate with
// update_requested makes it send one under the server's first key): such
// a connection stays on crypto/tls, on the goroutine path, so that no
// (key, nonce) pair is ever used twice. WSGATE_TLS_OWN_RECORDS=off puts
// every connection on that path.
//
// Everything else goes to net/http on a goroutine, as a plain listener's
// non-WebSocket requests do: a client that negotiates TLS 1.2 or HTTP/2
// (its tls.Conn as it is: WebSocket over it takes the goroutine path of
// tls.go), and any other request of a TLS 1.3 client (with the bytes
// already read).
//
// Measured (docs/performance.md, "TLS on the node"): a server *tls.Conn
// keeps about 7 KB of heap after its handshake, so keeping it, even with
// the loop feeding it, could not reach 4 KiB per idle connection; the
// record layer keeps two AEAD states.

// serveOwnTLS serves a TLS listener through the own accept path.
func (n *Node) serveOwnTLS(ln net.Listener) error {
	cfg, err := n.listenerTLS()
	if err != nil {
		ln.Close()
		return err
	}
	return n.serveOwn(ln, cfg)
}

// listenerTLS is the listener's tls.Config: per connection, a clone of
// the base whose key log is the connection's hsSock.
func (n *Node) listenerTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(n.cfg.TLSCertFile, n.cfg.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	base := &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2", "http/1.1"},
		// A ticket would be the first record under the server's
		// application key: the loop's record layer starts at 0.
		SessionTicketsDisabled: true,
	}
	return &tls.Config{
		Certificates: base.Certificates,
		NextProtos:   base.NextProtos,
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			s, ok := h.Conn.(*hsSock)
			if !ok {
				return nil, nil
			}
			c := base.Clone()
			c.KeyLogWriter = (*hsKeyLog)(s)
			return c, nil
		},
		SessionTicketsDisabled: true,
	}, nil
}

// acceptTLS applies the per-IP limits to an accepted TLS socket before
// its handshake starts (a handshake costs the node far more than the
// client), at twice their value: the sockets in their handshake and the
// IP's connections together up to 2 x WSGATE_MAX_CONNS_PER_IP, TLS
// handshakes at 2 x WSGATE_HANDSHAKE_RATE_PER_IP (burst twice the
// rate's). A client just past a limit still gets its 429 with
// Retry-After (contract §2) after the handshake, from admit; a flood
// costs the node at most twice the limits' worth of handshakes. A
// trusted proxy's sockets are not limited here (the client's IP comes
// with the request). It returns the refusal's reason, or "" with an IP
// slot taken when slot is true.
func (n *Node) acceptTLS(ip string) (reason string, slot bool) {
	if n.gate.TrustedPeer(ip) {
		return "", false
	}
	if max := 2 * n.cfg.MaxConnsPerIP; max > 0 {
		if !n.tlsIPs.Acquire(ip) {
			return "conn_limit", false
		}
		if n.tlsIPs.Count(ip)+n.gate.IPConns().Count(ip) > max {
			n.tlsIPs.Release(ip)
			return "conn_limit", false
		}
		slot = true
	}
	if ok, _ := n.tlsRate.Allow(ip, time.Now()); !ok {
		if slot {
			n.tlsIPs.Release(ip)
		}
		return "rate_limited", false
	}
	return "", slot
}

// releaseIP gives back the socket's IP slot of acceptTLS (once the
// connection holds one of its own, or is gone); handshake goroutine only.
func (s *hsSock) releaseIP() {
	if s.ipSlot {
		s.ipSlot = false
		s.n.tlsIPs.Release(s.ip)
	}
}

// openTLS starts the handshake of an accepted TLS connection (on the
// loop goroutine).
func (a *acceptor) openTLS(fd int, sa unix.Sockaddr) {
	ip := sockaddrIP(sa)
	reason, slot := a.n.acceptTLS(ip)
	if reason != "" {
		a.n.metrics.HandshakeRejected.WithLabelValues(reason).Inc()
		unix.Close(fd)
		return
	}
	s := &hsSock{n: a.n, a: a, fd: fd, deadline: time.Now().Add(handshakeTimeout),
		rd: make(chan struct{}, 1), wr: make(chan struct{}, 1), ipSlot: slot}
	s.raddr = &net.TCPAddr{}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		s.raddr.IP, s.raddr.Port = net.IP(sa.Addr[:]).To16(), sa.Port
	case *unix.SockaddrInet6:
		s.raddr.IP, s.raddr.Port = net.IP(sa.Addr[:]), sa.Port
	}
	s.ip = ip
	tok, err := a.n.poller.Register(fd, s)
	if err != nil {
		s.releaseIP()
		unix.Close(fd)
		return
	}
	s.tok = tok
	if !a.n.goHandshake(func() { a.n.tlsHandshake(s) }) {
		s.releaseIP()
		s.Close()
	}
}

// tlsHandshake runs a TLS connection's handshake and reads its request.
func (n *Node) tlsHandshake(s *hsSock) {
	defer s.releaseBuf()
	defer s.releaseIP()
	tc := tls.Server(s, s.a.tls)
	if err := tc.Handshake(); err != nil {
		n.metrics.TLSHandshakes.WithLabelValues("failed").Inc()
		n.log.Debug("TLS handshake failed", "ip", s.ip, "err", err)
		s.Close()
		return
	}
	st := tc.ConnectionState()
	if st.Version != tls.VersionTLS13 || st.NegotiatedProtocol == "h2" || !n.cfg.TLSOwnRecordsOn() {
		n.metrics.TLSHandshakes.WithLabelValues("goroutine").Inc()
		if s.toRuntime() {
			s.releaseIP() // before net/http can answer: the handshake is over
			s.a.handOff(tc)
		}
		return
	}
	s.watch(st.CipherSuite)
	req, end, f := readRequest(tc)
	if f != nil {
		n.metrics.HandshakeRejected.WithLabelValues(f.Reason).Inc()
		s.releaseIP()
		_, _ = tc.Write(f.Response())
		s.Close()
		return
	}
	if req == nil {
		s.Close() // gone, or too slow
		return
	}
	if !isWSRequestLine(req) || s.odd || !n.cfg.TransportOn("ws") {
		// s.odd: a KeyUpdate or a ChangeCipherSpec came before the
		// request ended. crypto/tls has moved its keys (and may have
		// sent a KeyUpdate of its own, under keys the key log never
		// saw): it keeps the connection, so that no (key, nonce) pair
		// is used twice.
		n.metrics.TLSHandshakes.WithLabelValues("goroutine").Inc()
		if s.toRuntime() {
			s.releaseIP()
			s.a.handOff(&tlsPrefixConn{prefixConn: prefixConn{Conn: tc, pre: req}, tc: tc})
		}
		return
	}
	tr, err := s.recordLayer(st.CipherSuite)
	if err != nil {
		n.log.Warn("cannot take a TLS connection into the event loop", "ip", s.ip, "err", err)
		s.Close()
		return
	}
	n.metrics.TLSHandshakes.WithLabelValues("loop").Inc()
	n.judgeTLS(s, tr, req[:end], req[end:])
}

// readRequest reads the request head through tc (with what came after
// it in the same record). req is nil when the client went away; f is set
// for a request to refuse.
func readRequest(tc *tls.Conn) (req []byte, end int, f *admission.Refusal) {
	// A whole record's plaintext fits: tc never keeps part of one.
	rb := make([]byte, tlsrec.MaxPlaintext+256)
	for {
		m, err := tc.Read(rb)
		if m > 0 {
			req = append(req, rb[:m]...)
			e := bytes.Index(req, headerEnd)
			head := req
			if e >= 0 {
				head = req[:e+4]
			}
			switch {
			case bareLF(head) >= 0:
				return nil, 0, admission.Refuse(http.StatusBadRequest, "bad_request", errBareLF.Error())
			case len(head) > maxRequestHeader:
				return nil, 0, admission.TooLarge()
			case e >= 0:
				return req, e + 4, nil
			}
		}
		if err != nil {
			return nil, 0, nil
		}
	}
}

// judgeTLS is finishLocked for a TLS 1.3 WebSocket request, on the
// handshake goroutine: the connection's socket now belongs to the record
// layer tr.
func (n *Node) judgeTLS(s *hsSock, tr *tlsrec.State, req, rest []byte) {
	fd, tok := s.fd, s.tok
	s.fd = -1
	u, err := scanHead(req)
	if err == nil {
		if p := u.problem(); p != "" {
			err = errors.New(p)
		}
	}
	if err != nil {
		n.refuseTaken(fd, tok, tr, admission.Refuse(http.StatusBadRequest, "bad_request", err.Error()))
		return
	}
	r, resp, err := parseUpgrade(req)
	if err != nil {
		n.refuseTaken(fd, tok, tr, admission.Refuse(http.StatusBadRequest, "bad_request", "not a WebSocket upgrade request (GET with Upgrade: websocket, Sec-WebSocket-Version: 13)"))
		return
	}
	r.IP = s.ip
	adm, f := n.admit(&r)
	if f != nil && f.AwaitKeys {
		adm, f = n.gate.Credentials(n.hsCtx, &r, adm, true)
	}
	s.releaseIP() // admitted: the connection holds its own slot
	if f != nil {
		n.refuseTaken(fd, tok, tr, f)
		return
	}
	n.establishOwn(fd, tok, tr, adm, resp, append([]byte(nil), rest...))
}

// hsSock is an accepted TLS socket during its handshake: crypto/tls's
// net.Conn, and the loop's handler of the socket, which only signals
// readiness to the handshake goroutine waiting in Read or Write.
type hsSock struct {
	n        *Node
	a        *acceptor
	fd       int // -1 once handed on
	tok      netpoll.Token
	ip       string
	ipSlot   bool // holds a slot of n.tlsIPs (acceptTLS)
	raddr    *net.TCPAddr
	deadline time.Time

	rd, wr  chan struct{} // capacity 1: "readable", "writable" (edge-triggered)
	timer   *time.Timer
	expired bool

	// Bytes read from the socket not yet given to crypto/tls: buf[off:].
	// given counts the bytes given, recEnd is where the record being
	// given ends (in the same count).
	buf    []byte
	off    int
	given  int64
	recEnd int64

	client, server []byte // application traffic secrets, from the key log

	// After the handshake (watching), each record is opened with a copy
	// of the client's keys (seen) before crypto/tls gets it: odd is set
	// by the first one that is not application data (a KeyUpdate, a
	// ChangeCipherSpec, anything else), after which the keys are no
	// longer followed. Without odd, seen.seq is the client's sequence
	// number and the server has sent nothing after its Finished.
	watching bool
	odd      bool
	seen     tlsrec.Keys
	scratch  []byte

	rt net.Conn // once handed to net/http: the socket in the Go runtime
}

func (s *hsSock) OnReadable([]byte) { signal(s.rd) }
func (s *hsSock) OnWritable()       { signal(s.wr) }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// hsBufs are handshake read buffers: a whole record and a bit.
var hsBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, tlsrec.HeaderLen+tlsrec.MaxCiphertext+512)
	return &b
}}

// wait waits for ch (a readiness signal), the handshake's deadline or
// Shutdown.
func (s *hsSock) wait(ch chan struct{}) error {
	if s.expired {
		return os.ErrDeadlineExceeded
	}
	if s.timer == nil {
		s.timer = time.NewTimer(time.Until(s.deadline))
	}
	select {
	case <-ch:
		return nil
	case <-s.timer.C:
		s.expired = true
		return os.ErrDeadlineExceeded
	case <-s.n.hsCtx.Done():
		return net.ErrClosed
	}
}

// Read gives crypto/tls the bytes of one record at most: a record's
// header only once all five of its bytes are here, then its body.
func (s *hsSock) Read(p []byte) (int, error) {
	if s.rt != nil {
		if s.off < len(s.buf) {
			n := copy(p, s.buf[s.off:])
			s.off += n
			return n, nil
		}
		return s.rt.Read(p)
	}
	for {
		avail := len(s.buf) - s.off
		if s.given == s.recEnd && avail >= tlsrec.HeaderLen {
			size := tlsrec.HeaderLen + int(binary.BigEndian.Uint16(s.buf[s.off+3:]))
			if s.watching && !s.odd {
				if size <= tlsrec.HeaderLen+tlsrec.MaxCiphertext && avail < size {
					// The whole record first (it fits in buf).
					if err := s.fill(); err != nil {
						return 0, err
					}
					continue
				}
				s.inspect(s.buf[s.off : s.off+min(size, avail)])
			}
			s.recEnd = s.given + int64(size)
		}
		if s.given < s.recEnd && avail > 0 {
			n := copy(p, s.buf[s.off:s.off+int(min(int64(avail), s.recEnd-s.given))])
			s.off += n
			s.given += int64(n)
			return n, nil
		}
		if err := s.fill(); err != nil {
			return 0, err
		}
	}
}

// watch starts following the client's records once the handshake is
// done (a TLS 1.3 connection whose request is read next).
func (s *hsSock) watch(suite uint16) {
	s.watching = true
	if s.client == nil {
		s.odd = true
		return
	}
	var err error
	if s.seen, err = tlsrec.NewKeys(suite, s.client); err != nil {
		s.odd = true
	}
}

// inspect opens a copy of the whole record rec (header and body) with
// the followed keys and sets odd unless it is application data.
func (s *hsSock) inspect(rec []byte) {
	if rec[0] != tlsrec.TypeAppData || len(rec) != tlsrec.HeaderLen+int(binary.BigEndian.Uint16(rec[3:])) {
		s.odd = true
		return
	}
	s.scratch = append(s.scratch[:0], rec...)
	if ctype, _, err := s.seen.Open(s.scratch); err != nil || ctype != tlsrec.TypeAppData {
		s.odd = true
	}
}

// fill reads what the socket has, waiting for it if need be.
func (s *hsSock) fill() error {
	if s.buf == nil {
		s.buf = (*hsBufs.Get().(*[]byte))[:0]
	}
	if s.off > 0 {
		s.buf = s.buf[:copy(s.buf, s.buf[s.off:])]
		s.off = 0
	}
	if len(s.buf) == cap(s.buf) {
		return tlsrec.ErrOverflow // cannot happen: a record fits
	}
	for {
		n, err := unix.Read(s.fd, s.buf[len(s.buf):cap(s.buf)])
		switch {
		case n > 0:
			s.buf = s.buf[:len(s.buf)+n]
			return nil
		case n == 0 && err == nil:
			return io.EOF
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			if err := s.wait(s.rd); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

func (s *hsSock) Write(p []byte) (int, error) {
	if s.rt != nil {
		return s.rt.Write(p)
	}
	if s.fd < 0 {
		return 0, net.ErrClosed
	}
	total := 0
	for len(p) > 0 {
		n, err := unix.Write(s.fd, p)
		if n > 0 {
			p = p[n:]
			total += n
		}
		switch {
		case err == nil, err == unix.EINTR:
		case err == unix.EAGAIN:
			if err := s.wait(s.wr); err != nil {
				return total, err
			}
		default:
			return total, err
		}
	}
	return total, nil
}

// Close closes the socket (unless it was handed on).
func (s *hsSock) Close() error {
	if s.rt != nil {
		return s.rt.Close()
	}
	if s.fd >= 0 {
		s.n.poller.Unregister(s.fd, s.tok)
		unix.Close(s.fd)
		s.fd = -1
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	return nil
}

func (s *hsSock) LocalAddr() net.Addr {
	if s.rt != nil {
		return s.rt.LocalAddr()
	}
	return s.a.addr
}

func (s *hsSock) RemoteAddr() net.Addr {
	if s.rt != nil {
		return s.rt.RemoteAddr()
	}
	return s.raddr
}

// Deadlines matter only once net/http has the connection; during the
// handshake the handshake's own deadline applies.
func (s *hsSock) SetDeadline(t time.Time) error {
	if s.rt != nil {
		return s.rt.SetDeadline(t)
	}
	return nil
}

func (s *hsSock) SetReadDeadline(t time.Time) error {
	if s.rt != nil {
		return s.rt.SetReadDeadline(t)
	}
	return nil
}

func (s *hsSock) SetWriteDeadline(t time.Time) error {
	if s.rt != nil {
		return s.rt.SetWriteDeadline(t)
	}
	return nil
}

// toRuntime moves the socket into the Go runtime's poller for net/http;
// bytes read and not yet given to crypto/tls are given first.
func (s *hsSock) toRuntime() bool {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.n.poller.Unregister(s.fd, s.tok)
	f := os.NewFile(uintptr(s.fd), "")
	s.fd = -1
	c, err := net.FileConn(f) // a duplicate
	f.Close()
	if err != nil {
		s.n.log.Warn("cannot hand a TLS connection to the HTTP server", "err", err)
		return false
	}
	if s.buf != nil {
		s.buf = append([]byte(nil), s.buf[s.off:]...) // the pooled buffer goes back
		s.off = 0
	}
	s.rt = c
	// crypto/tls keeps the connection for its life, and hsSock under it:
	// what only the hand-over to the loop needed goes.
	s.client, s.server, s.scratch = nil, nil, nil
	s.seen = tlsrec.Keys{}
	return true
}

// releaseBuf gives the read buffer back once the handshake goroutine is
// done with it (a connection handed to net/http keeps a copy of what was
// left in it).
func (s *hsSock) releaseBuf() {
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.rt == nil && s.buf != nil && cap(s.buf) == tlsrec.HeaderLen+tlsrec.MaxCiphertext+512 {
		b := s.buf[:0]
		s.buf = nil
		hsBufs.Put(&b)
	}
}

// recordLayer is the connection's TLS 1.3 record layer once crypto/tls is
// done: read keys at the client's sequence number (the application data
// records read since the handshake, and nothing else came: !s.odd),
// write keys at 0, and the records already read in rpart.
func (s *hsSock) recordLayer(suite uint16) (*tlsrec.State, error) {
	if s.given != s.recEnd {
		return nil, errors.New("request ends inside a record")
	}
	if s.odd {
		return nil, errors.New("records other than application data before the request ended")
	}
	if s.client == nil || s.server == nil {
		return nil, errors.New("no traffic secrets in the key log")
	}
	in, err := tlsrec.NewKeys(suite, s.client)
	if err != nil {
		return nil, err
	}
	out, err := tlsrec.NewKeys(suite, s.server)
	if err != nil {
		return nil, err
	}
	in.Seq = s.seen.Seq
	tr := &tlsrec.State{In: in, Out: out}
	if s.off < len(s.buf) {
		tr.RPart = append(make([]byte, 0, len(s.buf)-s.off+512), s.buf[s.off:]...)
	}
	s.client, s.server, s.scratch = nil, nil, nil
	s.seen = tlsrec.Keys{}
	return tr, nil
}

// hsKeyLog is the connection's key log (NSS format, one line a secret):
// it keeps the two application traffic secrets.
type hsKeyLog hsSock

func (k *hsKeyLog) Write(line []byte) (int, error) {
	label, rest, _ := bytes.Cut(bytes.TrimSpace(line), []byte{' '})
	_, secret, _ := bytes.Cut(rest, []byte{' '})
	var dst *[]byte
	switch string(label) {
	case "CLIENT_TRAFFIC_SECRET_0":
		dst = &k.client
	case "SERVER_TRAFFIC_SECRET_0":
		dst = &k.server
	default:
		return len(line), nil
	}
	b, err := hex.DecodeString(string(secret))
	if err != nil {
		return 0, err
	}
	*dst = b
	return len(line), nil
}

// tlsPrefixConn is a TLS 1.3 connection handed to net/http with the
// plaintext already read. A WebSocket handshake that comes later on it
// (a kept-alive connection) takes the goroutine path of tls.go.
type tlsPrefixConn struct {
	prefixConn
	tc *tls.Conn
}

func (c *tlsPrefixConn) CloseWrite() error                    { return c.tc.CloseWrite() }
func (c *tlsPrefixConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

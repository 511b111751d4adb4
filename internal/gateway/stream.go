package gateway

import (
	"encoding/json"
	"net/http"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/httpstream"
	"github.com/wsgate/wsgate/internal/netpoll"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// The HTTP transports (contract 18): GET /sse (Server-Sent Events) and
// POST /stream (newline-delimited JSON) carry the same session as a
// WebSocket. The request is judged exactly as a WebSocket handshake
// (admit, the connect proxy, the per-user limit: refusals are plain HTTP
// answers before any event), then net/http lets go of the socket
// (Hijack) and the connection is set up by establish like any other: on
// a plain socket it is held by the event loop (no goroutine, no buffer
// while idle), a TLS one keeps crypto/tls's reader and writer (tls.go).
// Only the bytes differ: the answer's head, each frame and the
// keep-alives are internal/httpstream's (as a WebSocket's are
// internal/wsframe's), and the 200 goes out with the welcome (a setup
// that fails is refused instead, as for /ws). The client's frames come
// by POST /v1/conn/{conn_id} (connpost.go), to any node.

// Transports of a connection (conn.tp).
const (
	tpWS uint8 = iota
	tpSSE
	tpStream
	tpPusher // a WebSocket speaking the Pusher protocol (pusher.go)
)

// tpNames are the transports' names: the metric label, the welcome's
// transport field and WSGATE_TRANSPORTS.
var tpNames = [...]string{tpWS: "ws", tpSSE: "sse", tpStream: "stream", tpPusher: "pusher"}

// isHTTPStream reports whether tp carries frames in an HTTP answer (SSE,
// ndjson) rather than WebSocket frames.
func isHTTPStream(tp uint8) bool { return tp == tpSSE || tp == tpStream }

// pingFrameLocked is the keep-alive of the connection's transport.
func (c *conn) pingFrameLocked() []byte {
	if isHTTPStream(c.tp) {
		return httpstream.KeepAlive(streamKind(c.tp))
	}
	return wsframe.PingFrame
}

// wroteStreamLocked pushes a stream's keep-alive back: it is due only
// when nothing else was sent for the ping interval (contract 18).
func (c *conn) wroteStreamLocked() {
	c.nextPing = time.Now().Add(c.n.cfg.PingInterval).Unix()
}

// closeFrame is the close frame of the connection's transport: on the
// HTTP transports the frame {"type":"close","code","reason"} (the stream
// then ends).
func (c *conn) closeFrame(code int, reason string) []byte {
	switch c.tp {
	case tpWS:
		return wsframe.CloseFrame(code, reason)
	case tpPusher:
		return wsframe.CloseFrame(protocol.PusherCloseCode(code), reason)
	}
	b, _ := json.Marshal(protocol.StreamClose{Type: protocol.TypeClose, Code: code, Reason: reason})
	return c.streamFrame(b, "")
}

// streamFrame is one frame on the connection's HTTP transport
// (httpstream.Frame).
func (c *conn) streamFrame(b []byte, id string) []byte {
	return httpstream.Frame(streamKind(c.tp), b, id)
}

// streamKind is the httpstream.Kind of an HTTP transport.
func streamKind(tp uint8) httpstream.Kind {
	if tp == tpSSE {
		return httpstream.SSE
	}
	return httpstream.NDJSON
}

// reliableFrameLocked is the frame of a reliable message (a seq) just
// queued on c, whose stream position is already moved to it: on SSE the
// event carries the cursor of every stream of the connection (cursor.go).
func (c *conn) reliableFrameLocked(msgJSON []byte) []byte {
	return c.streamFrame(msgJSON, c.cursorLocked())
}

// streamFrame is d's frame on transport tp (non-reliable messages: the
// same bytes for every connection of the transport).
func (d *delivery) streamFrame(tp uint8) []byte {
	if tp == tpSSE {
		d.sseOnce.Do(func() { d.sse = httpstream.Frame(httpstream.SSE, d.msgJSON, "") })
		return d.sse
	}
	d.ndOnce.Do(func() { d.nd = httpstream.Frame(httpstream.NDJSON, d.msgJSON, "") })
	return d.nd
}

func (n *Node) serveSSE(w http.ResponseWriter, r *http.Request) { n.serveHTTPStream(w, r, tpSSE) }

func (n *Node) serveNDJSON(w http.ResponseWriter, r *http.Request) { n.serveHTTPStream(w, r, tpStream) }

// serveHTTPStream is GET /sse and POST /stream: the checks of a WebSocket
// handshake, then the connection on the socket net/http lets go of.
func (n *Node) serveHTTPStream(w http.ResponseWriter, r *http.Request, tp uint8) {
	// An HTTP/2 stream's handler returns when the connection ends, after
	// the handshake's count (Shutdown waits for that count before it
	// closes connections).
	var h2 *h2Stream
	defer func() {
		if h2 != nil {
			<-h2.done
		}
	}()
	if !n.startHandshake() {
		n.refuse(w, admission.ShuttingDown())
		return
	}
	defer n.endHandshake()
	req, f := httpstream.ReadRequest(r, streamKind(tp))
	if f != nil {
		n.refuse(w, f)
		return
	}
	a, f := n.admitHTTP(r.Context(), &req)
	if f != nil {
		n.refuse(w, f)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok || r.ProtoMajor != 1 {
		// HTTP/2: its streams share one connection, which the event loop
		// cannot take over (streamh2.go).
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		h2 = newH2Stream(w, r)
		c := n.newConn(&a, -1, newTLSIO(h2), tp)
		c.outq = [][]byte{httpstream.Header(streamKind(tp), req.Origin)}
		c.preamble = true
		n.establish(c, a.IP, a.Since, a.HasSince, a.RoomSince, nil)
		return
	}
	netConn, _, err := hj.Hijack()
	if err != nil {
		n.gate.Release(&a)
		n.log.Warn("cannot take over a stream's connection", "err", err)
		return
	}
	// The server's deadlines (a request arrives whole within 10 s) must
	// not end the connection. What the client sends from now on is
	// ignored (its frames come by POST); its end ends the connection.
	_ = netConn.SetDeadline(time.Time{})
	fd := -1
	var tlsc *tlsIO
	if tc, ok := netConn.(tlsStream); ok {
		tlsc = newTLSIO(tc)
	} else if fd, err = netpoll.TakeFD(netConn); err != nil {
		n.gate.Release(&a)
		netConn.Close()
		n.log.Error("cannot take the socket into the event loop", "err", err)
		return
	} else if pong := n.cfg.PongTimeout; pong > 0 {
		// The client sends nothing on the stream: liveness is the
		// kernel's. A peer that takes none of the keep-alives for the
		// pong timeout is gone (the socket errors, the loop tears down).
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(pong/time.Millisecond))
	}
	c := n.newConn(&a, fd, tlsc, tp)
	c.outq = [][]byte{httpstream.Header(streamKind(tp), req.Origin)}
	c.preamble = true
	n.establish(c, a.IP, a.Since, a.HasSince, a.RoomSince, nil)
}

// streamPreflight answers the CORS preflight of POST /stream and POST
// /v1/conn/{conn_id} (a JSON body and an Authorization header).
func (n *Node) streamPreflight(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Add("Vary", "Origin")
	origin := r.Header.Get("Origin")
	if origin == "" || len(r.Header.Values("Origin")) != 1 || !n.gate.Origins().AllowOrigin(origin, r.Host) {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	hd.Set("Access-Control-Allow-Origin", origin)
	hd.Set("Access-Control-Allow-Credentials", "true")
	hd.Set("Access-Control-Allow-Methods", "POST")
	hd.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID")
	hd.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

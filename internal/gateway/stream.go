package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/admission"
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
// Only the bytes of each frame differ (streamFrame); the client's frames
// come by POST /v1/conn/{conn_id} (connpost.go), to any node.

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

// maxStreamBody bounds the JSON body of POST /stream.
const maxStreamBody = 64 << 10

// Keep-alive lines sent when nothing else was sent for ping_interval_ms:
// an SSE comment, an empty ndjson line (both ignored by clients).
var (
	sseComment = []byte(":\n\n")
	ndjsonIdle = []byte("\n")
)

// pingFrameLocked is the keep-alive of the connection's transport.
func (c *conn) pingFrameLocked() []byte {
	switch c.tp {
	case tpSSE:
		return sseComment
	case tpStream:
		return ndjsonIdle
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

// streamFrame is one frame on an HTTP transport: an SSE event (its data
// line, and the id line when id is set) or an ndjson line. A JSON object
// holds a raw line break only as white space: it is replaced by a space,
// so that each frame stays one line.
func (c *conn) streamFrame(b []byte, id string) []byte {
	return streamFrameOf(c.tp, b, id)
}

func streamFrameOf(tp uint8, b []byte, id string) []byte {
	n := len(b) + 1
	if tp == tpSSE {
		n += len("data: \n\n")
		if id != "" {
			n += len("id: \n") + len(id)
		}
	}
	out := make([]byte, 0, n)
	if tp == tpSSE {
		out = append(out, "data: "...)
	}
	start := len(out)
	out = append(out, b...)
	if bytes.ContainsAny(b, "\r\n") {
		for i := start; i < len(out); i++ {
			if out[i] == '\r' || out[i] == '\n' {
				out[i] = ' '
			}
		}
	}
	out = append(out, '\n')
	if tp == tpSSE {
		if id != "" {
			out = append(out, "id: "...)
			out = append(out, id...)
			out = append(out, '\n')
		}
		out = append(out, '\n')
	}
	return out
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
		d.sseOnce.Do(func() { d.sse = streamFrameOf(tpSSE, d.msgJSON, "") })
		return d.sse
	}
	d.ndOnce.Do(func() { d.nd = streamFrameOf(tpStream, d.msgJSON, "") })
	return d.nd
}

// streamHeader is the 200 answer that opens a stream (not sent before the
// welcome: a setup that fails is refused instead, as for /ws). The body
// ends with the connection (no Content-Length, no chunking): buffering
// proxies are asked not to hold it (X-Accel-Buffering).
func streamHeader(tp uint8, origin string) []byte {
	ct := "text/event-stream"
	if tp == tpStream {
		ct = "application/x-ndjson"
	}
	b := make([]byte, 0, 256)
	b = append(b, "HTTP/1.1 200 OK\r\nContent-Type: "...)
	b = append(b, ct...)
	b = append(b, "\r\nCache-Control: no-cache, no-store\r\nConnection: close\r\nX-Accel-Buffering: no\r\n"...)
	if origin != "" {
		// admit has allowed it (WSGATE_ALLOWED_ORIGINS or same host).
		b = append(b, "Access-Control-Allow-Origin: "...)
		b = append(b, origin...)
		b = append(b, "\r\nAccess-Control-Allow-Credentials: true\r\nVary: Origin\r\n"...)
	}
	return append(b, "\r\n"...)
}

func (n *Node) serveSSE(w http.ResponseWriter, r *http.Request) { n.serveHTTPStream(w, r, tpSSE) }

func (n *Node) serveNDJSON(w http.ResponseWriter, r *http.Request) { n.serveHTTPStream(w, r, tpStream) }

// streamBody is the JSON body POST /stream may carry instead of the
// query parameters.
type streamBody struct {
	Token     string          `json:"token"`
	Since     json.RawMessage `json:"since"`
	RoomSince []string        `json:"room_since"`
	Device    *string         `json:"device"`
	Format    string          `json:"format"`
	User      string          `json:"user"` // insecure mode only, as ?user=
}

// streamRequest reads the handshake parameters of an HTTP transport
// request; a non-nil refusal is its answer.
func (n *Node) streamRequest(r *http.Request, tp uint8) (admission.Request, *admission.Refusal) {
	req := admission.FromHTTP(r)
	req.Protocols, req.Exts = nil, nil // no subprotocol, no deflate
	if len(r.Header.Values("Origin")) > 1 {
		return req, admission.Refuse(http.StatusBadRequest, "bad_request", "more than one Origin header")
	}
	if tp == tpStream && r.Body != nil {
		raw, err := io.ReadAll(io.LimitReader(r.Body, maxStreamBody+1))
		if err != nil {
			return req, admission.Refuse(http.StatusBadRequest, "bad_request", "request body: "+err.Error())
		}
		if len(raw) > maxStreamBody {
			return req, admission.Refuse(http.StatusRequestEntityTooLarge, "bad_request", "request body over 64 KiB")
		}
		if len(bytes.TrimSpace(raw)) > 0 {
			var body streamBody
			if err := json.Unmarshal(raw, &body); err != nil {
				return req, admission.Refuse(http.StatusBadRequest, "bad_request", "request body: "+err.Error())
			}
			if body.Token != "" && req.Authz == "" {
				// A body is not a URL: it ends up in no access log.
				req.Authz = "Bearer " + body.Token
			}
			if len(body.Since) > 0 && string(body.Since) != "null" {
				s := strings.Trim(string(body.Since), `"`)
				req.Query.Set("since", s)
			}
			for _, v := range body.RoomSince {
				req.Query.Add("room_since", v)
			}
			if body.Device != nil {
				req.Query.Set("device", *body.Device)
			}
			if body.Format != "" {
				req.Query.Set("format", body.Format)
			}
			if body.User != "" {
				req.Query.Set("user", body.User)
			}
		}
	}
	if tp == tpSSE && req.Authz == "" {
		// EventSource cannot set headers: /sse takes the query token also
		// when WSGATE_ALLOW_QUERY_TOKEN is false (contract 18).
		if t := req.Query.Get("token"); t != "" {
			req.Authz = "Bearer " + t
		}
	}
	if f := req.Query.Get("format"); f != "" && f != "json" {
		return req, admission.Refuse(http.StatusBadRequest, "bad_request", "format "+strconv.Quote(f)+" is not carried on "+tpNames[tp]+": its frames are JSON text (use format=json, or a WebSocket for msgpack)")
	}
	if tp == tpSSE {
		id := r.Header.Get("Last-Event-ID")
		if id == "" {
			id = req.Query.Get("last_event_id")
		}
		if id != "" {
			if err := resumeFromCursor(req.Query, id); err != nil {
				return req, admission.Refuse(http.StatusBadRequest, "bad_request", err.Error())
			}
		}
	}
	return req, nil
}

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
	req, f := n.streamRequest(r, tp)
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
		c.outq = [][]byte{streamHeader(tp, req.Origin)}
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
	c.outq = [][]byte{streamHeader(tp, req.Origin)}
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

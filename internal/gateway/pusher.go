package gateway

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// The Pusher Channels protocol on /app/{key} (contract 21; the wire
// format is protocol/pusher.go, the channels pusher_channels.go, the HTTP
// API pusher_api.go).
//
// A Pusher connection is a wsgate connection (conn.tp = tpPusher): the
// same accept path on the event loop, limits, queues, liveness, drain
// and metrics (transport label "pusher"). Only its frames differ: every
// frame queued for it is written the Pusher way (pusherFrameOf; a
// delivery's once, pusherFrame), and its client frames are Pusher events
// (pusherMessage). Nobody is authenticated on a Pusher connection: its
// user is its socket_id ("P.N": P from the node's id prefix, N the
// connection's sequence number, so unique in the cluster), and a presence
// channel's member is the channel_data's user_id, signed by the app's
// auth endpoint.

// isPusherRequestLine reports whether req starts with "GET /app/".
func isPusherRequestLine(req []byte) bool {
	const p = "GET /app/"
	return len(req) > len(p) && string(req[:len(p)]) == p
}

// pusherSocketID is the socket_id of the connection with sequence seq.
func (n *Node) pusherSocketID(seq uint64) string {
	return strconv.FormatUint(uint64(n.pusherPrefix), 10) + "." + strconv.FormatUint(seq, 10)
}

// setPusherPrefix derives the first half of socket ids from the node's
// random id prefix (8 hex digits).
func (n *Node) setPusherPrefix() {
	b, err := hex.DecodeString(n.idPrefix)
	if err != nil || len(b) < 4 {
		return
	}
	n.pusherPrefix = uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// pusherActivityTimeout is the activity_timeout sent: the seconds of
// silence after which the client pings. Pusher's own 120, or less so
// that a client pings well within the pong timeout.
func (n *Node) pusherActivityTimeout() int {
	return max(1, min(120, int(n.cfg.PongTimeout/time.Second)/2))
}

// pusherProblem is why a Pusher handshake is answered with pusher:error
// and closed after the upgrade (as Pusher does, so that the client sees
// the code): an unknown app key (4001), an unsupported protocol (4007).
func (n *Node) pusherProblem(path string, q map[string][]string) (code int, msg string) {
	key := strings.TrimPrefix(path, "/app/")
	if key != n.cfg.PusherKey {
		return protocol.PusherErrAppUnknown, "App key " + key + " not in this cluster"
	}
	p := ""
	if v := q["protocol"]; len(v) > 0 {
		p = v[0]
	}
	if v, err := strconv.Atoi(p); err != nil || v != protocol.PusherProtocol {
		return protocol.PusherErrProtocol, "Unsupported protocol version " + strconv.Quote(p) + ": this server speaks 7"
	}
	return 0, ""
}

// pusherRefusal is the upgrade answer, pusher:error and the close frame
// of a handshake with a pusherProblem.
func pusherRefusal(resp []byte, code int, msg string) []byte {
	b := append([]byte(nil), resp...)
	b = append(b, wsframe.Frame(wsframe.OpText, protocol.EncodePusherError(code, msg, ""))...)
	return append(b, wsframe.CloseFrame(code, msg)...)
}

// admitPusher runs the checks of a handshake that a Pusher connection
// goes through: the node accepts connections, the Origin, the handshake
// rate and the connection limit of the IP. It carries no token.
func (n *Node) admitPusher(req *admission.Request) (admission.Params, *admission.Refusal) {
	a, f := n.gate.Peer(req)
	a.Transport, a.Claims = tpPusher, &auth.Claims{}
	if f != nil {
		return a, f
	}
	return a, n.gate.AcquireIP(req.IP)
}

// pusherLocked takes a whole GET /app/{key} on the own accept path.
func (h *hsConn) pusherLocked(req, rest []byte) {
	n := h.a.n
	r, resp, ok := h.upgradeLocked(req)
	if !ok {
		return
	}
	if code, msg := n.pusherProblem(r.Path, r.Query); code != 0 {
		n.metrics.HandshakeRejected.WithLabelValues("pusher_" + strconv.Itoa(code)).Inc()
		h.writeCloseLocked(pusherRefusal(resp, code, msg))
		return
	}
	adm, f := n.admitPusher(&r)
	if f != nil {
		h.refuseLocked(f)
		return
	}
	initial := append([]byte(nil), rest...)
	fd, tok := h.fd, h.tok
	if !n.goHandshake(func() { n.establishOwn(fd, tok, nil, adm, resp, initial) }) {
		n.gate.Release(&adm)
		h.refuseLocked(admission.ShuttingDown())
		return
	}
	h.fd = -1
}

// servePusher is GET /app/{key} through net/http: TLS 1.2 clients and
// requests on kept-alive HTTP connections.
func (n *Node) servePusher(w http.ResponseWriter, r *http.Request) {
	if !admission.IsUpgrade(r) {
		n.refuse(w, admission.Refuse(http.StatusBadRequest, "bad_request", "not a WebSocket upgrade request (GET with Upgrade: websocket, Sec-WebSocket-Version: 13)"))
		return
	}
	if !n.startHandshake() {
		n.refuse(w, admission.ShuttingDown())
		return
	}
	defer n.endHandshake()
	req := admission.FromHTTP(r)
	code, msg := n.pusherProblem(r.URL.Path, r.URL.Query())
	var a admission.Params
	if code == 0 {
		var f *admission.Refusal
		if a, f = n.admitPusher(&req); f != nil {
			n.refuse(w, f)
			return
		}
	}
	netConn, _, _, err := upgrader.Upgrade(r, w)
	if err != nil {
		if code == 0 {
			n.gate.Release(&a)
		}
		n.metrics.HandshakeRejected.WithLabelValues("bad_request").Inc()
		return
	}
	_ = netConn.SetDeadline(time.Time{})
	if code != 0 {
		n.metrics.HandshakeRejected.WithLabelValues("pusher_" + strconv.Itoa(code)).Inc()
		_, _ = netConn.Write(pusherRefusal(nil, code, msg))
		netConn.Close()
		return
	}
	fd, tlsc, ok := n.takeUpgraded(netConn, &a)
	if !ok {
		return
	}
	n.establish(n.newConn(&a, fd, tlsc, tpPusher), a.IP, 0, false, nil, nil)
}

// pusherFrame is d's frame on Pusher connections, encoded once.
func (d *delivery) pusherFrame(n *Node) []byte {
	d.pOnce.Do(func() { d.pusher = pusherMessageFrame(d.msgJSON) })
	return d.pusher
}

// pusherMessageFrame is a message (its wsgate JSON) as a Pusher event:
// the room is the channel, data a string; on a presence channel the
// sender of a client event is user_id.
func pusherMessageFrame(msgJSON []byte) []byte {
	var m protocol.Message
	if err := json.Unmarshal(msgJSON, &m); err != nil {
		return nil
	}
	channel, user := "", ""
	if m.Target.Type == protocol.TargetRoom {
		channel = m.Target.ID
		if strings.HasPrefix(channel, "presence-") {
			user = m.From
		}
	}
	return wsframe.Frame(wsframe.OpText, protocol.EncodePusher(m.Event, channel, protocol.PusherDataString(m.Data), user))
}

// pusherFrameOf writes a wsgate frame (its JSON) the Pusher way: the
// welcome is pusher:connection_established, a message an event, an error
// pusher:error; other frames (a gap, a redirect) keep their JSON as the
// data of "wsgate:<type>", which Pusher clients ignore.
func (c *conn) pusherFrameOf(b []byte) []byte {
	var head struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(b, &head)
	var out []byte
	switch head.Type {
	case protocol.TypeWelcome:
		d, _ := json.Marshal(map[string]any{"socket_id": c.user, "activity_timeout": c.n.pusherActivityTimeout()})
		out = protocol.EncodePusher(protocol.PusherConnectionEstablished, "", string(d), "")
	case protocol.TypeMessage:
		return pusherMessageFrame(b)
	case protocol.TypeError:
		code := 0
		if head.Code == protocol.ErrRateLimited {
			code = protocol.PusherErrClientRate
		}
		out = protocol.EncodePusherError(code, head.Message, "")
	default:
		out = protocol.EncodePusher("wsgate:"+head.Type, "", string(b), "")
	}
	return wsframe.Frame(wsframe.OpText, out)
}

// sendPusher queues a Pusher frame (its JSON) on c.
func (c *conn) sendPusher(b []byte) { c.send(wsframe.Frame(wsframe.OpText, b)) }

func (c *conn) sendPusherLocked(b []byte) { c.sendLocked(wsframe.Frame(wsframe.OpText, b)) }

// pusherPong answers pusher:ping.
var pusherPong = protocol.EncodePusher(protocol.PusherPong, "", "{}", "")

// pusherMessage takes one client frame of a Pusher connection (on its
// reader): pusher:ping is answered at once when nothing waits, the rest goes to the
// connection's inbound queue, in order. A frame that does not parse gets
// pusher:error and counts toward the refused frames' limit.
func (c *conn) pusherMessage(payload []byte) bool {
	f, err := protocol.ParsePusherFrame(payload)
	if err != nil {
		c.n.metrics.ClientFrames.WithLabelValues("invalid").Inc()
		return c.refuse(protocol.ErrBadFrame, err.Error())
	}
	c.n.metrics.ClientFrames.WithLabelValues(pusherFrameLabel(f.Event)).Inc()
	if f.Event == protocol.PusherPing {
		// At once, unless frames sent before it are still waiting: its
		// pong must not overtake their answers (a client that reads the
		// pong as "all I sent is done", an unsubscribe for one).
		c.mu.Lock()
		idle := !c.running && (c.x == nil || len(c.x.inq) == 0)
		c.mu.Unlock()
		if idle {
			c.sendPusher(pusherPong)
			return true
		}
	}
	cf := &protocol.ClientFrame{Type: f.Event, Room: f.Channel, Data: append(json.RawMessage(nil), f.Data...)}
	c.mu.Lock()
	x := c.extra()
	if len(x.inq) >= 64 {
		c.mu.Unlock()
		c.sendPusher(protocol.EncodePusherError(protocol.PusherErrClientRate, "too many frames waiting; frame dropped", f.Channel))
		return true
	}
	x.inq = append(x.inq, cf)
	if !c.running {
		c.running = true
		c.n.spawn(c.runInbound)
	}
	c.mu.Unlock()
	return true
}

// pusherFrameLabel is the metric label of a Pusher client frame: its
// event for the protocol's own, "client" for client events (their names
// are the application's).
func pusherFrameLabel(event string) string {
	switch event {
	case protocol.PusherPing, protocol.PusherPong, protocol.PusherSubscribe, protocol.PusherUnsubscribe:
		return event
	}
	if strings.HasPrefix(event, "client-") {
		return "pusher:client"
	}
	return "pusher:other"
}

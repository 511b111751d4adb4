package gateway

import (
	"errors"
	"net/http"
	"sync"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// permessage-deflate (contract §14, RFC 7692), always without context
// takeover in either direction: the node compresses each message on its
// own with a pooled compressor, and asks clients to do the same, so a
// connection holds no compression state (one bool, conn.deflate) and an
// idle one costs what it costs without compression.
//
// Outbound, a frame of at least wsframe.MinCompressSize payload bytes to
// a deflate connection is sent compressed. A delivery is compressed once,
// lazily, by the first deflate recipient, and that frame is shared by
// every other deflate recipient as the plain one is by the rest.
// Inbound, a compressed client message is inflated (pooled decompressor,
// reset per message) within WSGATE_MAX_MESSAGE_BYTES: the limit applies
// to the inflated size, so a deflate bomb is closed with 1009 after at
// most that many bytes.

// acceptsDeflate is the negotiation both handshake paths run (admit): the
// node takes permessage-deflate when WSGATE_COMPRESSION is on and the
// request offers it acceptably (wsframe.AcceptDeflate). An offer it
// cannot take is declined, never refused.
func (n *Node) acceptsDeflate(req *admission.Request) bool {
	return n.cfg.CompressionOn() && len(req.Exts) > 0 && wsframe.AcceptDeflate(req.Exts)
}

const deflateHeader = "Sec-WebSocket-Extensions: " + wsframe.DeflateResponse + "\r\n"

// with101Extension adds the accepted extension to a 101 answer built by
// gobwas' upgrader (own accept path), which ends with the blank line.
func with101Extension(resp []byte) []byte {
	out := make([]byte, 0, len(resp)+len(deflateHeader))
	out = append(out, resp[:len(resp)-2]...)
	out = append(out, deflateHeader...)
	return append(out, "\r\n"...)
}

// deflateUpgrader is upgrader answering with the accepted extension
// (net/http path).
var deflateUpgrader = func() ws.HTTPUpgrader {
	u := upgrader
	u.Header = http.Header{"Sec-Websocket-Extensions": {wsframe.DeflateResponse}}
	return u
}()

// httpUpgrader is the net/http path's upgrader for an admission.
func httpUpgrader(a *admission.Params) *ws.HTTPUpgrader {
	if a.Deflate {
		return &deflateUpgrader
	}
	return &upgrader
}

// zframe is a delivery's compressed frame for one format, made once.
type zframe struct {
	once sync.Once
	fr   []byte
	raw  int // payload bytes before compression
}

// frameFor returns the frame of d for c: compressed for a deflate
// connection when the payload is large enough, plain otherwise.
func (d *delivery) frameFor(c *conn) []byte {
	switch {
	case isHTTPStream(c.tp):
		return d.streamFrame(c.tp)
	case c.tp == tpPusher:
		return d.pusherFrame(c.n)
	}
	fr := d.frame(c.format)
	if !c.deflate || fr == nil {
		return fr
	}
	z := &d.ztext
	if c.format == protocol.MsgPack {
		z = &d.zbin
	}
	z.once.Do(func() {
		_, hs, err := wsframe.ParseHeader(fr, false)
		if err != nil || len(fr)-hs < wsframe.MinCompressSize {
			return
		}
		z.raw = len(fr) - hs
		z.fr = c.n.compressFrame(fr[0]&0x0f, fr[hs:])
	})
	if z.fr == nil {
		return fr
	}
	c.n.countCompressed(z.raw, z.fr)
	return z.fr
}

// deflatedFrame wraps a payload made for c alone: compressed for a
// deflate connection when it is large enough.
func (c *conn) deflatedFrame(op byte, b []byte) ([]byte, bool) {
	if !c.deflate || len(b) < wsframe.MinCompressSize {
		return nil, false
	}
	fr := c.n.compressFrame(op, b)
	c.n.countCompressed(len(b), fr)
	return fr, true
}

// compressFrame runs the compressor once; deflated counts the runs.
func (n *Node) compressFrame(op byte, payload []byte) []byte {
	n.deflated.Add(1)
	return wsframe.DeflateFrame(op, payload)
}

// countCompressed counts one compressed frame prepared for a connection.
func (n *Node) countCompressed(raw int, fr []byte) {
	n.metrics.UncompressedBytes.Add(float64(raw))
	n.metrics.CompressedBytes.Add(float64(payloadLen(fr)))
}

// payloadLen is the payload size of a whole unmasked frame.
func payloadLen(fr []byte) int {
	switch fr[1] & 0x7f {
	case 126:
		return len(fr) - 4
	case 127:
		return len(fr) - 10
	}
	return len(fr) - 2
}

// inflateBufs hold the buffers compressed client messages are inflated
// into, for the time of their handling only.
var inflateBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// onCompressed inflates a compressed client message and handles it; false
// ends reading (closed with 1009 past WSGATE_MAX_MESSAGE_BYTES inflated,
// 1007 when it does not inflate).
func (c *conn) onCompressed(op byte, z []byte) bool {
	bp := inflateBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 64<<10 {
			*bp = (*bp)[:0]
			inflateBufs.Put(bp)
		}
	}()
	out, err := wsframe.AppendInflate((*bp)[:0], z, c.n.cfg.MaxMessageBytes)
	*bp = out[:0]
	switch {
	case errors.Is(err, wsframe.ErrInflatedTooBig):
		c.close(protocol.CloseTooBig, "message too big")
		return false
	case err != nil:
		c.close(1007, "compressed message does not inflate")
		return false
	}
	return c.onMessage(op, out)
}

package gateway

import (
	"encoding/binary"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// OnReadable is called on the connection's event loop when its socket has
// input or hung up. buf is the loop's shared buffer.
func (c *conn) OnReadable(buf []byte) {
	for {
		c.mu.Lock()
		if c.state == stClosed {
			c.mu.Unlock()
			return
		}
		n, err := unix.Read(c.fd, buf)
		if n > 0 {
			c.lastRead = time.Now().Unix()
		}
		c.mu.Unlock()
		if n > 0 {
			if c.tr != nil {
				if !c.consumeTLS(buf[:n]) {
					return
				}
			} else if !c.consume(buf[:n]) {
				return
			}
			// Read again even after a short read: a FIN that came with
			// the data has no edge of its own, only the next read (0)
			// shows it.
			continue
		}
		if err == unix.EAGAIN || err == unix.EINTR {
			if err == unix.EINTR {
				continue
			}
			return
		}
		// EOF or error: the peer is gone.
		c.teardown("read: peer closed")
		return
	}
}

// feed is the entry point for bytes read outside the event loop (the rest
// of the handshake's buffer).
func (c *conn) feed(b []byte) {
	if len(b) > 0 && !c.consume(append([]byte(nil), b...)) {
		return
	}
	if c.tr != nil && len(c.tr.RPart) > 0 {
		c.consumeTLS(nil) // records read with the handshake, after its request
	}
}

// consume parses every complete frame in data (plus what was left from
// before). It returns false once the connection is finished.
func (c *conn) consume(data []byte) bool {
	if isHTTPStream(c.tp) {
		// An HTTP stream's client sends its frames by POST; bytes on the
		// stream's own connection mean nothing.
		return true
	}
	was := c.holdsPartial()
	defer func() { c.accountPartial(was) }()
	if len(c.rbuf) > 0 {
		c.rbuf = append(c.rbuf, data...)
		data = c.rbuf
	}
	max := int64(c.n.cfg.MaxMessageBytes)
	parse := wsframe.ParseHeader
	if c.deflate {
		parse = wsframe.ParseHeaderDeflate
	}
	for len(data) > 0 {
		h, hs, err := parse(data, true)
		if err != nil {
			c.protocolError(err.Error())
			return false
		}
		if hs == 0 {
			break // header incomplete
		}
		if !wsframe.IsControl(h.OpCode) {
			total := h.Length
			if c.frag != nil && h.OpCode == wsframe.OpContinuation {
				total += int64(len(c.frag.data))
			}
			if total > max {
				c.rbuf = nil
				c.close(protocol.CloseTooBig, "frame too big")
				return false
			}
		}
		if int64(len(data)-hs) < h.Length {
			break // payload incomplete
		}
		payload := data[hs : hs+int(h.Length)]
		wsframe.Unmask(payload, h.Mask)
		data = data[hs+int(h.Length):]
		if !c.onFrame(h, payload) {
			c.rbuf = nil
			return false
		}
	}
	// Keep an incomplete frame for the next read, in a buffer of its own.
	if len(data) == 0 {
		c.rbuf = nil
	} else if len(c.rbuf) == 0 || &data[0] != &c.rbuf[0] {
		c.rbuf = append(make([]byte, 0, len(data)+512), data...)
	} else {
		c.rbuf = c.rbuf[:copy(c.rbuf, data)]
	}
	return true
}

// partialFrameTimeout bounds how long a client may take to send a frame
// (or a fragmented message) once its first byte has come: trickled
// frames would otherwise hold up to the message limit of heap per
// connection for ever.
const partialFrameTimeout = 10 * time.Second

// holdsPartial reports whether the reader keeps an unfinished frame or
// message (reader only).
func (c *conn) holdsPartial() bool {
	return len(c.rbuf) > 0 || c.frag != nil || (c.tr != nil && len(c.tr.RPart) > 0)
}

// expirePartial closes with 1008 the connections whose unfinished frame
// began partialFrameTimeout ago or more, and forgets the ended ones (the
// sweep calls it once a second).
func (n *Node) expirePartial(now int64) {
	n.partial.Range(func(k, v any) bool {
		c := k.(*conn)
		c.mu.Lock()
		switch {
		case c.state == stClosed:
			n.partial.CompareAndDelete(c, v)
		case c.state < stClosing && now-v.(*partialState).since >= int64(partialFrameTimeout/time.Second):
			c.closeWithReasonLocked(protocol.ClosePolicy, "a frame not completed within 10 s")
		}
		c.mu.Unlock()
		return true
	})
}

// peerCloseAnswer is the close a client's close frame is answered with:
// its code echoed, 1000 when it had none, 1002 for a code it may not send
// or a 1-byte payload, 1007 for a reason that is not UTF-8.
func peerCloseAnswer(payload []byte) (code int, reason string) {
	switch {
	case len(payload) == 0:
		return protocol.CloseNormal, ""
	case len(payload) == 1:
		return 1002, "protocol error: 1-byte close payload"
	}
	code = int(binary.BigEndian.Uint16(payload))
	if !wsframe.ValidCloseCode(code) {
		return 1002, "protocol error: invalid close code"
	}
	if !utf8.Valid(payload[2:]) {
		return 1007, "invalid UTF-8 in the close reason"
	}
	return code, ""
}

func (c *conn) protocolError(msg string) {
	c.logger().Info("protocol error", "err", msg)
	c.close(1002, "protocol error")
}

// onFrame handles one complete frame; false ends reading.
func (c *conn) onFrame(h wsframe.Header, payload []byte) bool {
	switch h.OpCode {
	case wsframe.OpPing:
		c.send(wsframe.Frame(wsframe.OpPong, payload))
		return true
	case wsframe.OpPong:
		return true
	case wsframe.OpClose:
		c.mu.Lock()
		if c.state >= stClosing {
			// Our close was answered: done.
			c.teardownLocked("close handshake done")
			c.mu.Unlock()
			return false
		}
		c.mu.Unlock()
		code, reason := peerCloseAnswer(payload)
		c.close(code, reason)
		return false
	case wsframe.OpContinuation:
		if c.frag == nil {
			c.protocolError("continuation without a started message")
			return false
		}
		c.frag.data = append(c.frag.data, payload...)
		if !h.Fin {
			return true
		}
		f := c.frag
		c.frag = nil
		if f.rsv1 {
			return c.onCompressed(f.op, f.data)
		}
		return c.onMessage(f.op, f.data)
	default: // text or binary
		if c.frag != nil {
			c.protocolError("new message inside a fragmented one")
			return false
		}
		if !h.Fin {
			c.frag = &fragment{op: h.OpCode, rsv1: h.Rsv1, data: append([]byte(nil), payload...)}
			return true
		}
		if h.Rsv1 {
			return c.onCompressed(h.OpCode, payload)
		}
		return c.onMessage(h.OpCode, payload)
	}
}

// onMessage handles one whole client message (payload valid only now).
func (c *conn) onMessage(op byte, payload []byte) bool {
	more, _ := c.onClientMessage(op, payload)
	return more
}

// onClientMessage handles one whole client message: from the socket's
// reader, or posted to an HTTP stream connection (connpost.go), one at a
// time. more is false once the connection is finished; limited is true
// when the frame was refused for the message rate.
func (c *conn) onClientMessage(op byte, payload []byte) (more, limited bool) {
	c.mu.Lock()
	closing := c.state >= stClosing
	c.mu.Unlock()
	if closing {
		return true, false // only the peer's close frame matters now
	}
	if op == wsframe.OpBinary && c.format == protocol.JSON {
		c.n.metrics.ClientFrames.WithLabelValues("invalid").Inc()
		c.close(protocol.ClosePolicy, "binary frame on a JSON connection")
		return false, false
	}
	if op == wsframe.OpText && !utf8.Valid(payload) {
		c.close(1007, "invalid UTF-8")
		return false, false
	}
	if rate := c.n.cfg.MessageRate; rate > 0 {
		now := time.Now()
		sec := now.Unix()
		if sec != c.rateSec {
			c.rateSec, c.rateCount = sec, 0
		}
		c.rateCount++
		if float64(c.rateCount) > 2*rate {
			c.close(protocol.CloseRateLimited, "message rate exceeded")
			return false, true
		}
		if !c.rate.Take(rate, now.UnixNano()) {
			c.n.metrics.Dropped.WithLabelValues(metrics.DropRateLimited).Inc()
			c.sendError(protocol.ErrRateLimited, "message rate exceeded; frame dropped")
			return true, true
		}
	}
	if c.tp == tpPusher {
		return c.pusherMessage(payload), false
	}
	f := protocol.JSON
	if op == wsframe.OpBinary {
		f = protocol.MsgPack
	}
	cf, err := protocol.DecodeClient(f, payload)
	if err != nil {
		c.n.metrics.ClientFrames.WithLabelValues("invalid").Inc()
		code := protocol.ErrBadFrame
		if de, ok := err.(*protocol.DecodeError); ok {
			code = de.Code
		}
		return c.refuse(code, err.Error()), false
	}
	c.n.metrics.ClientFrames.WithLabelValues(cf.Type).Inc()
	c.mu.Lock()
	idle := !c.running && (c.x == nil || len(c.x.inq) == 0)
	if cf.Type == protocol.TypePing && idle && c.state == stOpen {
		c.mu.Unlock()
		c.send(c.pongFrame(cf))
		return true, false
	}
	x := c.extra()
	if len(x.inq) >= 64 {
		c.mu.Unlock()
		c.sendError(protocol.ErrRateLimited, "too many frames waiting; frame dropped")
		return true, true
	}
	x.inq = append(x.inq, cf)
	if !c.running {
		c.running = true
		c.n.spawn(c.runInbound)
	}
	c.mu.Unlock()
	return true, false
}

// refuse answers a refused frame with an error frame and closes the
// connection with 1008 after more than 10 refusals in a minute.
func (c *conn) refuse(code, msg string) bool {
	minute := time.Now().Unix() / 60
	if minute != c.badMinute {
		c.badMinute, c.badCount = minute, 0
	}
	c.badCount++
	if c.badCount > 10 {
		c.close(protocol.ClosePolicy, "too many refused frames")
		return false
	}
	c.sendError(code, msg)
	return true
}

func (c *conn) sendError(code, msg string) {
	b, err := protocol.Encode(c.format, protocol.ErrorFrame{Type: protocol.TypeError, Code: code, Message: msg})
	if err == nil {
		c.send(c.dataFrame(b))
	}
}

// dataFrame wraps an encoded object in a text (JSON) or binary frame,
// compressed on a deflate connection when it is large enough.
func (c *conn) dataFrame(b []byte) []byte {
	switch {
	case isHTTPStream(c.tp):
		return c.streamFrame(b, "")
	case c.tp == tpPusher:
		return c.pusherFrameOf(b)
	}
	op := byte(wsframe.OpText)
	if c.format == protocol.MsgPack {
		op = wsframe.OpBinary
	}
	if fr, ok := c.deflatedFrame(op, b); ok {
		return fr
	}
	return wsframe.Frame(op, b)
}

func (c *conn) pongFrame(cf *protocol.ClientFrame) []byte {
	ts := float64(time.Now().UnixMilli())
	if cf.TS != nil {
		ts = *cf.TS
	}
	b, _ := protocol.Encode(c.format, protocol.Pong{Type: protocol.TypePong, TS: ts})
	return c.dataFrame(b)
}

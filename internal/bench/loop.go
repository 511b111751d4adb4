package bench

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/netpoll"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// How the bench reads its connections.
//
// A broadcast lands one frame on every connection at once, and the bench
// must read them all, on one core, faster than the gateway writes them;
// otherwise its end-to-end latency measures its own queue. Reading each
// connection from its own goroutine costs, per frame, a wake-up of that
// goroutine by the runtime's poller, the read, a second read that finds
// the socket empty before the goroutine parks again, and that goroutine's
// stack and state out of cache (measured at 15,000 connections: 8.9-9.4 µs
// of bench CPU per frame with client.Conn.ReadRaw and PeekServer, 12.8-14.2
// µs with ReadFrame's full decode; 237 and 335 MiB of RSS).
//
// So, by default (--reader loop), a connection is dialled with the client
// (handshake, token, welcome), then detached from it: its socket leaves
// the Go runtime (netpoll.TakeFD) and joins an event loop of
// internal/netpoll, which reads each ready socket into its one buffer
// until the socket is empty and parses the frames in place
// (internal/wsframe, protocol.PeekServer): 7.2-8.0 µs per frame, 166 MiB.
// The slot's goroutine only waits for the end of the connection. Writes
// (pongs, acks, close frames) are rare and go straight to the socket.
// wss:// connections (TLS) and --reader goroutine are read by the slot's
// goroutine with client.Conn.ReadRaw.

// Readers (--reader).
const (
	ReaderLoop      = "loop"
	ReaderGoroutine = "goroutine"
)

// maxLoopMessage bounds one server message read by the loop, as
// client.DefaultMaxMessageBytes bounds it for a client.Conn.
const maxLoopMessage = client.DefaultMaxMessageBytes

// loopWriteTimeout bounds a write that finds the socket's send buffer
// full (never on a healthy connection: the bench writes a few bytes).
const loopWriteTimeout = 10 * time.Second

var (
	errConnClosed = errors.New("bench: connection closed")
	errCloseSent  = errors.New("bench: close frame already sent")
)

// wsConn is one connection of a slot: read either by the slot's goroutine
// (cc != nil) or by the event loop (fd), written by anyone (acks, the
// goodbye, churn) and closed by anyone (churn, storm, the end of the run).
// rawConn is a connection read by a goroutine: a *client.Conn
// (WebSocket) or a *client.StreamConn (SSE, HTTP streaming).
type rawConn interface {
	ReadRaw() (protocol.Format, []byte, error)
	WriteFrame(*protocol.ClientFrame) error
	WriteClose(code int, reason string) error
	Close() error
}

type wsConn struct {
	// What the loop touches for every frame comes first, in one cache
	// line: a broadcast visits 15,000 of these, none of them in cache.
	s        *slot
	fd       int
	pending  []byte        // bytes of an incomplete frame, or read ahead by the client
	idle     time.Duration // close after so long without input; 0 = never
	lastRead atomic.Int64  // Unix ns of the last input
	format   protocol.Format
	fragOp   byte   // opcode of the fragmented message being assembled; 0: none
	deflate  bool   // permessage-deflate negotiated
	fragZ    bool   // the fragmented message is compressed
	got      bool   // a message arrived (the connection was healthy)
	started  bool   // pending was handled
	ended    bool   // end ran
	msg      []byte // fragmented message being assembled

	cc    rawConn // goroutine reader; nil: event loop
	tok   netpoll.Token
	start time.Time
	done  chan readResult // the end of the connection, for the slot
	mask  [4]byte         // masking key of this connection's frames

	wmu      sync.Mutex // writes, close and the descriptor's life
	closeSnt bool       // under wmu
	fdClosed bool       // under wmu
	shut     bool       // under wmu: Close shut the socket down
}

// readResult is how a connection ended: its close code (1006 when it broke
// without one) and whether it was healthy (lived 10 s or got a message).
type readResult struct {
	code    int
	healthy bool
}

// newLoopConn detaches a dialled connection from the client and prepares
// it for the event loop (the error of a socket that cannot leave the Go
// runtime closes it).
func (s *slot) newLoopConn(cc *client.Conn, w *client.Welcome) (*wsConn, error) {
	nc, buffered := cc.Detach()
	fd, err := netpoll.TakeFD(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := &wsConn{
		s: s, format: cc.Format(), deflate: cc.Compressed(), fd: fd, start: time.Now(),
		done:    make(chan readResult, 1),
		pending: buffered,
		mask:    ws.NewMask(),
	}
	if w != nil && w.PingInterval > 0 {
		c.idle = 2*w.PingInterval + 10*time.Second // as client.Dial's default
	}
	c.lastRead.Store(c.start.UnixNano())
	return c, nil
}

// serve reads the connection until it ends.
func (s *slot) serve(c *wsConn) readResult {
	if c.cc != nil {
		code, healthy := s.read(c)
		return readResult{code, healthy}
	}
	c.wmu.Lock()
	tok, err := s.r.poller.Register(c.fd, c)
	c.tok = tok
	c.wmu.Unlock()
	if err != nil {
		c.wmu.Lock()
		c.fdClosed = true
		unix.Close(c.fd)
		c.wmu.Unlock()
		return readResult{code: 1006}
	}
	return <-c.done
}

// OnReadable reads what the socket has (netpoll.Handler, on the loop
// goroutine) into the loop's buffer, usually one or more whole frames,
// handled in place, until the socket is empty; an incomplete frame's
// bytes wait in pending for the next read.
func (c *wsConn) OnReadable(buf []byte) {
	if !c.started && !c.handlePending() {
		return
	}
	for !c.ended {
		if need := frameNeed(c.pending); need > len(buf) {
			if !c.readLarge(need) {
				return
			}
			continue
		}
		n0 := copy(buf, c.pending)
		n, err := unix.Read(c.fd, buf[n0:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return
		case err != nil || n <= 0:
			c.end(1006)
			return
		}
		if c.idle > 0 {
			c.lastRead.Store(time.Now().UnixNano())
		}
		total := n0 + n
		used := c.frames(buf[:total])
		if c.ended {
			return
		}
		c.keep(buf[used:total])
		// Read on until EAGAIN even after a short read: the peer's FIN
		// may have come with the data, in the same edge, and nothing
		// would report it again.
	}
}

// OnWritable: the loop reports the socket writable once at registration;
// the bytes the client had read ahead are handled then.
func (c *wsConn) OnWritable() {
	if !c.started {
		c.handlePending()
	}
}

// handlePending handles the frames the client had read ahead of the
// welcome; false when the connection ended.
func (c *wsConn) handlePending() bool {
	c.started = true
	if len(c.pending) == 0 || frameNeed(c.pending) > len(c.pending) {
		return true
	}
	p := c.pending
	c.pending = nil
	used := c.frames(p)
	if c.ended {
		return false
	}
	c.keep(p[used:])
	return true
}

// keep saves the start of an incomplete frame for the next read.
func (c *wsConn) keep(rest []byte) {
	if len(rest) == 0 {
		c.pending = nil
		return
	}
	c.pending = append([]byte(nil), rest...)
}

// frameNeed is the size of the first frame in b when its header is
// complete, else len(b)+1 (at most a header more).
func frameNeed(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	h, size, err := parseHeader(b, true) // RSV1 or not, the length is the same
	if err != nil || size == 0 || h.Length > maxLoopMessage {
		return len(b) + 1 // errors surface when the frame is parsed
	}
	return size + int(h.Length)
}

// readLarge reads a frame larger than the loop's buffer into pending;
// false when the socket is empty or the connection ended.
func (c *wsConn) readLarge(need int) bool {
	if cap(c.pending) < need {
		p := make([]byte, len(c.pending), need)
		copy(p, c.pending)
		c.pending = p
	}
	n, err := unix.Read(c.fd, c.pending[len(c.pending):need])
	switch {
	case err == unix.EINTR:
		return true
	case err == unix.EAGAIN:
		return false
	case err != nil || n <= 0:
		c.end(1006)
		return false
	}
	if c.idle > 0 {
		c.lastRead.Store(time.Now().UnixNano())
	}
	c.pending = c.pending[:len(c.pending)+n]
	if len(c.pending) == need {
		p := c.pending
		c.pending = nil
		c.frames(p)
	}
	return !c.ended
}

// frames handles the complete frames at the start of b and returns how
// many bytes they took.
func (c *wsConn) frames(b []byte) int {
	used := 0
	for len(b)-used >= 2 && !c.ended {
		f := b[used:]
		if f[1]&0x80 != 0 { // servers do not mask (RFC 6455 §5.1)
			c.end(1006)
			break
		}
		h, size, err := parseHeader(f, c.deflate)
		if err != nil || h.Length > maxLoopMessage {
			c.end(1006)
			break
		}
		if size == 0 || int64(len(f)-size) < h.Length {
			break
		}
		n := size + int(h.Length)
		c.frame(h, f[size:n])
		used += n
	}
	return used
}

// frame handles one frame: control frames as client.Conn does, data
// frames (reassembled when fragmented) through slot.handle.
func (c *wsConn) frame(h wsframe.Header, p []byte) {
	switch h.OpCode {
	case wsframe.OpPing:
		_ = c.write(ws.OpPong, p, false)
		return
	case wsframe.OpPong:
		return
	case wsframe.OpClose:
		code := int(ws.StatusNoStatusRcvd)
		if len(p) >= 2 {
			code = int(binary.BigEndian.Uint16(p))
		}
		// Echo the code (RFC 6455 §5.5.1) unless our close went first.
		_ = c.write(ws.OpClose, ws.NewCloseFrameBody(ws.StatusCode(code), ""), true)
		c.end(code)
		return
	}
	switch {
	case h.OpCode == wsframe.OpContinuation && c.fragOp == 0,
		h.OpCode != wsframe.OpContinuation && c.fragOp != 0,
		int64(len(c.msg))+h.Length > maxLoopMessage:
		c.end(1006) // as client.Conn: a protocol error breaks the connection
		return
	}
	if h.Fin && c.fragOp == 0 {
		c.messageZ(h.OpCode, h.Rsv1, p)
		return
	}
	if c.fragOp == 0 {
		c.fragOp, c.fragZ = h.OpCode, h.Rsv1
	}
	c.msg = append(c.msg, p...)
	if h.Fin {
		op, m := c.fragOp, c.msg
		c.fragOp, c.msg = 0, nil
		c.messageZ(op, c.fragZ, m)
	}
}

func (c *wsConn) message(op byte, p []byte) {
	format := protocol.JSON
	if op == wsframe.OpBinary {
		format = protocol.MsgPack
	}
	if c.s.handle(c, format, p) {
		c.got = true
	}
}

// end closes the connection from the loop and hands its result to the
// slot's goroutine.
func (c *wsConn) end(code int) {
	if c.ended {
		return
	}
	c.ended = true
	c.wmu.Lock()
	c.fdClosed = true
	c.s.r.poller.Unregister(c.fd, c.tok)
	unix.Close(c.fd)
	c.wmu.Unlock()
	c.pending, c.msg = nil, nil
	c.done <- readResult{code: code, healthy: c.got || time.Since(c.start) >= healthyAfter}
}

// WriteFrame encodes f in the connection's format and sends it.
func (c *wsConn) WriteFrame(f *protocol.ClientFrame) error {
	if c.cc != nil {
		return c.cc.WriteFrame(f)
	}
	p, err := protocol.EncodeClient(c.format, f)
	if err != nil {
		return err
	}
	op := ws.OpText
	if c.format == protocol.MsgPack {
		op = ws.OpBinary
	}
	return c.write(op, p, false)
}

// WriteClose sends a close frame; later data frames are refused.
func (c *wsConn) WriteClose(code int, reason string) error {
	if c.cc != nil {
		return c.cc.WriteClose(code, reason)
	}
	return c.write(ws.OpClose, ws.NewCloseFrameBody(ws.StatusCode(code), reason), true)
}

// Close drops the connection without a close frame. On the event loop
// the socket is shut down and the loop, seeing its end, closes it.
func (c *wsConn) Close() error {
	if c.cc != nil {
		return c.cc.Close()
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.fdClosed && !c.shut {
		c.shut = true
		return unix.Shutdown(c.fd, unix.SHUT_RDWR)
	}
	return nil
}

// write sends one masked frame.
func (c *wsConn) write(op ws.OpCode, p []byte, isClose bool) error {
	b := make([]byte, 0, wsframe.MaxHeaderSize+len(p))
	b = append(b, 0x80|byte(op))
	switch n := len(p); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xffff:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	b = append(b, c.mask[:]...)
	start := len(b)
	b = append(b, p...)
	ws.Cipher(b[start:], c.mask, 0)

	c.wmu.Lock()
	defer c.wmu.Unlock()
	switch {
	case c.fdClosed || c.shut:
		return errConnClosed
	case c.closeSnt && isClose:
		return nil
	case c.closeSnt:
		return errCloseSent
	}
	if isClose {
		c.closeSnt = true
	}
	for len(b) > 0 {
		n, err := unix.Write(c.fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			// The send buffer is full: wait for room, a little.
			pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLOUT}}
			if k, perr := unix.Poll(pfd, int(loopWriteTimeout/time.Millisecond)); perr == nil && k > 0 {
				continue
			} else if perr == unix.EINTR {
				continue
			}
			err = errors.New("bench: write timeout")
			fallthrough
		case err != nil:
			// A partial frame leaves the stream unusable.
			c.shut = true
			unix.Shutdown(c.fd, unix.SHUT_RDWR)
			return err
		}
		b = b[n:]
	}
	return nil
}

// sweepEvery is the period of the idle sweep: a fraction of the idle
// timeout (60 s against a gateway's default 25 s pings), rare enough that
// visiting every slot costs nothing per message.
const sweepEvery = 5 * time.Second

// sweepIdle closes the loop's connections on which nothing arrived for
// their idle timeout (client.Conn does it with a read deadline), within
// sweepEvery.
func (r *runner) sweepIdle(stop <-chan struct{}) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			for _, s := range r.slots {
				if c := s.conn.Load(); c != nil && c.cc == nil && c.idle > 0 &&
					now.UnixNano()-c.lastRead.Load() > int64(c.idle) {
					c.Close()
				}
			}
		}
	}
}

package client

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/wsgate/wsgate/protocol"
)

// ErrBadFrame wraps a server frame that could not be decoded. ReadFrame
// returns it for that frame only; the connection stays usable.
var ErrBadFrame = errors.New("client: undecodable server frame")

// errCloseSent refuses a data frame after the close frame went out.
var errCloseSent = errors.New("client: close frame already sent")

// DefaultMaxMessageBytes bounds one server message (all fragments).
const DefaultMaxMessageBytes = 16 << 20

// preallocLimit is how much of a peer-declared frame length is trusted for
// allocation before the bytes arrive; beyond it the buffer grows as they do.
const preallocLimit = 32 << 10

// Conn is one WebSocket connection to a gateway, without reconnect logic:
// the building block of Client and of the load generator.
//
// ReadFrame must be called from one goroutine at a time; WriteFrame,
// WriteClose and Close are safe for concurrent use (one writer at a time).
// A Conn holds no buffers of its own between frames, so that a process can
// keep tens of thousands of them: control frames are answered from
// ReadFrame, which must therefore be called for pings to be answered.
type Conn struct {
	nc           net.Conn
	src          connSource
	rd           wsutil.Reader
	format       protocol.Format
	writeTimeout time.Duration
	idleTimeout  time.Duration

	wmu       sync.Mutex
	closeSent bool // under wmu
	closeOnce sync.Once
	closeErr  error
}

func newConn(nc net.Conn, br *bufio.Reader, opts DialOptions) *Conn {
	c := &Conn{
		nc:           nc,
		src:          connSource{br: br, nc: nc},
		format:       opts.Format,
		writeTimeout: opts.WriteTimeout,
	}
	c.rd = wsutil.Reader{
		Source:         &c.src,
		State:          ws.StateClientSide,
		MaxMessageSize: opts.MaxMessageBytes,
		OnIntermediate: c.control,
	}
	return c
}

// connSource reads what the handshake buffered (the welcome often comes in
// the same packet as the 101 answer), then gives the buffer back to
// gobwas's pool and reads the socket directly.
type connSource struct {
	br *bufio.Reader
	nc net.Conn
}

func (s *connSource) Read(p []byte) (int, error) {
	if s.br != nil {
		if s.br.Buffered() > 0 {
			return s.br.Read(p)
		}
		s.release()
	}
	return s.nc.Read(p)
}

// release gives the handshake buffer back once it is drained, so that an
// idle connection does not keep it.
func (s *connSource) release() {
	if s.br != nil && s.br.Buffered() == 0 {
		ws.PutReader(s.br)
		s.br = nil
	}
}

// Format is the connection's frame encoding.
func (c *Conn) Format() protocol.Format { return c.format }

// LocalAddr is the connection's local address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// ReadFrame reads the next server frame, answering pings and the server's
// close on the way. A close from the server ends with a *CloseError; a
// frame that cannot be decoded with an error wrapping ErrBadFrame (the
// next call reads on); any other error means the connection is broken.
// With an idle timeout (DialOptions.IdleTimeout), ReadFrame fails when
// nothing at all arrived for that long.
func (c *Conn) ReadFrame() (*protocol.ServerFrame, error) {
	for {
		if c.idleTimeout > 0 {
			c.nc.SetReadDeadline(time.Now().Add(c.idleTimeout))
		}
		hdr, err := c.rd.NextFrame()
		if err != nil {
			return nil, c.readErr(err)
		}
		if hdr.OpCode.IsControl() {
			if err := c.control(hdr, &c.rd); err != nil {
				return nil, err
			}
			continue
		}
		p, err := c.readPayload(hdr)
		if err != nil {
			return nil, c.readErr(err)
		}
		format := protocol.JSON
		if hdr.OpCode == ws.OpBinary {
			format = protocol.MsgPack
		}
		c.src.release()
		f, err := protocol.DecodeServer(format, p)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadFrame, err)
		}
		return f, nil
	}
}

func (c *Conn) readErr(err error) error {
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce
	}
	return fmt.Errorf("wsgate: read: %w", err)
}

// readPayload reads a data message whose first frame header is hdr,
// trusting the declared length for allocation only up to preallocLimit.
func (c *Conn) readPayload(hdr ws.Header) ([]byte, error) {
	if !hdr.Fin {
		var b bytes.Buffer
		b.Grow(int(min(hdr.Length, preallocLimit)))
		_, err := b.ReadFrom(&c.rd)
		return b.Bytes(), err
	}
	n := hdr.Length
	p := make([]byte, 0, min(n, preallocLimit))
	for {
		m, err := io.ReadFull(&c.rd, p[len(p):cap(p)])
		p = p[:len(p)+m]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if int64(len(p)) == n {
			return p, nil
		}
		np := make([]byte, len(p), min(2*int64(cap(p)), n))
		copy(np, p)
		p = np
	}
}

// control answers a control frame: pong for ping, the echo for close.
func (c *Conn) control(hdr ws.Header, r io.Reader) error {
	var buf [ws.MaxControlFramePayloadSize]byte
	p := buf[:hdr.Length] // CheckHeader bounded it
	if _, err := io.ReadFull(r, p); err != nil {
		return c.readErr(err)
	}
	switch hdr.OpCode {
	case ws.OpPing:
		if err := c.write(ws.OpPong, p, false); err != nil {
			return err
		}
	case ws.OpClose:
		code, reason := ws.StatusNoStatusRcvd, ""
		if len(p) >= 2 {
			code, reason = ws.ParseCloseFrameData(p)
		}
		// Echo the code (RFC 6455 §5.5.1) unless our close went first.
		_ = c.WriteClose(int(code), "")
		c.Close()
		return &CloseError{Code: int(code), Reason: reason}
	}
	return nil
}

// WriteFrame encodes f in the connection's format and writes it, within
// the write timeout. A failed write closes the connection.
func (c *Conn) WriteFrame(f *protocol.ClientFrame) error {
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

// WriteClose sends a close frame with code and reason; later data frames
// are refused. It does not wait for the server's echo: keep calling
// ReadFrame until it returns, or call Close.
func (c *Conn) WriteClose(code int, reason string) error {
	return c.write(ws.OpClose, ws.NewCloseFrameBody(ws.StatusCode(code), reason), true)
}

// Close closes the socket at once (idempotent). For a polite close, call
// WriteClose first.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.nc.Close() })
	return c.closeErr
}

// write sends one masked frame with a single socket write.
func (c *Conn) write(op ws.OpCode, p []byte, isClose bool) error {
	mask := ws.NewMask()
	buf := appendHeader(make([]byte, 0, ws.MaxHeaderSize+len(p)), op, len(p), mask)
	start := len(buf)
	buf = append(buf, p...)
	ws.Cipher(buf[start:], mask, 0)

	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		if isClose {
			return nil
		}
		return errCloseSent
	}
	if isClose {
		c.closeSent = true
	}
	if c.writeTimeout > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	}
	if _, err := c.nc.Write(buf); err != nil {
		c.Close() // a partial frame leaves the stream unusable
		return fmt.Errorf("wsgate: write: %w", err)
	}
	return nil
}

// appendHeader appends a final, masked frame header (RFC 6455 §5.2).
func appendHeader(dst []byte, op ws.OpCode, n int, mask [4]byte) []byte {
	dst = append(dst, 0x80|byte(op))
	switch {
	case n < 126:
		dst = append(dst, 0x80|byte(n))
	case n <= 0xffff:
		dst = append(dst, 0x80|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, 0x80|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	return append(dst, mask[:]...)
}

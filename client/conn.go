package client

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/wsframe"
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
// ReadFrame and ReadRaw must be called from one goroutine at a time;
// WriteFrame, WriteClose and Close are safe for concurrent use (one
// writer at a time). Between reads a Conn holds no buffer of its own (its
// read buffer is borrowed from a pool while bytes are waiting to be
// parsed), so that a process can keep tens of thousands of them: control
// frames are answered from ReadFrame and ReadRaw, which must therefore be
// called for pings to be answered.
type Conn struct {
	nc           net.Conn
	rc           syscall.RawConn // plain TCP: reads bypass nc (see reader.go)
	br           *bufio.Reader   // bytes the handshake buffered; nil once drained
	format       protocol.Format
	writeTimeout time.Duration
	idleTimeout  time.Duration
	maxMsg       int64
	bufSize      int
	deflate      bool // permessage-deflate negotiated (deflate.go)

	// Reader state (the reading goroutine only).
	rb        *[]byte // read buffer, nil when it holds nothing
	rr, rw    int     // unread bytes: (*rb)[rr:rw]
	msg       []byte  // message assembled from fragments, or too large for rb
	fragOp    byte    // opcode of the fragmented message in progress; 0: none
	fragZ     bool    // the fragmented message in progress is compressed
	readFn    func(fd uintptr) bool
	rdst      []byte // rawRead: destination, nil = the read buffer
	rn        int    // rawRead: bytes read
	rerr      error  // rawRead: error
	active    time.Time
	idleArmed bool

	wmu       sync.Mutex
	closeSent bool // under wmu
	closeOnce sync.Once
	closeErr  error
}

func newConn(nc net.Conn, br *bufio.Reader, opts DialOptions) *Conn {
	c := &Conn{
		nc:           nc,
		br:           br,
		format:       opts.Format,
		writeTimeout: opts.WriteTimeout,
		maxMsg:       opts.MaxMessageBytes,
		bufSize:      readBufferSize(opts.ReadBufferSize),
	}
	var sc syscall.Conn
	switch t := nc.(type) { // exactly the types whose Read is read(2)
	case *net.TCPConn:
		sc = t
	case *net.UnixConn:
		sc = t
	}
	if sc != nil {
		if rc, err := sc.SyscallConn(); err == nil {
			c.rc = rc
		}
	}
	c.readFn = c.rawRead
	return c
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
// nothing at all arrived for that long. ReadFrame is ReadRaw followed by
// protocol.DecodeServer; the frame it returns does not alias the read
// buffer.
func (c *Conn) ReadFrame() (*protocol.ServerFrame, error) {
	format, p, err := c.ReadRaw()
	if err != nil {
		return nil, err
	}
	f, err := protocol.DecodeServer(format, p)
	c.msg = nil
	c.releaseIfEmpty()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	return f, nil
}

func (c *Conn) readErr(err error) error {
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce
	}
	return fmt.Errorf("wsgate: read: %w", err)
}

// controlFrame answers a control frame: pong for ping, the echo for close
// (which ends the read with a *CloseError).
func (c *Conn) controlFrame(op ws.OpCode, p []byte) error {
	switch op {
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
	if c.deflate && len(p) >= wsframe.MinCompressSize {
		// RSV1 rides in the first header byte with the opcode.
		return c.write(op|rsv1, wsframe.AppendDeflate(nil, p), false)
	}
	return c.write(op, p, false)
}

// WriteClose sends a close frame with code and reason; later data frames
// are refused. It does not wait for the server's echo: keep calling
// ReadFrame (or ReadRaw) until it returns, or call Close.
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

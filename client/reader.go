package client

import (
	"errors"
	"io"
	"math/bits"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// The reader of a Conn: one read buffer, borrowed from a pool only while
// it holds bytes, so that an idle connection keeps none. On a plain TCP
// connection the socket is read through syscall.RawConn: the goroutine
// waits for the socket to become readable without a buffer, then takes
// one and reads whatever is there (usually a whole frame, often several)
// in one system call. Frames are parsed in place; a data message that
// fits the buffer is returned as a slice of it.

// DefaultReadBufferSize is the read buffer of a connection, borrowed from
// a pool while a read is in progress (see DialOptions.ReadBufferSize).
const DefaultReadBufferSize = 4 << 10

// Bounds of DialOptions.ReadBufferSize.
const (
	minReadBuffer = 256
	maxReadBuffer = 1 << 20
)

// readPools hold read buffers by size class (powers of two).
var readPools [22]sync.Pool // index bits.Len(size): up to maxReadBuffer

// readBufferSize rounds a configured size to its size class.
func readBufferSize(n int) int {
	if n <= 0 {
		n = DefaultReadBufferSize
	}
	n = min(max(n, minReadBuffer), maxReadBuffer)
	return 1 << bits.Len(uint(n-1))
}

func getReadBuffer(size int) *[]byte {
	if p, ok := readPools[bits.Len(uint(size))].Get().(*[]byte); ok {
		return p
	}
	b := make([]byte, size)
	return &b
}

func putReadBuffer(p *[]byte) { readPools[bits.Len(uint(len(*p)))].Put(p) }

// errMaskedFrame: servers must not mask their frames (RFC 6455 §5.1).
var errMaskedFrame = ws.ErrProtocolMaskUnexpected

// ReadRaw reads the next server message and returns its payload as it
// came, without decoding it: format is JSON for a text message and
// MsgPack for a binary one. Decode the payload with protocol.PeekServer
// (no allocation) or protocol.DecodeServer.
//
// The payload is valid only until the next call of ReadRaw or ReadFrame:
// it usually points into the connection's read buffer. Pings and the
// server's close are handled as by ReadFrame, and errors are the same,
// except that a payload is never refused (there is no ErrBadFrame).
func (c *Conn) ReadRaw() (format protocol.Format, payload []byte, err error) {
	c.msg = nil
	c.releaseIfEmpty()
	if c.idleTimeout > 0 {
		c.armIdle()
	}
	for {
		hs, h, err := c.nextHeader()
		if err != nil {
			return 0, nil, c.readErr(err)
		}
		if wsframe.IsControl(h.OpCode) {
			p, err := c.framePayload(hs, int(h.Length))
			if err != nil {
				return 0, nil, c.readErr(err)
			}
			if err := c.controlFrame(ws.OpCode(h.OpCode), p); err != nil {
				return 0, nil, err
			}
			continue
		}
		switch {
		case h.OpCode == wsframe.OpContinuation && c.fragOp == 0:
			return 0, nil, c.readErr(ws.ErrProtocolContinuationUnexpected)
		case h.OpCode != wsframe.OpContinuation && c.fragOp != 0:
			return 0, nil, c.readErr(ws.ErrProtocolContinuationExpected)
		case h.Length > c.maxMsg-int64(len(c.msg)):
			return 0, nil, c.readErr(wsutil.ErrMessageTooLarge)
		}
		if h.Fin && c.fragOp == 0 { // a whole message in one frame
			p, err := c.framePayload(hs, int(h.Length))
			if err != nil {
				return 0, nil, c.readErr(err)
			}
			if h.Rsv1 {
				if p, err = c.inflate(p); err != nil {
					return 0, nil, c.readErr(err)
				}
			}
			return formatOf(h.OpCode), p, nil
		}
		if c.fragOp == 0 {
			c.fragOp, c.fragZ = h.OpCode, h.Rsv1
			c.msg = make([]byte, 0, min(h.Length, preallocLimit))
		}
		p, err := c.framePayload(hs, int(h.Length))
		if err != nil {
			return 0, nil, c.readErr(err)
		}
		c.msg = append(c.msg, p...)
		if h.Fin {
			op := c.fragOp
			c.fragOp = 0
			if c.fragZ {
				if c.msg, err = c.inflate(c.msg); err != nil {
					return 0, nil, c.readErr(err)
				}
			}
			return formatOf(op), c.msg, nil
		}
	}
}

func formatOf(op byte) protocol.Format {
	if op == wsframe.OpBinary {
		return protocol.MsgPack
	}
	return protocol.JSON
}

// nextHeader makes sure a whole frame header is buffered and parses it.
func (c *Conn) nextHeader() (size int, h wsframe.Header, err error) {
	for need := 2; ; {
		if c.rw-c.rr >= need {
			b := c.buf()[c.rr:c.rw]
			if b[1]&0x80 != 0 {
				return 0, h, errMaskedFrame
			}
			if c.deflate {
				h, size, err = wsframe.ParseHeaderDeflate(b, false)
			} else {
				h, size, err = wsframe.ParseHeader(b, false)
			}
			if err != nil || size > 0 {
				return size, h, err
			}
			need = len(b) + 1
		}
		if err := c.fill(need); err != nil {
			if err == io.EOF && c.rw > c.rr {
				err = io.ErrUnexpectedEOF
			}
			return 0, h, err
		}
	}
}

// framePayload consumes a frame whose header (hs bytes) is buffered and
// returns its n bytes of payload: a slice of the read buffer when the
// frame fits it, a new slice otherwise.
func (c *Conn) framePayload(hs, n int) ([]byte, error) {
	if hs+n <= c.bufSize {
		if err := c.fill(hs + n); err != nil {
			return nil, unexpected(err)
		}
		p := c.buf()[c.rr+hs : c.rr+hs+n]
		c.rr += hs + n
		return p, nil
	}
	// Larger than the buffer: take what is buffered, read the rest
	// directly, trusting the declared length only up to preallocLimit.
	c.rr += hs
	p := make([]byte, 0, min(n, preallocLimit))
	take := min(c.rw-c.rr, n)
	p = append(p, c.buf()[c.rr:c.rr+take]...)
	c.rr += take
	c.releaseIfEmpty()
	for len(p) < n {
		if len(p) == cap(p) {
			np := make([]byte, len(p), min(2*cap(p), n))
			copy(np, p)
			p = np
		}
		m, err := c.readSome(p[len(p):min(cap(p), n)])
		p = p[:len(p)+m]
		if err != nil && len(p) < n {
			return nil, unexpected(err)
		}
	}
	return p, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// buf is the read buffer (nil when none is held).
func (c *Conn) buf() []byte {
	if c.rb == nil {
		return nil
	}
	return *c.rb
}

// releaseIfEmpty gives the read buffer back to its pool when it holds no
// unread bytes.
func (c *Conn) releaseIfEmpty() {
	if c.rb != nil && c.rr == c.rw {
		putReadBuffer(c.rb)
		c.rb, c.rr, c.rw = nil, 0, 0
	}
}

func (c *Conn) acquire() {
	if c.rb == nil {
		c.rb = getReadBuffer(c.bufSize)
		c.rr, c.rw = 0, 0
	}
}

// fill reads until at least need bytes (at most the buffer size) are
// buffered.
func (c *Conn) fill(need int) error {
	for c.rw-c.rr < need {
		if c.rb != nil && c.rr+need > c.bufSize {
			// Move the unread bytes to the front.
			b := *c.rb
			c.rw = copy(b, b[c.rr:c.rw])
			c.rr = 0
		}
		if _, err := c.readSome(nil); err != nil {
			return err
		}
	}
	return nil
}

// readSome performs one read: into dst, or, when dst is nil, at the end
// of the read buffer (taking one from the pool if none is held). Bytes
// the handshake buffered come first. It extends the idle deadline while
// something keeps arriving.
func (c *Conn) readSome(dst []byte) (int, error) {
	if c.br != nil {
		if c.br.Buffered() > 0 {
			if dst == nil {
				c.acquire()
				n, err := c.br.Read((*c.rb)[c.rw:])
				c.rw += n
				return n, err
			}
			return c.br.Read(dst)
		}
		ws.PutReader(c.br)
		c.br = nil
	}
	for {
		var n int
		var err error
		if c.rc != nil {
			c.rdst = dst
			c.rn, c.rerr = 0, nil
			if err = c.rc.Read(c.readFn); err == nil {
				n, err = c.rn, c.rerr
				if err != nil {
					err = os.NewSyscallError("read", err)
				} else if n == 0 {
					err = io.EOF
				}
			}
			c.rdst = nil
		} else {
			if dst == nil {
				c.acquire()
				n, err = c.nc.Read((*c.rb)[c.rw:])
				c.rw += n
			} else {
				n, err = c.nc.Read(dst)
			}
		}
		if n > 0 && c.idleTimeout > 0 {
			c.active = time.Now()
		}
		if err != nil && n == 0 && c.idleExtended(err) {
			continue
		}
		return n, err
	}
}

// rawRead is the syscall.RawConn read callback: it reads into c.rdst or,
// when that is nil, into the read buffer, taken from the pool only now
// that the socket is readable (and given back if it was not after all).
// It reports false to wait for readability.
func (c *Conn) rawRead(fd uintptr) bool {
	dst := c.rdst
	if dst == nil {
		c.acquire()
		dst = (*c.rb)[c.rw:]
	}
	for {
		n, err := syscall.Read(int(fd), dst)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if c.rdst == nil {
				c.releaseIfEmpty()
			}
			return false
		}
		if n < 0 {
			n = 0
		}
		if c.rdst == nil {
			c.rw += n
		}
		c.rn, c.rerr = n, err
		return true
	}
}

// armIdle starts the idle timeout of a read call: the call itself counts
// as activity, and the deadline is set once; when it fires, idleExtended
// moves it to the last activity plus the timeout. So a read fails when
// nothing arrived for IdleTimeout, without a SetReadDeadline per frame.
func (c *Conn) armIdle() {
	c.active = time.Now()
	if !c.idleArmed {
		c.idleArmed = true
		c.nc.SetReadDeadline(c.active.Add(c.idleTimeout))
	}
}

// idleExtended reports whether err is the idle deadline firing while the
// connection was active more recently than IdleTimeout ago; the deadline
// is then moved and the read can be retried.
func (c *Conn) idleExtended(err error) bool {
	if !c.idleArmed || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	next := c.active.Add(c.idleTimeout)
	if !time.Now().Before(next) {
		return false
	}
	c.nc.SetReadDeadline(next)
	return true
}

// Detach hands the connection over to the caller, who then reads and
// writes its WebSocket frames directly (the load generator moves its
// sockets to an event loop this way, after Dial did the handshake). It
// returns the connection and the bytes already read from it that no
// ReadRaw or ReadFrame returned yet: the start of the next frames, to be
// parsed before anything read from nc. Call it between messages, from the
// reading goroutine; afterwards c must not be used at all (not even
// Close: closing nc is the caller's business).
func (c *Conn) Detach() (nc net.Conn, buffered []byte) {
	if c.rb != nil {
		buffered = append(buffered, (*c.rb)[c.rr:c.rw]...)
		putReadBuffer(c.rb)
		c.rb, c.rr, c.rw = nil, 0, 0
	}
	if c.br != nil {
		if n := c.br.Buffered(); n > 0 {
			p, _ := c.br.Peek(n)
			buffered = append(buffered, p...)
		}
		ws.PutReader(c.br)
		c.br = nil
	}
	c.msg = nil
	return c.nc, buffered
}

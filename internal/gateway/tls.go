package gateway

import (
	"crypto/tls"
	"net"
	"time"
)

// tlsIO carries a TLS connection that the event loop does not hold: a
// TLS 1.2 client's, or a WebSocket handshake on a kept-alive HTTPS
// connection (TLS 1.3 WebSocket connections are held by the loop, see
// tlsaccept.go). Its records are decrypted by crypto/tls, so it has a
// reader goroutine (with a 4 KiB buffer) and a writer goroutine parked
// until it has output: ~24 KiB per connection.
type tlsIO struct {
	c    tlsStream
	wake chan struct{} // capacity 1: "there is output, or the connection ended"
	done chan struct{}
}

// tlsStream is a crypto/tls connection, possibly with plaintext read
// before net/http got it (tlsPrefixConn).
type tlsStream interface {
	net.Conn
	CloseWrite() error
	ConnectionState() tls.ConnectionState
}

func newTLSIO(c tlsStream) *tlsIO {
	return &tlsIO{c: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (t *tlsIO) wakeWriter() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// close is called once, by teardown, under the connection's lock.
func (t *tlsIO) close() {
	close(t.done)
	t.c.Close()
}

func (c *conn) tlsReader() {
	buf := make([]byte, 4096)
	for {
		n, err := c.tlsc.c.Read(buf)
		if n > 0 {
			c.mu.Lock()
			c.lastRead = time.Now().Unix()
			c.mu.Unlock()
			c.consume(buf[:n])
		}
		if err != nil {
			c.teardown("read: " + err.Error())
			return
		}
	}
}

func (c *conn) tlsWriter() {
	for {
		select {
		case <-c.tlsc.wake:
		case <-c.tlsc.done:
			return
		case <-c.n.ctx.Done():
			return
		}
		for {
			c.mu.Lock()
			if c.state == stClosed {
				c.mu.Unlock()
				return
			}
			bufs, marks := c.outq, c.lat
			c.outq, c.lat = nil, nil
			c.keysWrittenLocked()
			if isHTTPStream(c.tp) && len(bufs) > 0 {
				c.wroteStreamLocked()
			}
			c.wakeCatchUpLocked()
			if len(bufs) == 0 {
				c.writing = false
				closing := c.state == stClosing
				c.mu.Unlock()
				if closing {
					_ = c.tlsc.c.CloseWrite()
				}
				break
			}
			c.pendingSince = time.Now().Unix()
			c.mu.Unlock()
			_ = c.tlsc.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			nb := net.Buffers(bufs)
			_, err := nb.WriteTo(c.tlsc.c)
			c.mu.Lock()
			c.pendingSince = 0
			if err != nil {
				c.teardownLocked("write: " + err.Error())
				c.mu.Unlock()
				return
			}
			now := time.Now().UnixNano()
			for _, m := range marks {
				c.n.metrics.DeliveryLatency.Observe(float64(now-m.pubAt) / 1e9)
			}
			c.mu.Unlock()
		}
	}
}

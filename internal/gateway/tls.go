package gateway

import (
	"crypto/tls"
	"net"
	"time"
)

// tlsIO carries a TLS connection. TLS records are decrypted in Go, so the
// socket cannot be read by the event loop: a TLS connection has a reader
// goroutine (with a 4 KiB buffer) and a writer goroutine parked until it
// has output. That costs ~10 KB per connection more than the event loop;
// deployments that count memory terminate TLS in front of the gateway
// (see docs/operations.md).
type tlsIO struct {
	c    *tls.Conn
	wake chan struct{} // capacity 1: "there is output, or the connection ended"
	done chan struct{}
}

func newTLSIO(c *tls.Conn) *tlsIO {
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

package gateway

import (
	"errors"
	"time"

	"github.com/wsgate/wsgate/internal/tlsrec"
	"golang.org/x/sys/unix"
)

// A connection whose TLS the event loop holds (c.tr != nil): reading and
// writing through the record layer of internal/tlsrec. Its socket, token,
// queue and write buffer are those of a plain connection.

// consumeTLS decrypts the records in data (read into the loop's buffer,
// or nil to go on with c.tr.rpart) and parses the frames they carry.
// It returns false once the connection is finished.
func (c *conn) consumeTLS(data []byte) bool {
	t := c.tr
	was := c.holdsPartial()
	if len(t.RPart) > 0 {
		t.RPart = append(t.RPart, data...)
		data = t.RPart
	}
	c.mu.Lock() // the read keys are shared with the sweep (idle)
	app, rest, res := t.ReadRecords(data)
	c.mu.Unlock()
	// Keep an incomplete record for the next read, in a buffer of its
	// own (or at the front of the one it is in) while it is incomplete.
	switch {
	case len(rest) == 0:
		t.RPart = nil
	case len(t.RPart) > 0 && &data[0] == &t.RPart[0]:
		// app is data[:len(app)], before rest: move rest after it is parsed.
	default:
		t.RPart = append(make([]byte, 0, len(rest)+512), rest...)
		rest = nil
	}
	ok := true
	if len(app) > 0 {
		ok = c.consume(app)
	}
	if rest != nil {
		if cap(t.RPart) > 2*(tlsrec.HeaderLen+tlsrec.MaxCiphertext) {
			t.RPart = append(make([]byte, 0, len(rest)+512), rest...)
		} else {
			t.RPart = t.RPart[:copy(t.RPart, rest)]
		}
	}
	if res.WantKeyUpdate && ok {
		c.mu.Lock()
		t.KeyUpdate = true
		if c.state != stClosed && !c.writing && !c.waitOut {
			c.writeOutLocked()
		}
		c.mu.Unlock()
	}
	if res.Err != nil && ok {
		ok = false
		why := "tls: " + res.Err.Error()
		if errors.Is(res.Err, tlsrec.ErrCloseNotify) {
			why = "read: peer closed (close_notify)"
		} else {
			c.logger().Info("TLS record refused; closing", "err", res.Err)
		}
		c.mu.Lock()
		t.RPart = nil
		c.teardownLocked(why)
		c.mu.Unlock()
	}
	c.accountPartial(was)
	return ok
}

// writeTLSLocked is writeOutLocked for a loop-held TLS connection: the
// queued frames (whole, up to tlsrec.SealBatch bytes of them) are sealed into a
// pooled scratch buffer as few records as fit and written with one
// write; only an unsent rest is copied, into wbuf. A frame shared by a
// broadcast stays encoded once: only the sealing is per connection.
func (c *conn) writeTLSLocked() {
	t := c.tr
	for c.state != stClosed && !c.waitOut {
		if !c.writeRestLocked() {
			return
		}
		if len(c.outq) == 0 && !t.KeyUpdate {
			return
		}
		if t.Out.Seq >= tlsrec.KeyUpdateAfter {
			t.KeyUpdate = true // a batch seals a few records: far from the limit
		}
		sp := tlsrec.Scratch.Get().(*[]byte)
		w := tlsrec.NewWriter((*sp)[:0], &t.Out, tlsrec.TypeHandshake)
		if t.KeyUpdate {
			// Our KeyUpdate is the last record under the old key.
			w.Write(tlsrec.KeyUpdateMsg)
			w.Finish()
			if err := t.Out.Update(); err != nil {
				tlsrec.Scratch.Put(sp)
				c.teardownLocked("tls: key update: " + err.Error())
				return
			}
			t.KeyUpdate = false
		}
		w.Type = tlsrec.TypeAppData
		k, size := 0, 0
		for ; k < len(c.outq) && (k == 0 || size+len(c.outq[k]) <= tlsrec.SealBatch); k++ {
			w.Write(c.outq[k])
			size += len(c.outq[k])
		}
		w.Finish()
		out := w.B
		n, err := unix.Write(c.fd, out)
		if err != nil && err != unix.EAGAIN && err != unix.EINTR {
			c.putScratch(sp, out)
			c.teardownLocked("write: " + err.Error())
			return
		}
		n = max(n, 0)
		whole := k
		if n < len(out) {
			// The sealed rest must leave next, as it is: keep a copy.
			// Its frames' latency is observed when it has left.
			c.wbuf = append([]byte(nil), out[n:]...)
			whole = 0
			if c.pendingSince == 0 {
				c.pendingSince = time.Now().Unix()
			}
		}
		c.putScratch(sp, out)
		if len(c.lat) > 0 {
			c.observeWrittenLocked(c.outq[:k], whole)
		}
		rest := len(c.outq) - k
		copy(c.outq, c.outq[k:])
		clear(c.outq[rest:])
		c.outq = c.outq[:rest]
		if rest == 0 {
			c.keysWrittenLocked()
			if cap(c.outq) > 64 {
				c.outq = nil
			}
			if len(c.wbuf) == 0 {
				c.lat = c.lat[:0]
				if cap(c.lat) > 64 {
					c.lat = nil
				}
			}
		}
		if c.x != nil && rest < c.n.cfg.SendQueue {
			c.wakeCatchUpLocked()
		}
	}
}

func (c *conn) putScratch(sp *[]byte, b []byte) {
	if cap(b) <= 2*tlsrec.SealBatch {
		*sp = b[:0]
		tlsrec.Scratch.Put(sp)
	}
}

// writeRawLocked writes a short answer straight to the socket (a refusal
// before the 101 left), sealed when the connection is TLS.
func (c *conn) writeRawLocked(b []byte) {
	if c.tlsc != nil { // an HTTP stream on crypto/tls, refused before its writer started
		_ = c.tlsc.c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.tlsc.c.Write(b)
		return
	}
	if c.tr != nil {
		b = c.tr.Out.Seal(nil, tlsrec.TypeAppData, b)
	}
	_, _ = unix.Write(c.fd, b)
}

// closeNotifyLocked sends TLS close_notify (after the close frame, before
// the half-close).
func (c *conn) closeNotifyLocked() {
	if c.tr != nil && len(c.wbuf) == 0 {
		_, _ = unix.Write(c.fd, c.tr.Out.Seal(nil, tlsrec.TypeAlert, tlsrec.CloseNotifyAlert))
	}
}

package gateway

import (
	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/protocol"
)

// Conflation (contract 19): a realtime publish may carry a key. When a
// connection's queue is full, the newest still queued frame of the same
// target and key takes the new message in its place (counted as dropped,
// reason "conflated") instead of the new message being dropped: a slow
// reader of a ticker gets the latest value of each key, not a stale one.
//
// Cost: a connection records a mark per queued frame of a keyed message
// only (in connExtra, which idle connections do not have), and looks at
// them only when its queue is full and the new message has a key. The
// marks go when the queue empties; while it never does they are pruned
// once they outnumber the queued frames twice over, so they stay bounded
// by the queue.

// keyMark ties a queued frame (by its first byte, as latMark: frames are
// shared between connections and never copied) to its conflation
// identity.
type keyMark struct {
	frame *byte
	key   string
}

// validKey checks a publish's conflation key: a name (protocol.ValidName:
// at most 256 bytes, no control characters), on realtime messages that
// are not reliable (a reliable message is never skipped, so it is never
// conflated).
func validKey(key string, cl class, reliable bool) error {
	if key == "" {
		return nil
	}
	if err := protocol.ValidName("key", key); err != nil {
		return api.BadRequest("%v", err)
	}
	if cl != classRealtime || reliable {
		return api.BadRequest("key conflates realtime messages: it needs class realtime and reliable false")
	}
	return nil
}

// keyed sets d's conflation identity: its target and key (none without a
// key). It returns d.
func (d *delivery) keyed(t protocol.Target, key string) *delivery {
	if key != "" {
		d.ckey = t.Type + "\x00" + t.ID + "\x00" + key
	}
	return d
}

// keyLocked records that frame, just queued, is of a keyed message.
func (c *conn) keyLocked(frame []byte, key string) {
	x := c.extra()
	if len(x.keyed) >= 2*len(c.outq)+8 {
		c.pruneKeysLocked()
	}
	x.keyed = append(x.keyed, keyMark{&frame[0], key})
}

// pruneKeysLocked forgets the marks of frames no longer queued. Frames
// leave the queue from its front and a conflated one keeps its place, so
// the marks still queued are the last ones, in queue order: one walk from
// the back finds them.
func (c *conn) pruneKeysLocked() {
	m := c.x.keyed
	k := len(m) - 1
	for j := len(c.outq) - 1; j >= 0 && k >= 0; j-- {
		if &c.outq[j][0] == m[k].frame {
			k--
		}
	}
	n := copy(m, m[k+1:])
	clear(m[n:])
	c.x.keyed = m[:n]
}

// keysWrittenLocked forgets every mark once the queue is empty, and
// connExtra with them if nothing else needs it.
func (c *conn) keysWrittenLocked() {
	if c.x == nil || c.x.keyed == nil {
		return
	}
	c.x.keyed = nil
	if c.x.idle() {
		c.x = nil
	}
}

// conflateLocked puts frame, of a message published at pubAt, in the
// place of the newest queued frame with the same key, and reports whether
// there was one. A frame being written (in wbuf) is no longer queued.
func (c *conn) conflateLocked(frame []byte, key string, pubAt int64) bool {
	if c.x == nil {
		return false
	}
	m := c.x.keyed
	i := len(m) - 1
	for i >= 0 && m[i].key != key {
		i--
	}
	if i < 0 {
		return false
	}
	old := m[i].frame
	for j := len(c.outq) - 1; j >= 0; j-- {
		if &c.outq[j][0] != old {
			continue
		}
		c.outq[j] = frame
		m[i].frame = &frame[0]
		for k := range c.lat {
			if c.lat[k].frame == old {
				c.lat[k] = latMark{&frame[0], pubAt}
				break
			}
		}
		return true
	}
	// The newest frame of the key was written: so were the older ones.
	return false
}

package gateway

import (
	"cmp"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/internal/netpoll"
	"github.com/wsgate/wsgate/internal/session"
	"github.com/wsgate/wsgate/internal/tlsrec"
	"github.com/wsgate/wsgate/protocol"
)

// Connection states.
const (
	stResuming uint8 = iota // welcome and replay being prepared; live frames are held
	stOpen
	stClosing // close frame queued; waiting for it to leave and for the peer's close
	stClosed  // descriptor closed, unregistered
)

// Message classes (contract §4.5).
type class uint8

const (
	classChat class = iota
	classRealtime
	classNotify
)

func parseClass(s string) (class, bool) {
	switch s {
	case "", "chat":
		return classChat, true
	case "realtime":
		return classRealtime, true
	case "notify":
		return classNotify, true
	}
	return 0, false
}

// conn is one client connection. It is kept small: an idle connection
// holds no buffer (outq, wbuf and rbuf are nil) and no goroutine. Fields
// under mu unless noted.
type conn struct {
	n  *Node
	mu sync.Mutex

	fd       int           // the socket, owned by the event loop (-1 with tlsc)
	tlsc     *tlsIO        // TLS 1.2 connections (goroutine path, tls.go)
	tr       *tlsrec.State // TLS 1.3 connections held by the event loop (tlsconn.go)
	token    netpoll.Token
	state    uint8
	writing  bool // a writer owns the socket's output (in the pool or writing)
	waitOut  bool // a short write left wbuf; waiting for EPOLLOUT
	format   protocol.Format
	deflate  bool  // permessage-deflate negotiated (deflate.go); no state beyond this bit
	running  bool  // an inbound goroutine is processing inq
	preamble bool  // outq[0] is the 101 answer, not sent yet (own accept path), or a stream's 200
	tp       uint8 // transport: tpWS, tpSSE, tpStream (stream.go); set before the connection is shared
	warned   bool  // the expiring frame of the current exp was queued
	hubIdx   int32 // place in hub.list; under hub.mu

	idSeq uint64 // the connection id is the node's prefix and this (see connID)
	user  string
	ip    string    // kept only when WSGATE_MAX_CONNS_PER_IP is set
	meta  *connMeta // kept only when the token has rooms or pub claims or the device is named

	outq [][]byte  // queued frames, each a whole WebSocket frame
	wbuf []byte    // unsent rest of a short write
	lat  []latMark // live message frames in wbuf and outq, in order, for the latency histogram
	rbuf []byte    // unparsed inbound bytes (a split frame); reader only
	frag *fragment // a fragmented message being assembled; reader only
	x    *connExtra
	fb   *flushBatch // set while a large fan-out queues on this connection

	connectedAt  int64 // Unix ms
	lastRead     int64 // Unix s; loop goroutine writes, sweep reads (atomic not needed: a stale value only delays a ping)
	nextPing     int64 // Unix s
	exp          int64 // Unix s, token expiry (0: none)
	pendingSince int64 // Unix s of the first short write still pending (0: none)
	closingSince int64 // Unix s

	sess session.Session[*delivery] // the reliable streams: positions, held messages, catch-ups

	rate      auth.Bucket // inbound frame rate (loop goroutine)
	rateSec   int64       // second of rateCount
	rateCount int32
	badCount  int32 // refused frames in the current minute
	badMinute int64
}

// latMark ties a live message frame queued in outq (by its first byte:
// the frame is shared, never copied, until written) to its publish time.
// Marks of frames moved into wbuf by a short write have no frame and come
// first.
type latMark struct {
	frame *byte
	pubAt int64 // Unix ns
}

// markLocked records that frame, just queued, is a live message published
// at pubAt: its delivery latency is observed when it is written.
func (c *conn) markLocked(frame []byte, pubAt int64) {
	if pubAt > 0 {
		c.lat = append(c.lat, latMark{&frame[0], pubAt})
	}
}

// observeWrittenLocked records the delivery latency of the marked frames
// among bufs (just handed to writev) that were written whole; the marks
// of the others, now in wbuf, wait for it (observeWbufLocked).
func (c *conn) observeWrittenLocked(bufs [][]byte, whole int) {
	now := time.Now().UnixNano()
	kept := 0
	for i, b := range bufs {
		if len(c.lat) == kept {
			break
		}
		if &b[0] != c.lat[kept].frame {
			continue
		}
		if i < whole {
			c.n.metrics.DeliveryLatency.Observe(float64(now-c.lat[kept].pubAt) / 1e9)
			c.lat = append(c.lat[:kept], c.lat[kept+1:]...)
		} else {
			c.lat[kept].frame = nil
			kept++
		}
	}
}

// observeWbufLocked records the latency of the frames wbuf held, now
// written.
func (c *conn) observeWbufLocked() {
	now := time.Now().UnixNano()
	i := 0
	for ; i < len(c.lat) && c.lat[i].frame == nil; i++ {
		c.n.metrics.DeliveryLatency.Observe(float64(now-c.lat[i].pubAt) / 1e9)
	}
	c.lat = append(c.lat[:0], c.lat[i:]...)
}

// fragment is a fragmented client message being assembled.
type fragment struct {
	op   byte
	rsv1 bool // compressed (RSV1 on its first frame): inflated once whole
	data []byte
}

// connMeta is what only some connections need from their handshake: set
// once before the connection is shared, read-only after.
type connMeta struct {
	claims *auth.Claims // the handshake token's claims, when they grant more than the user id (see grants)
	device string       // the handshake's device; "" for the default one
}

// connExtra holds what only a busy or unusual connection needs; under mu.
type connExtra struct {
	inq []*protocol.ClientFrame // frames waiting for the inbound goroutine

	sendq   []queuedSend // send frames waiting for the sink, in frame order (upstream.go)
	sending bool         // a send worker is running
	// The first send of the connection answered unavailable and not
	// accepted since, and when it last failed: later ids wait for it
	// (upstream.go, sendBlockFor).
	sendBlock   string
	sendBlockAt time.Time
	rpcs        int // rpc calls in flight (rpc.go)

	// The grants of the last accepted refresh frame (refresh.go); the
	// handshake's stay in meta, which never changes.
	refreshed bool
	claims    *auth.Claims

	room chan struct{} // closed when the queue drains (a catch-up waits for room)

	keyed []keyMark // the queued frames of keyed realtime messages, in queue order (conflate.go)

	// Room presence (presence.go): the rooms whose presence the
	// connection is in, its changes waiting for the worker, and whether
	// the connection ended (it enters no room after that).
	pres        map[string]*connPres
	presInfo    map[string]json.RawMessage // a join proxy's info for the room's presence entry
	presAs      map[string]presAs          // a Pusher presence channel's member, for the room's presence entry
	presq       []presOp
	presRunning bool
	presClosed  bool

	// Lifecycle events (events.go), only with WSGATE_EVENTS.
	info        []byte // the token's info claim, for the connect record
	lifeUp      bool   // the connection's ConnUp was queued; its end is not yet
	closeCode   int    // the first close code sent (0: none yet)
	closeReason string
}

func (c *conn) extra() *connExtra {
	if c.x == nil {
		c.x = &connExtra{}
	}
	return c.x
}

// dropIdleExtraLocked lets go of connExtra once nothing in it is in use,
// so that a connection that sent a frame (a join, an ack) is back to an
// idle connection's size when it is answered.
func (c *conn) dropIdleExtraLocked() {
	if x := c.x; x != nil && x.idle() {
		c.x = nil
	}
	c.sess.Compact()
}

// idle reports whether x holds nothing a new connExtra would not.
func (x *connExtra) idle() bool {
	return len(x.inq) == 0 && len(x.sendq) == 0 && !x.sending && x.sendBlock == "" && x.rpcs == 0 &&
		!x.refreshed && x.claims == nil && x.room == nil && len(x.keyed) == 0 &&
		x.info == nil && !x.lifeUp && x.closeCode == 0 && x.closeReason == "" &&
		len(x.pres) == 0 && len(x.presq) == 0 && !x.presRunning && !x.presClosed && len(x.presInfo) == 0 && len(x.presAs) == 0
}

func (c *conn) logger() *slog.Logger {
	return c.n.log.With("conn", c.connID(), "user", c.user)
}

// connID formats the connection's cluster-unique id (not stored, to keep
// idle connections small).
func (c *conn) connID() string { return c.n.formatID(c.idSeq) }

// deviceName is the connection's device as the contract names it.
func (c *conn) deviceName() string {
	if c.meta == nil {
		return protocol.DefaultDevice
	}
	return cmp.Or(c.meta.device, protocol.DefaultDevice)
}

// device is the handshake's device, "" for the default one.
func (c *conn) device() string {
	if c.meta == nil {
		return ""
	}
	return c.meta.device
}

// claims are the grants of the connection's token (nil: none): those of
// the last accepted refresh frame, else the handshake's.
func (c *conn) claims() *auth.Claims {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.x != nil && c.x.refreshed {
		return c.x.claims
	}
	if c.meta == nil {
		return nil
	}
	return c.meta.claims
}

// route is the connection's route record.
func (c *conn) route() cluster.Route {
	var info string
	c.mu.Lock()
	if c.x != nil {
		info = string(c.x.info) // set before the first route, never changed; keeps x (dropIdleExtraLocked)
	}
	c.mu.Unlock()
	return cluster.Route{User: c.user, ConnID: c.connID(), Node: c.n.cfg.NodeID, ConnectedAt: c.connectedAt, Device: c.deviceName(), Info: info}
}

// ---------------------------------------------------------------------
// Output: bounded queue, one writer at a time, coalesced writev.

// send queues a control or reply frame; these bypass the class rules but
// still respect the queue bound (a full queue means a stuck client).
func (c *conn) send(frame []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sendLocked(frame)
}

func (c *conn) sendLocked(frame []byte) bool {
	if c.state >= stClosing {
		return false
	}
	if len(c.outq) >= c.n.cfg.SendQueue+8 && !c.waitOut && c.state == stOpen {
		// As in enqueueLocked: a socket that takes bytes is no slow
		// client (a burst of presence frames on a busy node).
		c.writeOutLocked()
		if c.state >= stClosing {
			return false
		}
	}
	if len(c.outq) >= c.n.cfg.SendQueue+8 {
		c.closeLocked(protocol.CloseSlowConsumer)
		return false
	}
	c.outq = append(c.outq, frame)
	c.kickLocked()
	return true
}

// enqueueLocked adds d's frame under the class rules. It returns false
// when the frame was not queued (or, conflated, took a queued frame's
// place); wait is true for a notify message that may be retried.
func (c *conn) enqueueLocked(frame []byte, d *delivery) (ok, wait bool) {
	cl := d.class
	if c.state >= stClosing {
		c.n.metrics.Dropped.WithLabelValues(metrics.DropClosed).Inc()
		return false, false
	}
	if len(c.outq) >= c.n.cfg.SendQueue && !c.waitOut && c.state == stOpen {
		// The queue is full but the socket is not: the writer has just
		// not run yet. Write here rather than call the client slow.
		c.writeOutLocked()
	}
	if len(c.outq) >= c.n.cfg.SendQueue {
		c.n.metrics.SendQueueFull.Inc()
		switch cl {
		case classRealtime:
			if d.ckey != "" && c.conflateLocked(frame, d.ckey, d.pubAt) {
				c.n.metrics.Dropped.WithLabelValues(metrics.DropConflated).Inc()
				return false, false
			}
			c.n.metrics.Dropped.WithLabelValues(metrics.DropQueueFull).Inc()
			return false, false
		case classNotify:
			return false, true
		default:
			c.n.metrics.Dropped.WithLabelValues(metrics.DropSlowClose).Inc()
			c.closeLocked(protocol.CloseSlowConsumer)
			return false, false
		}
	}
	c.outq = append(c.outq, frame)
	c.n.metrics.Delivered.Inc()
	c.kickLocked()
	return true, false
}

// kickLocked hands the connection to a writer unless one owns it already
// or the socket is full (EPOLLOUT will bring it back).
func (c *conn) kickLocked() {
	if c.writing || c.waitOut || c.state == stResuming || (len(c.outq) == 0 && len(c.wbuf) == 0) {
		return
	}
	c.scheduleWriteLocked()
}

// scheduleWriteLocked makes a writer own the connection's output.
func (c *conn) scheduleWriteLocked() {
	c.writing = true
	if c.fb != nil && c.tlsc == nil {
		c.fb.conns = append(c.fb.conns, c) // flushed with the whole fan-out
		return
	}
	if c.tlsc != nil {
		c.tlsc.wakeWriter()
		return
	}
	select {
	case c.n.writers <- c:
	default:
		// The pool is saturated (or stopped by Shutdown): write from
		// here rather than wait or start a goroutine per connection; the
		// write never blocks.
		c.flushLocked()
	}
}

// writeLoop is one of the writer pool's goroutines, taking connections
// from writers (the channel New made: a test may give the node another).
func (n *Node) writeLoop(writers <-chan *conn) {
	for {
		select {
		case c := <-writers:
			c.flush()
		case <-n.ctx.Done():
			return
		}
	}
}

const maxIovecs = 512

// flush writes everything queued. Only the writer that set c.writing calls
// it. The lock is held across the non-blocking writev: it never waits, and
// holding it keeps teardown from closing (and the kernel from reusing) the
// descriptor under the write.
func (c *conn) flush() {
	c.mu.Lock()
	c.flushLocked()
	c.mu.Unlock()
}

// flushLocked is flush with c.mu held, by the writer that set c.writing.
func (c *conn) flushLocked() {
	c.writeOutLocked()
	c.writing = false
	if c.state == stClosing && len(c.outq) == 0 && len(c.wbuf) == 0 {
		// Close frame sent: half-close so the peer sees it followed by
		// FIN; the peer's close or the sweep ends the connection.
		c.closeNotifyLocked()
		_ = unix.Shutdown(c.fd, unix.SHUT_WR)
	}
}

// writeOutLocked writes queued frames until the queue is empty or the
// socket is full (then waitOut is set and EPOLLOUT brings the writer
// back). Any goroutine holding c.mu may call it: the mutex is what makes
// the writer one at a time.
func (c *conn) writeOutLocked() {
	if c.tlsc != nil {
		return // the TLS writer goroutine writes
	}
	if c.tr != nil {
		c.writeTLSLocked()
		return
	}
	for c.state != stClosed && !c.waitOut {
		if !c.writeRestLocked() {
			return
		}
		if len(c.outq) == 0 {
			return
		}
		if isHTTPStream(c.tp) {
			c.wroteStreamLocked()
		}
		bufs := c.outq
		if len(bufs) > maxIovecs {
			bufs = bufs[:maxIovecs]
		}
		total := 0
		for _, b := range bufs {
			total += len(b)
		}
		n, err := writev(c.fd, bufs)
		if err != nil && err != unix.EAGAIN && err != unix.EINTR {
			c.teardownLocked("write: " + err.Error())
			return
		}
		n = max(n, 0)
		whole := len(bufs)
		if n < total {
			// Keep the unsent bytes, in order, in one buffer.
			var w []byte
			skip := n
			for i, b := range bufs {
				if skip >= len(b) {
					skip -= len(b)
					continue
				}
				whole = min(whole, i)
				w = append(w, b[skip:]...)
				skip = 0
			}
			c.wbuf = w
			if c.pendingSince == 0 {
				c.pendingSince = time.Now().Unix()
			}
		}
		if len(c.lat) > 0 {
			c.observeWrittenLocked(bufs, whole)
		}
		rest := len(c.outq) - len(bufs)
		copy(c.outq, c.outq[len(bufs):])
		clear(c.outq[rest:])
		c.outq = c.outq[:rest]
		if rest == 0 {
			// Nothing stays allocated for an idle connection: the next
			// frame allocates a small queue again.
			c.outq = nil
			c.keysWrittenLocked()
			if len(c.wbuf) == 0 {
				// Every mark was of a frame written (or, defensively,
				// of one gone).
				c.lat = nil
			}
		}
		if c.x != nil && rest < c.n.cfg.SendQueue {
			c.wakeCatchUpLocked()
		}
	}
}

// OnWritable is called by the event loop when the socket drained.
func (c *conn) OnWritable() {
	c.mu.Lock()
	if !c.waitOut || c.state == stClosed {
		c.mu.Unlock()
		return
	}
	c.waitOut = false
	c.kickLocked()
	c.mu.Unlock()
}

// ---------------------------------------------------------------------
// Closing: one path.

// close sends a close frame (after what is queued) and ends the
// connection once it left; idempotent.
func (c *conn) close(code int, reason string) {
	c.mu.Lock()
	c.closeWithReasonLocked(code, reason)
	c.mu.Unlock()
}

func (c *conn) closeLocked(code int) { c.closeWithReasonLocked(code, protocol.CloseReason(code)) }

func (c *conn) closeWithReasonLocked(code int, reason string) {
	if c.state >= stClosing {
		return
	}
	wasResuming := c.state == stResuming
	if c.n.events != nil {
		c.extra().closeCode, c.x.closeReason = code, reason
	}
	c.state = stClosing
	c.closingSince = time.Now().Unix()
	c.n.metrics.Closes.WithLabelValues(closeLabel(code)).Inc()
	c.outq = append(c.outq, c.closeFrame(code, reason))
	c.sess.Close()
	c.wakeCatchUpLocked()
	if code == protocol.CloseSlowConsumer && !wasResuming {
		// Its close frame may wait long for the socket: the connection
		// leaves presence, routes and wsgate_connections now (contract
		// 22); teardown's own forget then finds nothing left to do.
		c.n.events.endedLocked(c)
		c.n.spawn(func() { c.n.forget(c) })
	}
	c.logger().Info("closing connection", "code", code, "reason", reason)
	if wasResuming || (!c.writing && !c.waitOut) {
		c.scheduleWriteLocked()
	}
}

// teardown closes the socket and forgets the connection everywhere;
// idempotent, callable from any goroutine.
func (c *conn) teardown(why string) {
	c.mu.Lock()
	c.teardownLocked(why)
	c.mu.Unlock()
}

func (c *conn) teardownLocked(why string) {
	if c.state == stClosed {
		return
	}
	if c.state != stClosing {
		c.n.metrics.Closes.WithLabelValues("0").Inc()
		if c.n.events != nil {
			c.extra().closeCode, c.x.closeReason = closeAbnormal, why
		}
	}
	c.state = stClosed
	c.n.releasePartial(c)
	if c.tlsc != nil {
		c.tlsc.close()
	} else {
		c.n.poller.Unregister(c.fd, c.token)
		unix.Close(c.fd)
	}
	c.outq, c.wbuf, c.lat = nil, nil, nil
	c.sess.Close() // queued acks (inq) still run: see runInbound
	c.wakeCatchUpLocked()
	c.logger().Debug("connection ended", "why", why)
	c.n.events.endedLocked(c)
	// Everything else outside the lock, off this goroutine.
	c.n.spawn(func() { c.n.forget(c) })
}

func writev(fd int, bufs [][]byte) (int, error) {
	if len(bufs) == 1 {
		return unix.Write(fd, bufs[0])
	}
	return unix.Writev(fd, bufs)
}

// closeLabel is the metric label of a close code: the code for those of
// RFC 6455 and the contract, "other" for the rest (a client's own code in
// 3000-4999, echoed back, must not create a label of its own).
func closeLabel(code int) string {
	switch code {
	case protocol.CloseDraining, protocol.CloseDisconnected, protocol.CloseSlowConsumer,
		protocol.CloseReplaced, protocol.CloseTokenExpired, protocol.CloseRateLimited:
		return strconv.Itoa(code)
	}
	if code >= 1000 && code <= 1015 {
		return strconv.Itoa(code)
	}
	return "other"
}

// writeRestLocked writes what a short write left in wbuf (plain bytes, or
// records already sealed). It reports false when the caller must stop:
// the socket is full again (waitOut) or the connection was torn down.
func (c *conn) writeRestLocked() bool {
	if len(c.wbuf) == 0 {
		return true
	}
	n, err := unix.Write(c.fd, c.wbuf)
	if n > 0 {
		c.wbuf = c.wbuf[n:]
	}
	if err != nil && err != unix.EAGAIN && err != unix.EINTR {
		c.teardownLocked("write: " + err.Error())
		return false
	}
	if len(c.wbuf) > 0 {
		c.waitOut = true
		return false
	}
	c.wbuf = nil
	c.pendingSince = 0
	if len(c.lat) > 0 {
		c.observeWbufLocked()
	}
	return true
}

package e2e

// rawClient: a reconnecting client built on client.Conn that records every
// server frame as it comes off the socket (decoded, not filtered: no
// duplicate is dropped, nothing is reordered) and every ack it sends, with
// times, per connection. The records feed the independent checker
// (checker_test.go). The Go client's own filtering (client.Client drops
// duplicates and older seqs) would hide exactly what the checker looks for.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

// evKind is what one record of a connection is.
type evKind int

const (
	evMessage  evKind = iota // a message frame (reliable when seq > 0)
	evGap                    // a gap frame: from..to will not come
	evRedirect               // a redirect frame
	evAck                    // an ack the client sent (seq), recorded before the write
)

func (k evKind) String() string {
	return [...]string{"message", "gap", "redirect", "ack"}[k]
}

// event is one record of a connection, in the order of the socket.
type event struct {
	at       time.Time
	kind     evKind
	seq      int64  // message seq (0: not reliable); ack seq
	from, to int64  // gap
	id       string // message id
	event    string
	job      int    // data.job of the message; -1 when absent
	room     string // a reliable room's message or gap: seq, from, to are the room's
}

func (e event) String() string {
	switch e.kind {
	case evMessage:
		if e.room != "" {
			return fmt.Sprintf("message room=%s seq=%d job=%d id=%s event=%s", e.room, e.seq, e.job, e.id, e.event)
		}
		return fmt.Sprintf("message seq=%d job=%d id=%s event=%s", e.seq, e.job, e.id, e.event)
	case evGap:
		if e.room != "" {
			return fmt.Sprintf("gap room=%s from=%d to=%d", e.room, e.from, e.to)
		}
		return fmt.Sprintf("gap from=%d to=%d", e.from, e.to)
	case evAck:
		return fmt.Sprintf("ack seq=%d (sent)", e.seq)
	}
	return e.kind.String()
}

// connRec is the record of one connection.
type connRec struct {
	client    string // the rawClient's name
	user      string
	node      string
	connID    string
	device    string // the welcome's device
	since     *int64 // resume point of the handshake; nil: none
	inboxSeq  int64
	roomSince map[string]int64 // room_since of the handshake
	rooms     map[string]int64 // the welcome's rooms
	dialAt    time.Time        // the dial started
	welcomeAt time.Time
	slow      bool // the reader stopped reading for a while on it

	events      []event
	closed      bool
	closeCode   int // 1006 when it broke without a close frame
	closeReason string
	closedAt    time.Time
	ourClose    bool // the client closed it (end of the run)
}

// deviceName is the connection's device ("default" for none).
func (c *connRec) deviceName() string {
	if c.device == "" {
		return protocol.DefaultDevice
	}
	return c.device
}

// recorder is what the clients of one test record into: the start time
// (for readable offsets) and a test-only switch that corrupts the record
// to prove that the checker catches it (WSGATE_CHAOS_INJECT=dup|reorder).
type recorder struct {
	start  time.Time
	inject string

	mu       sync.Mutex
	injected bool
	held     *event   // reorder: a reliable message held back one frame
	heldOn   *connRec // the connection it came on
}

func newRecorder() *recorder {
	return &recorder{start: time.Now(), inject: os.Getenv("WSGATE_CHAOS_INJECT")}
}

// add appends e to c (under the client's lock), applying the injection
// switch once per run: "dup" records one reliable message twice,
// "reorder" swaps two consecutive reliable messages.
func (rec *recorder) add(c *connRec, e event) {
	if rec.inject == "" || e.kind != evMessage || e.seq == 0 || (e.room != "") != (rec.inject == "room-dup" || rec.inject == "room-reorder") {
		c.events = append(c.events, e)
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	switch {
	case rec.injected:
		c.events = append(c.events, e)
	case (rec.inject == "dup" || rec.inject == "room-dup") && e.seq >= 2:
		rec.injected = true
		c.events = append(c.events, e, e)
	case (rec.inject == "reorder" || rec.inject == "room-reorder") && e.seq >= 2 && rec.held == nil:
		h := e
		rec.held, rec.heldOn = &h, c
	case (rec.inject == "reorder" || rec.inject == "room-reorder") && rec.heldOn == c && rec.held.room == e.room:
		rec.injected = true
		c.events = append(c.events, e, *rec.held)
	default:
		c.events = append(c.events, e)
	}
}

func (rec *recorder) offset(t time.Time) string {
	return fmt.Sprintf("t+%.3fs", t.Sub(rec.start).Seconds())
}

// rawOptions configure a rawClient.
type rawOptions struct {
	resume bool // reconnect with since = the highest seq it received
	// pick returns the URL of the next connection (e.g. through an
	// allocator); a redirect frame's URL is used once instead.
	pick func() (string, error)
	// first is the URL of the first connection; empty: pick.
	first string
	// ackEvery: ack after that many reliable messages (besides a timer
	// every 100 ms); 0 = 10.
	ackEvery int
	// device is sent as ?device= on every connection; empty: none (the
	// default device).
	device string
	// transport carries every connection: empty or client.WebSocket, or
	// client.SSE / client.Stream (contract 18: the client's frames, acks
	// included, are posted to POST /v1/conn/{conn_id}).
	transport client.Transport
}

// rawClient is one reconnecting client. Its reader goroutine records the
// frames; a helper of each connection sends the delayed acks.
type rawClient struct {
	name, user string
	rec        *recorder
	opt        rawOptions
	tok        string
	ctx        context.Context
	cancel     context.CancelFunc
	done       chan struct{}
	pauses     chan time.Duration

	mu       sync.Mutex
	conns    []*connRec
	cur      client.FrameConn
	maxSeq   int64            // highest reliable seq received on any connection
	maxRoom  map[string]int64 // per reliable room: highest seq received (or skipped by a room gap)
	redirect string
}

func startRawClient(t testing.TB, rec *recorder, name, user string, opt rawOptions) *rawClient {
	t.Helper()
	if opt.ackEvery == 0 {
		opt.ackEvery = 10
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rawClient{name: name, user: user, rec: rec, opt: opt, tok: token(t, user, nil),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), pauses: make(chan time.Duration, 1)}
	go r.run()
	t.Cleanup(r.stop)
	return r
}

// stop closes the current connection politely and ends the client.
func (r *rawClient) stop() {
	r.cancel()
	r.mu.Lock()
	c := r.cur
	if c != nil && len(r.conns) > 0 {
		r.conns[len(r.conns)-1].ourClose = true
	}
	r.mu.Unlock()
	if c != nil {
		_ = c.WriteClose(protocol.CloseNormal, "")
	}
	select {
	case <-r.done:
	case <-time.After(2 * time.Second):
		r.mu.Lock()
		if r.cur != nil {
			r.cur.Close()
		}
		r.mu.Unlock()
		<-r.done
	}
}

// pause makes the reader stop reading for d (a slow consumer).
func (r *rawClient) pause(d time.Duration) {
	select {
	case r.pauses <- d:
	default:
	}
}

func (r *rawClient) run() {
	defer close(r.done)
	backoff := 50 * time.Millisecond
	r.mu.Lock()
	r.redirect = r.opt.first
	r.mu.Unlock()
	for r.ctx.Err() == nil {
		r.mu.Lock()
		url := r.redirect
		r.redirect = ""
		var since *int64
		if r.opt.resume && r.maxSeq > 0 {
			s := r.maxSeq
			since = &s
		}
		var roomSince map[string]int64
		if r.opt.resume && len(r.maxRoom) > 0 {
			roomSince = maps.Clone(r.maxRoom)
		}
		r.mu.Unlock()
		var err error
		if url == "" {
			url, err = r.opt.pick()
		}
		if err == nil {
			var conn client.FrameConn
			var w *client.Welcome
			dialAt := time.Now()
			dctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
			opts := client.DialOptions{Token: r.tok, Since: since, RoomSince: roomSince, Device: r.opt.device, HandshakeTimeout: 5 * time.Second}
			if t := r.opt.transport; t != "" && t != client.WebSocket {
				var sc *client.StreamConn
				if sc, w, err = client.DialStream(dctx, url, t, opts); err == nil {
					conn = sc
				}
			} else {
				var wc *client.Conn
				if wc, w, err = client.Dial(dctx, url, opts); err == nil {
					conn = wc
				}
			}
			cancel()
			if err == nil {
				backoff = 50 * time.Millisecond
				r.serve(conn, w, since, roomSince, dialAt)
				continue
			}
		}
		// Full jitter, 50 ms doubling to 1 s.
		select {
		case <-r.ctx.Done():
		case <-time.After(time.Duration(rand.Int64N(int64(backoff)) + 1)):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// serve reads one connection until it ends.
func (r *rawClient) serve(conn client.FrameConn, w *client.Welcome, since *int64, roomSince map[string]int64, dialAt time.Time) {
	c := &connRec{client: r.name, user: r.user, node: w.Node, connID: w.ConnID, device: w.Device, since: since, inboxSeq: w.InboxSeq, roomSince: roomSince, rooms: w.Rooms, dialAt: dialAt, welcomeAt: time.Now()}
	r.mu.Lock()
	// A room seq in the welcome below the position: the room's history
	// was lost, its seq is the base (contract 12).
	if r.maxRoom == nil {
		r.maxRoom = map[string]int64{}
	}
	for room, q := range w.Rooms {
		if p, ok := r.maxRoom[room]; !ok || q < p {
			r.maxRoom[room] = q
		}
	}
	r.conns = append(r.conns, c)
	r.cur = conn
	stopped := r.ctx.Err() != nil
	r.mu.Unlock()
	if stopped {
		c.ourClose = true
		_ = conn.WriteClose(protocol.CloseNormal, "")
	}
	var high, acked int64 // this connection's highest seq received and acked
	ack := func() {
		r.mu.Lock()
		s := high
		if s <= acked || c.closed {
			r.mu.Unlock()
			return
		}
		acked = s
		c.events = append(c.events, event{at: time.Now(), kind: evAck, seq: s, job: -1})
		r.mu.Unlock()
		_ = conn.WriteFrame(&protocol.ClientFrame{Type: protocol.TypeAck, Seq: s})
	}
	helperDone := make(chan struct{})
	end := make(chan struct{})
	go func() {
		defer close(helperDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-end:
				return
			case <-tick.C:
				ack()
			}
		}
	}()
	n := 0
	for {
		select {
		case d := <-r.pauses:
			r.mu.Lock()
			c.slow = true
			r.mu.Unlock()
			time.Sleep(d) // the slow consumer: nothing is read meanwhile
		default:
		}
		f, err := conn.ReadFrame()
		if err != nil {
			if errors.Is(err, client.ErrBadFrame) {
				continue
			}
			code, reason := 1006, err.Error()
			var ce *client.CloseError
			if errors.As(err, &ce) {
				code, reason = ce.Code, ce.Reason
			}
			r.mu.Lock()
			c.closed, c.closeCode, c.closeReason, c.closedAt = true, code, reason, time.Now()
			r.cur = nil
			r.mu.Unlock()
			break
		}
		e := event{at: time.Now(), job: -1}
		switch f.Type {
		case protocol.TypeMessage:
			e.kind, e.seq, e.id, e.event = evMessage, f.Seq, f.ID, f.Event
			if f.Seq > 0 && f.Target != nil && f.Target.Type == protocol.TargetRoom {
				e.room = f.Target.ID
			}
			var d struct {
				Job *int `json:"job"`
			}
			if json.Unmarshal(f.Data, &d) == nil && d.Job != nil {
				e.job = *d.Job
			}
		case protocol.TypeGap:
			e.kind, e.from, e.to = evGap, f.From, f.To
			if f.Target != nil && f.Target.Type == protocol.TargetRoom {
				e.room = f.Target.ID
			}
		case protocol.TypeRedirect:
			e.kind = evRedirect
			r.mu.Lock()
			r.redirect = f.URL
			r.mu.Unlock()
		default:
			continue
		}
		r.mu.Lock()
		r.rec.add(c, e)
		switch {
		case e.room != "" && e.kind == evMessage:
			r.maxRoom[e.room] = max(r.maxRoom[e.room], e.seq)
		case e.room != "":
			r.maxRoom[e.room] = max(r.maxRoom[e.room], e.to)
		case e.kind == evMessage && e.seq > 0:
			high = max(high, e.seq)
			r.maxSeq = max(r.maxSeq, e.seq)
			n++
		case e.kind == evGap:
			r.maxSeq = max(r.maxSeq, e.to)
		}
		r.mu.Unlock()
		if e.kind == evMessage && e.seq > 0 && e.room == "" && n%r.opt.ackEvery == 0 {
			ack()
		}
	}
	close(end)
	<-helperDone
	conn.Close()
}

// connected reports whether the client holds a connection, and to which
// node.
func (r *rawClient) connected() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil || len(r.conns) == 0 {
		return false, ""
	}
	return true, r.conns[len(r.conns)-1].node
}

// connID is the id of the connection the client holds ("" for none).
func (r *rawClient) connID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil || len(r.conns) == 0 {
		return ""
	}
	return r.conns[len(r.conns)-1].connID
}

// LastSeq is the highest reliable seq the client received.
func (r *rawClient) LastSeq() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxSeq
}

// ackedUpTo is the highest seq this client acknowledged on any of its
// connections.
func (r *rawClient) ackedUpTo() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s int64
	for _, c := range r.conns {
		for _, e := range c.events {
			if e.kind == evAck {
				s = max(s, e.seq)
			}
		}
	}
	return s
}

// currentSeq is the highest reliable seq received on the current
// connection (0 without one).
func (r *rawClient) currentSeq() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil || len(r.conns) == 0 {
		return 0
	}
	var s int64
	for _, e := range r.conns[len(r.conns)-1].events {
		if e.kind == evMessage && e.room == "" {
			s = max(s, e.seq)
		}
	}
	return s
}

// currentRoomSeq is the highest seq of room received on the current
// connection, and whether that connection follows the room (its welcome
// listed it, or one of its messages came).
func (r *rawClient) currentRoomSeq(room string) (seq int64, follows bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil || len(r.conns) == 0 {
		return 0, false
	}
	c := r.conns[len(r.conns)-1]
	seq, follows = c.rooms[room]
	for _, e := range c.events {
		if e.room == room && e.kind == evMessage {
			seq, follows = max(seq, e.seq), true
		}
	}
	return seq, follows
}

// received lists the reliable seqs received on every connection, sorted,
// with repeats.
func (r *rawClient) received() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, c := range r.conns {
		for _, e := range c.events {
			if e.kind == evMessage && e.seq > 0 && e.room == "" {
				out = append(out, e.seq)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (r *rawClient) nodes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.conns {
		out = append(out, c.node)
	}
	return out
}

// records copies the connection records (for the checker, after stop).
func (r *rawClient) records() []*connRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*connRec, len(r.conns))
	for i, c := range r.conns {
		cp := *c
		cp.events = append([]event(nil), c.events...)
		out[i] = &cp
	}
	return out
}

// liveSet is the nodes a test publishes through (round robin) and whose
// allocators its clients reconnect through.
type liveSet struct {
	lmu   sync.Mutex
	live  []*gateway
	lnext int
}

func (s *liveSet) setLive(nodes ...*gateway) {
	s.lmu.Lock()
	s.live = nodes
	s.lmu.Unlock()
}

func (s *liveSet) liveNodes() []*gateway {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return append([]*gateway(nil), s.live...)
}

// replace takes remove out of the set and adds add (either may be nil).
func (s *liveSet) replace(remove, add *gateway) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	var out []*gateway
	for _, g := range s.live {
		if g != remove {
			out = append(out, g)
		}
	}
	if add != nil {
		out = append(out, add)
	}
	s.live = out
}

// node picks the next live node, round robin (nil when none).
func (s *liveSet) node() *gateway {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if len(s.live) == 0 {
		return nil
	}
	s.lnext++
	return s.live[s.lnext%len(s.live)]
}

// allocateAt picks through GET {base}/v1/allocate (an allocator or a
// gateway).
func allocateAt(base string) func() (string, error) {
	return func() (string, error) {
		resp, err := http.Get(base + "/v1/allocate")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var a struct {
			URL string `json:"url"`
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("allocate at %s: %d", base, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			return "", err
		}
		return a.URL, nil
	}
}

// allocatorOf picks through GET /v1/allocate of one of the nodes nodes()
// returns, at random.
func allocatorOf(nodes func() []*gateway) func() (string, error) {
	return func() (string, error) {
		ns := nodes()
		if len(ns) == 0 {
			return "", errors.New("no live node")
		}
		return forwardTo(ns[rand.IntN(len(ns))])()
	}
}

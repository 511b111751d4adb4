package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/upstream"
	"github.com/wsgate/wsgate/protocol"
)

// Lifecycle events (contract section 13, WSGATE_EVENTS).
//
// connect, join, leave and ack are reported by the node where they
// happen. disconnect, online and offline hang on decisions that must hold
// cluster-wide, made atomically by the backend (cluster.Lifecycle): every
// connection is recorded live once open (ConnUp: the user's first live
// connection raises the presence counter v and is reported online), and
// its end is claimed once, by its own node or, for a node that died, by
// whichever survivor gets there first (ConnDown: the user's last one
// raises v again and is reported offline). One connection's ConnUp and
// ConnDown run in that order on one worker of the node (lifeShards), so a
// late retry never reorders them. undelivered checks wait in the backend's
// due set, which every node polls (undeliveredLoop).
//
// Every record goes through the node's upstream.Buffer: the event paths
// never wait for the sink.
type events struct {
	n     *Node
	buf   *upstream.Buffer
	lc    cluster.Lifecycle // nil unless disconnect, online, offline or undelivered are on
	on    map[string]bool
	track bool // ConnUp / ConnDown are made (disconnect, online or offline)

	shards [lifeShards]lifeShard
	jobs   sync.WaitGroup // queued ConnUp / ConnDown not done yet
}

const lifeShards = 4

type lifeShard struct {
	mu   sync.Mutex
	q    []lifeJob
	wake chan struct{}
}

// lifeJob is one ConnUp (up) or ConnDown for a connection of this node.
type lifeJob struct {
	up      bool
	route   cluster.Route
	device  string
	code    int
	reason  string
	connect *upstream.Record // up: the connect record, sent once ConnUp succeeded
}

// EnableEvents sends the lifecycle events of WSGATE_EVENTS to sink
// through a bounded buffer (upstream.Buffer). New calls it with the sink
// of WSGATE_UPSTREAM_URL; without one, an embedder (or a test) may call it
// after New and before Start. The node flushes the buffer in Shutdown.
func (n *Node) EnableEvents(sink upstream.Sink) error {
	if len(n.cfg.Events) == 0 || n.events != nil {
		return nil
	}
	e := &events{n: n, on: map[string]bool{}}
	for _, name := range n.cfg.Events {
		e.on[name] = true
	}
	e.track = e.on["disconnect"] || e.on["online"] || e.on["offline"]
	if e.on["undelivered"] && n.cfg.UndeliveredAfter <= 0 {
		delete(e.on, "undelivered")
		n.log.Warn("WSGATE_EVENTS lists undelivered but WSGATE_UNDELIVERED_AFTER is 0: no undelivered events")
	}
	if e.track || e.on["undelivered"] {
		lc, ok := n.lb.Backend.(cluster.Lifecycle)
		if !ok {
			return errNoLifecycle
		}
		e.lc = lc
	}
	e.buf = upstream.NewBuffer(sink, upstream.BufferOptions{Metrics: &n.metrics.Upstream, Logger: n.log})
	n.goFunc(e.buf.Run)
	if e.track {
		for i := range e.shards {
			s := &e.shards[i]
			s.wake = make(chan struct{}, 1)
			n.goFunc(func() { e.lifeLoop(s) })
		}
	}
	if e.on["undelivered"] {
		n.goFunc(e.undeliveredLoop)
	}
	n.events = e
	return nil
}

// closeAbnormal is the code of a disconnect without a close frame (RFC
// 6455's 1006: the socket failed, or the node died).
const closeAbnormal = 1006

type lifecycleError string

func (e lifecycleError) Error() string { return string(e) }

const errNoLifecycle = lifecycleError("WSGATE_EVENTS: the cluster backend does not support lifecycle events")

// emit queues rec with its common fields filled in.
func (e *events) emit(rec upstream.Record, accepted func()) {
	rec.ID = e.n.newID()
	if rec.Node == "" {
		rec.Node = e.n.cfg.NodeID
	}
	if rec.TS == 0 {
		rec.TS = time.Now().UnixMilli()
	}
	e.buf.Add(rec, accepted)
}

// opened reports an open connection: the connect record, and its ConnUp.
// Under c.mu, once the connection is open.
func (e *events) openedLocked(c *conn, ip string, info json.RawMessage) {
	route := cluster.Route{User: c.user, ConnID: c.connID(), Node: e.n.cfg.NodeID, ConnectedAt: c.connectedAt}
	var connect *upstream.Record
	if e.on["connect"] {
		connect = &upstream.Record{Type: "connect", User: c.user, ConnID: route.ConnID, Device: c.deviceName(),
			TS: c.connectedAt, IP: ip, Info: info}
	}
	if !e.track {
		if connect != nil {
			e.emit(*connect, nil)
		}
		return
	}
	// The connect record goes out once ConnUp recorded the connection:
	// then its end is reported, also when this node dies.
	c.extra().lifeUp = true
	e.queue(lifeJob{up: true, route: route, device: c.deviceName(), connect: connect})
}

// endedLocked reports the end of a connection whose opening was reported
// (once), under c.mu: at its close when it leaves early (a slow
// consumer, contract 22), else at its teardown. Queued there, not by the
// forget that follows on another goroutine, the record is in the queue
// that Shutdown's stop waits for: a connection Shutdown cuts has its
// disconnect reported before Shutdown returns.
func (e *events) endedLocked(c *conn) {
	if e == nil {
		return
	}
	x := c.x
	if x == nil || !x.lifeUp {
		return
	}
	x.lifeUp = false
	e.queue(lifeJob{route: cluster.Route{User: c.user, ConnID: c.connID(), Node: e.n.cfg.NodeID, ConnectedAt: c.connectedAt},
		device: c.deviceName(), code: x.closeCode, reason: x.closeReason})
}

func (e *events) queue(j lifeJob) {
	s := &e.shards[shardOf(j.route.ConnID)]
	e.jobs.Add(1)
	s.mu.Lock()
	s.q = append(s.q, j)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func shardOf(connID string) int {
	h := 0
	for i := 0; i < len(connID); i++ {
		h = h*31 + int(connID[i])
	}
	return (h & 0x7fffffff) % lifeShards
}

// lifeLoop runs one shard's jobs in order, each until the backend takes
// it (retried with backoff for up to the route TTL: past it the
// connection's state is beyond repair by this node).
func (e *events) lifeLoop(s *lifeShard) {
	for {
		s.mu.Lock()
		if len(s.q) == 0 {
			s.q = nil
			s.mu.Unlock()
			select {
			case <-s.wake:
				continue
			case <-e.n.ctx.Done():
				// Shutdown gave up waiting (stop's bound): what a late
				// forget queued is not run.
				s.mu.Lock()
				for range s.q {
					e.jobs.Done()
				}
				s.q = nil
				s.mu.Unlock()
				return
			}
		}
		j := s.q[0]
		s.q = s.q[1:]
		s.mu.Unlock()
		e.run(j)
		e.jobs.Done()
	}
}

func (e *events) run(j lifeJob) {
	end := time.Now().Add(e.n.cfg.RouteTTL)
	delay := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		start := time.Now()
		var err error
		if j.up {
			var online int64
			if online, err = e.lc.ConnUp(ctx, j.route); err == nil {
				if j.connect != nil {
					e.emit(*j.connect, nil)
				}
				if online > 0 && e.on["online"] {
					e.emit(upstream.Record{Type: "online", User: j.route.User, ConnID: j.route.ConnID, Device: j.device, V: online}, nil)
				}
			}
		} else {
			var ce cluster.ConnEnd
			if ce, err = e.lc.ConnDown(ctx, j.route.User, j.route.ConnID, e.n.cfg.NodeID); err == nil && ce.Claimed {
				e.reportEnd(ce, j.device, j.code, j.reason)
			}
		}
		cancel()
		e.n.observe("lifecycle", start, err)
		if err == nil {
			return
		}
		if time.Now().After(end) {
			e.n.log.Error("lifecycle step failed for the route TTL; giving up", "user", j.route.User, "conn", j.route.ConnID, "up", j.up, "err", err)
			return
		}
		e.n.log.Warn("lifecycle step failed; retrying", "user", j.route.User, "conn", j.route.ConnID, "up", j.up, "err", err)
		time.Sleep(delay) // a background retry, not a synchronisation
		delay = min(2*delay, 5*time.Second)
	}
}

// reportEnd emits the disconnect (and offline) of a claimed end.
func (e *events) reportEnd(ce cluster.ConnEnd, device string, code int, reason string) {
	now := time.Now().UnixMilli()
	if e.on["disconnect"] {
		d := max(now-ce.Route.ConnectedAt, 0)
		e.emit(upstream.Record{Type: "disconnect", User: ce.Route.User, ConnID: ce.Route.ConnID, Node: ce.Route.Node,
			Device: device, TS: now, Code: code, Reason: reason, DurationMS: &d}, nil)
	}
	if ce.Offline > 0 && e.on["offline"] {
		e.emit(upstream.Record{Type: "offline", User: ce.Route.User, ConnID: ce.Route.ConnID, Node: ce.Route.Node,
			Device: device, TS: now, V: ce.Offline}, nil)
	}
}

// sweepDead claims the ends of the connections of dead nodes (their
// records removed, or silent for staleAfter: three heartbeat intervals,
// when their routes stop counting and presence shows them gone, contract
// 22), and of this node's id's earlier process (a restart with a fixed
// WSGATE_NODE_ID). Every survivor does it; each end is reported by one of
// them. A node that was only stalled that long and comes back keeps its
// connections, whose ends were reported already (and are not again).
func (e *events) sweepDead(ctx context.Context, nodes []cluster.NodeInfo) {
	if !e.track {
		return
	}
	ids, err := e.lc.LifecycleNodes(ctx)
	if err != nil {
		return
	}
	alive := map[string]bool{}
	limit := e.n.staleAfter().Milliseconds()
	now := time.Now().UnixMilli()
	for _, x := range nodes {
		if now-x.Heartbeat <= limit {
			alive[x.ID] = true
		}
	}
	for _, id := range ids {
		self := id == e.n.cfg.NodeID
		if alive[id] && !self {
			continue
		}
		routes, err := e.lc.NodeConns(ctx, id)
		if err != nil {
			return
		}
		swept := 0
		for _, rt := range routes {
			if self && strings.HasPrefix(rt.ConnID, e.n.idPrefix) {
				continue // this process's own connection
			}
			ce, err := e.lc.ConnDown(ctx, rt.User, rt.ConnID, e.n.cfg.NodeID)
			if err != nil {
				return
			}
			if ce.Claimed {
				swept++
				e.reportEnd(ce, cmp.Or(rt.Device, protocol.DefaultDevice), closeAbnormal, "node died")
			}
		}
		if !self {
			if err := e.lc.DropNodeConns(ctx, id); err != nil {
				return
			}
		}
		if swept > 0 {
			e.n.log.Info("reported the ends of a dead node's connections", "dead_node", id, "connections", swept)
		}
	}
}

// undeliveredLoop polls the due set: each check claimed by this node is
// reported undelivered unless the user acknowledged the seq; it leaves
// the set once the sink accepted the record (a node that dies before
// leaves it to another after the lease).
func (e *events) undeliveredLoop() {
	every := min(time.Second, max(e.n.cfg.UndeliveredAfter/4, 50*time.Millisecond))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.n.ctx.Done():
			return
		case <-t.C:
		}
		for e.pollDue() {
		}
	}
}

// undeliveredLease is how long a claimed undelivered check is this node's
// before another may take it: longer than the buffer takes to deliver
// through a sink outage of a minute.
const undeliveredLease = 2 * time.Minute

// pollDue handles one batch of due checks; true when there may be more.
func (e *events) pollDue() bool {
	ctx, cancel := context.WithTimeout(e.n.ctx, 4*time.Second)
	defer cancel()
	start := time.Now()
	due, err := e.lc.ClaimDue(ctx, time.Now(), undeliveredLease, 100)
	e.n.observe("lifecycle", start, err)
	if err != nil {
		return false
	}
	for _, d := range due {
		done := func() {
			dctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			if err := e.lc.DoneDue(dctx, d); err != nil {
				e.n.log.Warn("could not remove an undelivered check; it may be reported again", "user", d.User, "seq", d.Seq, "err", err)
			}
		}
		if d.Acked >= d.Seq {
			done()
			continue
		}
		e.emit(upstream.Record{Type: "undelivered", User: d.User, Device: "default", Seq: d.Seq, MessageID: d.MessageID, Event: d.Event}, done)
	}
	return len(due) == 100
}

// appended schedules the undelivered checks of reliable user messages
// just appended (one backend step for a whole batch publish).
func (e *events) appended(ctx context.Context, ds []cluster.Due) {
	if e == nil || !e.on["undelivered"] || len(ds) == 0 {
		return
	}
	due := time.Now().Add(e.n.cfg.UndeliveredAfter).UnixMilli()
	for i := range ds {
		ds[i].Due = due
	}
	if err := e.lc.AddDue(ctx, ds...); err != nil {
		e.n.log.Warn("could not schedule the undelivered checks of reliable messages", "messages", len(ds), "first_user", ds[0].User, "err", err)
	}
}

// undeliveredOn reports whether appends schedule undelivered checks.
func (e *events) undeliveredOn() bool { return e != nil && e.on["undelivered"] }

// acked reports an acknowledgement (one ack record per ack frame the
// backend took) and cancels the undelivered checks up to seq.
func (e *events) acked(ctx context.Context, c *conn, seq int64) {
	if e == nil {
		return
	}
	if e.on["undelivered"] {
		if err := e.lc.Acked(ctx, c.user, seq); err != nil {
			c.logger().Warn("could not record the ack for undelivered checks", "seq", seq, "err", err)
		}
	}
	if e.on["ack"] {
		e.emit(upstream.Record{Type: "ack", User: c.user, ConnID: c.connID(), Device: c.deviceName(), Seq: seq}, nil)
	}
}

// membership reports a join or leave.
func (e *events) membership(user, room string, join bool) {
	typ := "leave"
	if join {
		typ = "join"
	}
	if e == nil || !e.on[typ] {
		return
	}
	e.emit(upstream.Record{Type: typ, User: user, Room: room, Device: "default"}, nil)
}

// stop waits for the queued lifecycle steps (the ends of the connections
// Shutdown closed), then flushes the buffer, both within ctx.
func (e *events) stop(ctx context.Context) {
	if e == nil {
		return
	}
	done := make(chan struct{})
	go func() { e.jobs.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		e.n.log.Warn("lifecycle steps still queued at shutdown")
	}
	e.buf.Close(ctx)
}

// Package gateway is one wsgate node: the WebSocket endpoint with its
// handshake checks, the connections (read by a shared event loop, written
// by a small writer pool from bounded per-connection queues), the local
// index of users and rooms, delivery of published messages, the server
// API, health, metrics and drain.
//
// Ownership: the Node owns every goroutine it starts (tracked by one
// WaitGroup) and stops them in Shutdown. A connection's socket is read only
// by its event loop, written only by the writer holding its writing flag,
// and closed in one place (conn.teardown), idempotently.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/downstream"
	"github.com/wsgate/wsgate/internal/fleet"
	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/internal/netpoll"
	"github.com/wsgate/wsgate/internal/rooms"
	"github.com/wsgate/wsgate/internal/tracing"
	"github.com/wsgate/wsgate/internal/upstream"
)

// Version is set by the main package.
var Version = "dev"

// keySetMinInterval is the least time between two fetches of the JWKS
// that unknown kids cause (zero: auth's default, 30 s); tests shorten it.
var keySetMinInterval time.Duration

// Node is one gateway process.
type Node struct {
	cfg     config.Gateway
	log     *slog.Logger
	backend cluster.Backend
	metrics *metrics.Metrics
	alloc   allocator.Allocator // /v1/allocate and drain's redirects

	gate    *admission.Checker // what a handshake must pass before it becomes a connection
	tlsRate *auth.RateLimiter  // TLS handshakes per client IP, at accept: twice the handshake rate's (tlsaccept.go)
	tlsIPs  *auth.ConnCounter  // sockets per client IP in their TLS handshake

	poller   *netpoll.Poller
	writers  chan *conn
	removals chan cluster.Route // routes of ended connections, removed in batches
	hub      *hub

	idPrefix string
	stats    statsRing // the cluster over the last minutes, for the console (stats.go)
	idSeq    atomic.Uint64
	accepted atomic.Uint64 // upgraded connections since start
	deflated atomic.Uint64 // compressor runs (deflate.go)

	interest roomLocks // orders this node's interest writes of each room

	rooms  atomic.Pointer[rooms.Set] // the namespaces (WSGATE_ROOMS_FILE); nil: none
	pres   cluster.Presence          // room presence; nil when the backend has none
	presMu sync.Mutex

	pusherPrefix uint32                  // the first half of this node's Pusher socket ids (pusher.go)
	pusherRates  sync.Map                // *conn -> *auth.Bucket: Pusher client events sent (pusher_channels.go)
	presRetry    []cluster.PresenceEntry // entries whose removal failed, retried at the next heartbeat
	presBatch    presBatches             // room presence changes waiting to be told (presence.go)
	metas        metaCache               // connMeta shared by connections with the same grants

	behindRunning atomic.Bool     // catchUpBehind is running
	staleNodes    map[string]bool // nodes silent for staleAfter at the last cleanupDeadNodes (its goroutine only)
	behindAgain   atomic.Bool     // and must run once more

	recordMu sync.Mutex // held across each heartbeat write and by retire
	retired  bool       // the node's record was removed for good: no heartbeat may write it again

	loseBus func(seq int64) bool // tests only: true loses the bus message of that seq
	// tests only: true loses the bus message of that membership change
	loseMembership func(user, room string) bool
	membersAgain   atomic.Bool     // a loss notice came: re-read the local users' rooms (roomconverge.go)
	lb             *fleet.Liveness // the backend as n.backend, with what only it does
	catchUpEvery   atomic.Int64    // period of the safety-net catch-up in seconds (catchUpPeriod; tests shorten it)
	notifyWait     time.Duration   // how long a notify message waits for room (contract §4.5: 100 ms; tests lengthen it)

	startedAt time.Time
	status    atomic.Value // cluster.NodeStatus
	weight    atomic.Int32
	healthy   atomic.Bool // backend reachable (last heartbeat succeeded)
	draining  atomic.Bool
	drainOnce sync.Once
	drained   chan struct{} // closed when a drain has finished

	asks askTable // requests to other nodes waiting for their answer

	// HTTP stream connections (stream.go, connpost.go).
	sessionKey [32]byte               // signs the sessions of this node's connections
	postMu     [64]sync.Mutex         // frames posted to one connection are taken one request at a time (by id stripe)
	connPages  replyTable[[]byte]     // connection listings asked of other nodes (conns.go)
	posts      replyTable[postResult] // posts forwarded to other nodes, waiting for the owner's answer
	seen       postSeen               // answers to forwarded posts, for a request sent again

	events *events // lifecycle events (events.go); nil when WSGATE_EVENTS is empty

	pusherHooks *pusherHooks  // Pusher-format webhooks (pusher_hooks.go); nil without WSGATE_PUSHER_WEBHOOK_URL
	pusherSink  upstream.Sink // their sink
	sink        upstream.Sink // WSGATE_UPSTREAM_URL; nil: send refused
	hc          *http.Client  // rpc calls and the webhook sink
	rpcSlots    chan struct{} // rpc calls in flight on this node

	sources  []downstream.Source // WSGATE_DOWNSTREAM_URL (downstream.go)
	dsCancel context.CancelFunc  // ends their consumption
	dsWG     sync.WaitGroup      // their Run calls
	records  recordBulk          // their reliable user messages, published together

	tracer *tracing.Tracer // nil: spans are not exported (SetTracer)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	grMu   sync.RWMutex // read-held to start a goroutine, held to stop starting them
	grDone bool         // Shutdown is waiting for the goroutines: no new one starts

	// Handshakes in flight (admitted, not yet open or refused), which
	// Shutdown waits for before it closes the connections; hsCtx bounds
	// their backend step and ends when Shutdown starts.
	hs       sync.WaitGroup
	hsDone   bool // under grMu: Shutdown has started, new handshakes are refused
	hsCtx    context.Context
	hsCancel context.CancelFunc

	mux      *http.ServeMux // WSGATE_LISTEN (surface.go)
	srv      *http.Server
	adminMux *http.ServeMux // WSGATE_ADMIN_LISTEN; nil without it
	adminSrv *http.Server
	apiH     *api.Handler             // the server API (JSON and gRPC), on the admin routes
	acceptor atomic.Pointer[acceptor] // the own accept path, when serving a plain listener
	partial  sync.Map                 // *conn -> *partialState, while it holds an unfinished frame or message (budget.go)

	partialBytes atomic.Int64 // bytes held for unfinished client frames, all connections (budget.go)
	shedMu       sync.Mutex   // one budget enforcement at a time
}

// New builds a node from a validated configuration; backend is the
// cluster state (cluster.NewMemory for a single embedded node).
func New(cfg config.Gateway, backend cluster.Backend, m *metrics.Metrics, log *slog.Logger) (*Node, error) {
	if log == nil {
		log = slog.Default()
	}
	if m == nil {
		m = metrics.New()
	}
	n := &Node{
		cfg:       cfg,
		log:       log.With("node", cfg.NodeID),
		metrics:   m,
		tlsRate:   auth.NewBurstLimiter(2*cfg.HandshakeRatePerIP, 2*int(max(math.Floor(cfg.HandshakeRatePerIP), 1))),
		tlsIPs:    auth.NewConnCounter(2 * cfg.MaxConnsPerIP),
		startedAt: time.Now(),
		drained:   make(chan struct{}),
	}
	n.hub = newHub(n)
	if cfg.Rooms == nil && cfg.RoomsFile != "" {
		set, err := rooms.Load(cfg.RoomsFile)
		if err != nil {
			return nil, fmt.Errorf("WSGATE_ROOMS_FILE: %w", err)
		}
		cfg.Rooms = set
		n.cfg.Rooms = set
	}
	n.rooms.Store(cfg.Rooms)
	n.pres, _ = backend.(cluster.Presence)
	n.catchUpEvery.Store(catchUpPeriod)
	n.notifyWait = 100 * time.Millisecond
	n.backend = backend // until the liveness filter is built, with n.ctx
	if pc, ok := backend.(interface{ PoolConns() int }); ok {
		// Descriptors held for the backend, so that a leak check can
		// tell them from client sockets (a second node on the same
		// registry keeps the first one's gauge).
		_ = m.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "wsgate_backend_pool_connections",
			Help: "Connections to the cluster backend (Redis) held by this node.",
		}, func() float64 { return float64(pc.PoolConns()) }))
	}
	gate, err := admission.New(&cfg, admission.Options{
		Log: n.log, NotAccepting: n.notAccepting, KeySetMinInterval: keySetMinInterval,
		OnKeyFetch: func(result string) { n.metrics.KeySetFetches.WithLabelValues(result).Inc() },
	})
	if err != nil {
		return nil, err
	}
	n.gate = gate
	n.hc = newRPCClient()
	n.rpcSlots = make(chan struct{}, maxRPCPerNode)
	if cfg.UpstreamURL != "" {
		sink, err := upstream.Open(context.Background(), cfg.UpstreamURL, upstream.Options{
			Prefix: cfg.RedisPrefix, Secret: cfg.UpstreamSecret, HTTPClient: n.hc, Logger: n.log,
		})
		if err != nil {
			return nil, fmt.Errorf("WSGATE_UPSTREAM_URL: %w", err)
		}
		n.sink = sink
	}
	if err := n.openDownstream(); err != nil {
		return nil, err
	}
	var b [4]byte
	rand.Read(b[:])
	n.idPrefix = hex.EncodeToString(b[:])
	n.setPusherPrefix()
	n.sessionKey = newSessionKey()
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.lb = fleet.NewLiveness(backend, fleet.LivenessOptions{
		Self: n.cfg.NodeID, Interval: n.cfg.HeartbeatInterval, RouteTTL: n.cfg.RouteTTL,
		Remove: n.removeRoute, Go: n.goFunc, Ctx: n.ctx,
	})
	n.backend = n.lb // routes of dead nodes left out
	n.hsCtx, n.hsCancel = context.WithCancel(n.ctx)
	if len(cfg.Events) > 0 {
		if n.sink == nil {
			n.log.Warn("WSGATE_EVENTS is set but WSGATE_UPSTREAM_URL is empty: no lifecycle events are sent")
		} else if err := n.EnableEvents(n.sink); err != nil {
			return nil, err
		}
	}
	if cfg.PusherWebhookURL != "" && cfg.TransportOn("pusher") {
		n.enablePusherHooks(upstream.NewPusherWebhook(cfg.PusherWebhookURL, cfg.PusherKey, cfg.PusherSecret, n.hc))
	}
	n.status.Store(cluster.StatusActive)
	n.weight.Store(100)
	if cfg.Warmup > 0 {
		n.status.Store(cluster.StatusWarming)
		n.weight.Store(10)
	}
	p, err := netpoll.New(netpoll.Options{Logger: n.log})
	if err != nil {
		return nil, err
	}
	n.poller = p
	writers := make(chan *conn, 1<<16)
	n.writers = writers
	n.removals = make(chan cluster.Route, 1<<16)
	n.goFunc(n.removeLoop)
	for i := 0; i < max(2, runtime.GOMAXPROCS(0)); i++ {
		n.goFunc(func() { n.writeLoop(writers) })
	}
	n.apiH = api.NewHandler(n, api.NewGuard(api.GuardOptions{
		Key: n.cfg.APIKey, Dev: n.cfg.Dev, OwnHost: n.checkDevHost, Failures: n.metrics.APIKeyFailures,
		ClientIP: func(r *http.Request) string {
			req := admission.FromHTTP(r)
			return n.gate.ClientIP(&req)
		},
	}), n.log)
	n.mux, n.adminMux = n.routes()
	n.srv = n.httpServer(n.mux, publicIdleTimeout)
	if n.adminMux != nil {
		n.adminSrv = n.httpServer(n.adminMux, 120*time.Second)
	}
	return n, nil
}

// publicIdleTimeout closes an idle HTTP connection (HTTP/1 kept alive,
// or HTTP/2 without a stream) on the listen address: each costs net/http
// goroutines (two for HTTP/2) and buffers while it waits, and anyone can
// open them. The admin listener keeps the contract's 120 s. A variable
// for the tests.
var publicIdleTimeout = handshakeTimeout

func (n *Node) httpServer(h http.Handler, idle time.Duration) *http.Server {
	// HTTP/2 also without TLS (prior knowledge), for plain-text gRPC.
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:   h,
		Protocols: protos,
		// Contract §2: a request arrives whole (headers and body) within
		// 10 s, else the connection is closed; idle ones go after 120 s
		// at most (HTTP/2 too: its server takes this IdleTimeout).
		ReadHeaderTimeout: handshakeTimeout,
		ReadTimeout:       handshakeTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    maxRequestHeader,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelWarn),
	}
}

// goFunc starts a goroutine the node owns: Shutdown waits for it. Once
// Shutdown is waiting, f is not started and goFunc reports false (the
// caller releases what f would have).
func (n *Node) goFunc(f func()) bool {
	n.grMu.RLock()
	defer n.grMu.RUnlock()
	if n.grDone {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// spawn starts f through goFunc, so that Shutdown waits for it. Work a
// connection still owes (its forget, its queued acks) is not dropped if
// it comes after Shutdown's wait began (no connection is left by then,
// so in practice it never does): f then runs on a goroutine of its own.
func (n *Node) spawn(f func()) {
	if !n.goFunc(f) {
		go f()
	}
}

// startHandshake counts a handshake in flight; false once Shutdown has
// started (the handshake is refused). endHandshake is its end.
func (n *Node) startHandshake() bool {
	n.grMu.RLock()
	defer n.grMu.RUnlock()
	if n.hsDone {
		return false
	}
	n.hs.Add(1)
	return true
}

func (n *Node) endHandshake() { n.hs.Done() }

// goHandshake runs f, a handshake's backend step and setup, on a
// goroutine the node owns; false once Shutdown has started.
func (n *Node) goHandshake(f func()) bool {
	if !n.startHandshake() {
		return false
	}
	if !n.goFunc(func() { defer n.endHandshake(); f() }) {
		n.endHandshake()
		return false
	}
	return true
}

// Handler is the handler of WSGATE_LISTEN: the node's whole HTTP surface
// (WebSocket, API, metrics, web), or its public part when an admin
// listener is configured (see AdminHandler).
func (n *Node) Handler() http.Handler { return n.mux }

// Metrics returns the node's collectors.
func (n *Node) Metrics() *metrics.Metrics { return n.metrics }

// Start registers the node in the cluster, subscribes to its bus and
// starts the background loops. It does not listen; see Serve.
func (n *Node) Start(ctx context.Context) error {
	n.metrics.SetStatus(string(n.Status()))
	if err := n.backend.Subscribe(n.ctx, n.cfg.NodeID, n.onBus); err != nil {
		return fmt.Errorf("subscribe to the cluster bus: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := n.backend.RegisterNode(cctx, n.info())
	cancel()
	n.healthy.Store(err == nil)
	if err != nil {
		n.log.Warn("cluster backend not reachable at start; serving local connections and retrying", "err", err)
	}
	n.goFunc(n.heartbeatLoop)
	n.goFunc(n.sweepLoop)
	if keys := n.gate.Keys(); keys != nil {
		// The first fetch, before the node serves; if it fails the node
		// starts all the same and, until a fetch succeeds, tokens that
		// need a key of the set are refused with 503 (admission.AuthRefusal).
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if !keys.Refresh(kctx) {
			n.log.Warn("JWKS not fetched at start; tokens that need its keys are refused with 503 until it is", "url", n.cfg.JWKSURL)
		}
		cancel()
		n.goFunc(func() { keys.Run(n.ctx) })
	}
	if n.cfg.Warmup > 0 {
		n.goFunc(n.warmupLoop)
	}
	n.startDownstream()
	return nil
}

// Serve accepts HTTP on ln until Shutdown (also when Shutdown came first).
// A TCP listener, plain or TLS, is served by the node's own accept path
// (see accept.go, tlsaccept.go); any other kind by net/http alone.
func (n *Node) Serve(ln net.Listener) error {
	var err error
	_, isTCP := ln.(*net.TCPListener)
	switch {
	case n.cfg.TLSCertFile != "" && isTCP:
		err = n.serveOwnTLS(ln)
	case n.cfg.TLSCertFile != "":
		err = n.srv.ServeTLS(ln, n.cfg.TLSCertFile, n.cfg.TLSKeyFile)
	case isTCP:
		err = n.serveOwn(ln, nil)
	default:
		err = n.srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Drained is closed when a drain (signal or API) has finished; the
// process should then exit 0.
func (n *Node) Drained() <-chan struct{} { return n.drained }

// Shutdown stops accepting (new handshakes are refused, the backend step
// of those in flight is cancelled and Shutdown waits for them to end),
// closes every connection at once with 1001 and waits for every goroutine
// the node started (a drain, for graceful stops, is Drain).
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopDownstream() // no record is taken any more; those in hand finish or come again
	n.grMu.Lock()
	n.hsDone = true
	n.grMu.Unlock()
	n.hsCancel()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_ = n.srv.Shutdown(sctx)
	if n.adminSrv != nil {
		_ = n.adminSrv.Shutdown(sctx)
	}
	cancel()
	n.hs.Wait()
	for _, c := range n.hub.all() {
		c.close(1001, "node shutting down")
	}
	// Give close frames a moment to leave, then cut what is left.
	deadline := time.Now().Add(time.Second)
	for n.hub.count() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range n.hub.all() {
		c.teardown("shutdown")
	}
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	n.events.stop(ectx)
	n.pusherHooks.stop(ectx)
	cancel()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	n.retire(rctx)
	cancel()
	n.cancel() // ends the writers (the channel stays open: a late kick may still send on it)
	n.grMu.Lock()
	n.grDone = true
	n.grMu.Unlock()
	n.wg.Wait()
	n.poller.Close()
	if n.sink != nil {
		_ = n.sink.Close()
	}
	if n.pusherSink != nil {
		_ = n.pusherSink.Close()
	}
	n.hc.CloseIdleConnections()
	return nil
}

// retire removes the node's record for good: a heartbeat in flight is
// waited for and no later one writes the record again (a heartbeat
// recreates a record it finds gone, which after a drain would leave a
// draining node listed until it is found dead).
func (n *Node) retire(ctx context.Context) {
	n.recordMu.Lock()
	n.retired = true
	n.recordMu.Unlock()
	_ = n.backend.RemoveNode(ctx, n.cfg.NodeID)
}

// Status is the node's current lifecycle status.
func (n *Node) Status() cluster.NodeStatus { return n.status.Load().(cluster.NodeStatus) }

func (n *Node) setStatus(s cluster.NodeStatus) {
	n.status.Store(s)
	n.metrics.SetStatus(string(s))
}

// Ready reports whether the node is ready (/readyz): accepting
// connections and done warming up.
func (n *Node) Ready() bool {
	return n.Status() == cluster.StatusActive && n.accepting()
}

// accepting reports whether the node takes new handshakes: not draining,
// backend reachable. A warming node accepts (the allocator sends it a
// share in proportion to its weight).
func (n *Node) accepting() bool {
	return n.healthy.Load() && !n.draining.Load()
}

// notAccepting says why the node takes no handshake ("" when it does).
func (n *Node) notAccepting() string {
	if n.accepting() {
		return ""
	}
	return n.notReadyReason()
}

func (n *Node) info() cluster.NodeInfo {
	published, delivered := n.messageCounts()
	return cluster.NodeInfo{
		ID:          n.cfg.NodeID,
		URL:         n.cfg.AdvertiseURL,
		APIURL:      fleet.APIURL(n.cfg.AdvertiseURL, n.cfg.AdminListen),
		Status:      n.Status(),
		Weight:      int(n.weight.Load()),
		Connections: n.hub.count(),
		Load:        fleet.CPULoad(),
		StartedAt:   n.startedAt.UnixMilli(),
		Heartbeat:   time.Now().UnixMilli(),
		Version:     Version,
		IDPrefix:    n.idPrefix,
		Published:   published,
		Delivered:   delivered,
	}
}

// newID returns a cluster-unique id: the node's random prefix and a counter.
func (n *Node) newID() string { return n.formatID(n.idSeq.Add(1)) }

func (n *Node) formatID(seq uint64) string {
	var b [40]byte
	var h [16]byte
	hx := strconv.AppendUint(h[:0], seq, 16)
	out := append(b[:0], n.idPrefix...)
	for i := len(hx); i < 12; i++ {
		out = append(out, '0')
	}
	return string(append(out, hx...))
}

// bctx bounds one backend call made on behalf of a request.
func (n *Node) bctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, 4*time.Second)
}

// observe records a backend call's latency and error.
func (n *Node) observe(op string, start time.Time, err error) {
	n.metrics.BackendLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		n.metrics.BackendErrors.WithLabelValues(op).Inc()
	}
}

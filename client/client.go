package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// Client is a reconnecting wsgate client. Create it with New, run it with
// Run, stop it with Close. All methods are safe for concurrent use.
type Client struct {
	cfg  Config
	log  *slog.Logger
	http *http.Client        // allocator calls
	rnd  func(n int64) int64 // jitter source, [0, n)
	now  func() time.Time    // clock of connection lifetimes
	ids  atomic.Uint64       // request ids
	// tokenExp is the exp (Unix s) of the token in use, 0 when unknown.
	tokenExp atomic.Int64
	st       stats

	mu        sync.Mutex
	closed    bool
	closedCh  chan struct{}
	runCancel context.CancelFunc // of the active Run
	runDone   chan struct{}      // closed when the active Run returns
	sess      *session           // the live connection, nil between connections
	sessReady chan struct{}      // closed when sess becomes non-nil

	seqMu    sync.Mutex
	lastSeq  int64            // highest reliable seq delivered (or Config.Since)
	hasSeq   bool             // lastSeq is known: dial with since
	ackedSeq int64            // highest seq acknowledged to a server
	unacked  int              // messages delivered since the last ack
	roomSeq  map[string]int64 // per reliable room: highest seq delivered (or skipped by a gap)
}

type stats struct {
	dials, connects, reconnects  atomic.Int64
	messages, duplicates         atomic.Int64
	gaps, missed, acks, badFrame atomic.Int64
	lastClose                    atomic.Int64
	refreshes                    atomic.Int64
}

// Stats are the client's counters since New.
type Stats struct {
	Dials         int64 // handshake attempts
	Connects      int64 // connections that got a welcome
	Reconnects    int64 // connections lost that were followed by a reconnect
	Messages      int64 // messages delivered to OnMessage
	Duplicates    int64 // reliable messages dropped as already seen
	Gaps          int64 // gap frames
	Missed        int64 // reliable messages reported lost by gap frames
	Acks          int64 // ack frames sent
	BadFrames     int64 // undecodable server frames skipped
	Refreshes     int64 // tokens replaced in-band (refresh frames answered ok)
	LastCloseCode int   // close code of the last connection (1006: broken); 0 before any
	LastSeq       int64 // as LastSeq()
}

// New checks cfg, fills its defaults and returns a client that does not
// connect until Run.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:       cfg,
		log:       cfg.Logger,
		rnd:       rand.Int64N,
		now:       time.Now,
		closedCh:  make(chan struct{}),
		sessReady: make(chan struct{}),
	}
	if cfg.Allocator != "" {
		c.http = newAllocatorClient(cfg)
	}
	if cfg.Since != nil {
		c.lastSeq, c.hasSeq = *cfg.Since, true
	}
	c.roomSeq = make(map[string]int64, len(cfg.RoomSince))
	for room, seq := range cfg.RoomSince {
		c.roomSeq[room] = seq
	}
	return c, nil
}

// LastSeq is the highest reliable seq delivered (or skipped by a gap), or
// Config.Since before any: the resume point of the next connection. Save
// it to resume in a later process.
func (c *Client) LastSeq() int64 {
	c.seqMu.Lock()
	defer c.seqMu.Unlock()
	return c.lastSeq
}

// RoomSeqs are the client's positions in the reliable rooms it has seen:
// room -> highest seq delivered (or skipped by a gap). The next
// connection resumes each with room_since. Save them to resume in a later
// process (Config.RoomSince).
func (c *Client) RoomSeqs() map[string]int64 {
	c.seqMu.Lock()
	defer c.seqMu.Unlock()
	return maps.Clone(c.roomSeq)
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	return Stats{
		Dials:         c.st.dials.Load(),
		Connects:      c.st.connects.Load(),
		Reconnects:    c.st.reconnects.Load(),
		Messages:      c.st.messages.Load(),
		Duplicates:    c.st.duplicates.Load(),
		Gaps:          c.st.gaps.Load(),
		Missed:        c.st.missed.Load(),
		Acks:          c.st.acks.Load(),
		BadFrames:     c.st.badFrame.Load(),
		Refreshes:     c.st.refreshes.Load(),
		LastCloseCode: int(c.st.lastClose.Load()),
		LastSeq:       c.LastSeq(),
	}
}

// Close acknowledges what was delivered, closes the connection with 1000,
// stops Run and waits for it to return (so no goroutine of the client is
// left). Later calls fail with ErrClosed. Idempotent; it must not be called
// from a handler (it waits for the goroutine that runs handlers).
func (c *Client) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.closedCh)
	}
	cancel, done := c.runCancel, c.runDone
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Run connects and keeps the client connected until ctx is done, Close is
// called, or the server says to stop. It returns nil after Close,
// ctx.Err() when ctx ends, a *CloseError for the close codes whose action
// is "stop" (1000, 1008, 1009, 4003, 4009), and a *HandshakeError for a
// handshake refused with 400, 401, 403 or another non-retryable status.
//
// Reconnects follow protocol.CloseAction: 4001 reconnects within 250 ms
// (to the redirect URL if one came), 4401 gets a new Token and reconnects
// within 250 ms, everything else (1001, 4008, 4429, broken connections,
// refused handshakes 429/503, allocator errors) waits the backoff, plus
// Retry-After when the server sent one. Handlers run on Run's goroutine.
func (c *Client) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.runDone != nil:
		c.mu.Unlock()
		return ErrRunning
	}
	c.runCancel, c.runDone = cancel, done
	c.mu.Unlock()

	err := c.loop(ctx)
	if c.isClosed() {
		err = nil
	}
	c.emitState(StateClosed, err)

	c.mu.Lock()
	c.runCancel, c.runDone = nil, nil
	c.mu.Unlock()
	close(done)
	return err
}

// retry is the reconnect bookkeeping of one Run.
type retry struct {
	attempt  int    // backoff exponent
	quick    int    // "at once" reconnects since the last healthy connection
	redirect string // URL of the next dial, from a redirect frame
	target   string // the node of the last dial
	tIndex   int    // the transport of the next dial (Config.Transports)
	tTried   int    // transports that failed in a row in this round
}

// nextTransport moves to the next transport after a failed dial and says
// whether to dial it at once (at the same node): false once every
// transport failed in a row, the round then starting again from the
// first after the backoff.
func (c *Client) nextTransport(r *retry) bool {
	n := len(c.cfg.Transports)
	r.tIndex = (r.tIndex + 1) % n
	r.tTried++
	if r.tTried >= n {
		r.tIndex, r.tTried = 0, 0
		return false
	}
	r.redirect = r.target
	return true
}

func (c *Client) loop(ctx context.Context) error {
	c.emitState(StateConnecting, nil)
	var r retry
	for {
		conn, w, err := c.connect(ctx, &r)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if c.nextTransport(&r) {
				c.log.Info("wsgate client: trying the next transport", "err", err, "transport", c.cfg.Transports[r.tIndex])
				continue
			}
			var he *HandshakeError
			if errors.As(err, &he) && !he.Retryable() {
				return err
			}
			wait := c.backoff(&r)
			var ae *AllocatorError
			if errors.As(err, &ae) {
				wait += ae.RetryAfter
			} else if he != nil {
				wait += he.RetryAfter
			}
			c.log.Warn("wsgate client: connect failed", "err", err, "retry_in", wait)
			c.emitState(StateReconnecting, err)
			if !sleep(ctx, wait) {
				return ctx.Err()
			}
			continue
		}

		r.tIndex, r.tTried = 0, 0 // the next dial tries the first transport again
		res := c.serve(ctx, conn, w)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if res.healthy {
			r.attempt, r.quick = 0, 0
		}
		var wait time.Duration
		switch protocol.CloseAction(res.code) {
		case protocol.ActionStop:
			return &CloseError{Code: res.code, Reason: res.reason}
		case protocol.ActionNow, protocol.ActionRefreshToken:
			if r.quick < maxQuick {
				r.quick++
				wait = time.Duration(c.rnd(int64(quickJitter) + 1))
			} else {
				wait = c.backoff(&r)
			}
		default:
			wait = c.backoff(&r)
		}
		if res.redirect != "" {
			r.redirect = res.redirect
			wait += min(res.redirectAfter, c.cfg.MaxBackoff)
		}
		c.st.reconnects.Add(1)
		c.log.Info("wsgate client: disconnected", "code", res.code, "reason", res.reason, "retry_in", wait, "redirect", res.redirect)
		c.emitState(StateReconnecting, res.err)
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

func (c *Client) backoff(r *retry) time.Duration {
	d := backoff(r.attempt, c.cfg.MinBackoff, c.cfg.MaxBackoff, c.rnd)
	r.attempt++
	return d
}

// connect picks the URL (redirect, else allocator, else URL), gets a token
// and dials.
func (c *Client) connect(ctx context.Context, r *retry) (FrameConn, *Welcome, error) {
	target := r.redirect
	r.redirect = ""
	if target == "" && c.cfg.Allocator != "" {
		a, err := c.allocate(ctx)
		switch {
		case err == nil:
			target = a.URL
		case c.cfg.URL != "" && ctx.Err() == nil:
			c.log.Warn("wsgate client: allocator failed, using URL", "err", err, "url", c.cfg.URL)
		default:
			return nil, nil, err
		}
	}
	if target == "" {
		target = c.cfg.URL
	}
	r.target = target
	opts := DialOptions{
		TokenVia:         c.cfg.TokenVia,
		Format:           c.cfg.Format,
		LocalAddr:        c.cfg.LocalAddr,
		HandshakeTimeout: c.cfg.HandshakeTimeout,
		WriteTimeout:     c.cfg.WriteTimeout,
		IdleTimeout:      c.cfg.IdleTimeout,
		ReadBufferSize:   c.cfg.ReadBufferSize,
		Compression:      c.cfg.Compression,
		Since:            c.since(),
		Device:           c.cfg.Device,
		RoomSince:        c.RoomSeqs(),
	}
	if c.cfg.Token != nil {
		tok, err := c.cfg.Token(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("wsgate: Token: %w", err)
		}
		opts.Token = tok
		var exp int64
		if t := tokenExp(tok); !t.IsZero() {
			exp = t.Unix()
		}
		c.tokenExp.Store(exp)
	} else {
		opts.User = c.cfg.User
	}
	c.st.dials.Add(1)
	if t := c.cfg.Transports[r.tIndex]; t != WebSocket {
		return dialStream(ctx, target, t, opts)
	}
	return Dial(ctx, target, opts)
}

func (c *Client) since() *int64 {
	c.seqMu.Lock()
	defer c.seqMu.Unlock()
	if !c.hasSeq {
		return nil
	}
	s := c.lastSeq
	return &s
}

func (c *Client) emitState(s State, err error) {
	if h := c.cfg.Handlers.OnState; h != nil {
		h(s, err)
	}
}

// setSession publishes s to the requests waiting for a connection.
func (c *Client) setSession(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sess = s
	close(c.sessReady)
}

// clearSession withdraws s (if still current) from new requests.
func (c *Client) clearSession(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == s {
		c.sess = nil
		c.sessReady = make(chan struct{})
	}
}

// waitSession returns the live connection, waiting for one if needed.
func (c *Client) waitSession(ctx context.Context) (*session, error) {
	for {
		c.mu.Lock()
		s, ready, closed := c.sess, c.sessReady, c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if s != nil {
			return s, nil
		}
		select {
		case <-ready:
		case <-c.closedCh:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// dialStream is DialStream as a FrameConn (a nil *StreamConn is no conn).
func dialStream(ctx context.Context, target string, t Transport, opts DialOptions) (FrameConn, *Welcome, error) {
	sc, w, err := DialStream(ctx, target, t, opts)
	if err != nil {
		return nil, nil, err
	}
	return sc, w, nil
}

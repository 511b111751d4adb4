package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// closeWait is how long a close from our side waits for the server's echo
// before the socket is closed anyway.
const closeWait = time.Second

// session is one live connection of a Client. Its reader is the goroutine
// of Run; a helper goroutine sends the delayed acks and closes the
// connection when Run's context ends. Both are gone when serve returns.
type session struct {
	c       *Client
	conn    FrameConn
	started time.Time
	done    chan struct{} // closed when the reader has finished
	ackKick chan struct{} // arms the AckDelay timer
	ackMu   sync.Mutex    // one ack flush at a time
	closing atomic.Bool   // our close is under way: deliver nothing more
	// deliverMu is held by the reader while it delivers a message, so that
	// the final ack of a close covers every message already handed over.
	deliverMu sync.Mutex
	wg        sync.WaitGroup

	mu      sync.Mutex
	ended   bool
	pending map[string]chan answer // requests by id
	pings   map[float64]chan error // pings by ts
	lastTS  float64

	refreshKick chan struct{} // the expiring frame came (reader to helper)
	refreshed   chan bool     // a refresh ended (refresh goroutine to helper)

	// Helper goroutine only.
	refreshing  bool
	lastRefresh time.Time

	// Reader goroutine only.
	gotMessage    bool
	redirect      string
	redirectAfter time.Duration
}

// sessionResult is how a connection ended.
type sessionResult struct {
	code          int    // close code; 1006 when the connection broke
	reason        string // close reason or the error
	err           error  // cause, for OnState
	healthy       bool   // lived long enough to reset the backoff
	redirect      string // URL of a redirect frame received
	redirectAfter time.Duration
}

// serve runs one connection until it ends, from Run's goroutine.
func (c *Client) serve(ctx context.Context, conn FrameConn, w *Welcome) sessionResult {
	s := &session{
		c:           c,
		conn:        conn,
		started:     c.now(),
		done:        make(chan struct{}),
		ackKick:     make(chan struct{}, 1),
		refreshKick: make(chan struct{}, 1),
		refreshed:   make(chan bool),
		pending:     make(map[string]chan answer),
		pings:       make(map[float64]chan error),
	}
	c.st.connects.Add(1)
	// The server never assigned a seq above inbox_seq: a higher resume
	// point means the cluster lost its state (Redis without persistence)
	// and its seqs start again; follow it, or new messages would be taken
	// for duplicates.
	c.seqMu.Lock()
	if c.hasSeq && w.InboxSeq < c.lastSeq {
		c.lastSeq = w.InboxSeq
		c.ackedSeq = min(c.ackedSeq, w.InboxSeq)
	}
	// The same for each reliable room: a position above the room's seq
	// means its history was lost; the room's seq is the base (contract 12).
	for room, seq := range w.Rooms {
		if pos, ok := c.roomSeq[room]; !ok || seq < pos {
			c.roomSeq[room] = seq
		}
	}
	c.seqMu.Unlock()
	c.log.Info("wsgate client: connected", "url", w.URL, "node", w.Node, "conn", w.ConnID, "user", w.User, "inbox_seq", w.InboxSeq)
	c.setSession(s)
	c.emitState(StateConnected, nil)
	if h := c.cfg.Handlers.OnWelcome; h != nil {
		h(*w)
	}
	s.wg.Add(1)
	go s.helper(ctx)
	if c.needAck() {
		s.flushAck() // an ack that did not make it out before (or Config.Since)
	}

	res := s.readLoop()

	c.clearSession(s)
	close(s.done)
	s.wg.Wait()
	conn.Close()
	s.failPending()
	res.healthy = s.gotMessage || c.now().Sub(s.started) > stableAfter
	res.redirect, res.redirectAfter = s.redirect, s.redirectAfter
	c.st.lastClose.Store(int64(res.code))
	if h := c.cfg.Handlers.OnClose; h != nil {
		h(res.code, res.reason)
	}
	return res
}

func (s *session) readLoop() sessionResult {
	for {
		f, err := s.conn.ReadFrame()
		if err != nil {
			if errors.Is(err, ErrBadFrame) {
				s.c.st.badFrame.Add(1)
				s.c.log.Warn("wsgate client: skipped a server frame", "err", err)
				continue
			}
			var ce *CloseError
			switch {
			case errors.As(err, &ce):
				return sessionResult{code: ce.Code, reason: ce.Reason, err: ce}
			case s.closing.Load():
				return sessionResult{code: protocol.CloseNormal, reason: "closed by client"}
			}
			return sessionResult{code: 1006, reason: err.Error(), err: err}
		}
		s.handle(f)
	}
}

func (s *session) handle(f *protocol.ServerFrame) {
	c := s.c
	switch f.Type {
	case protocol.TypeMessage:
		s.onMessage(f)
	case protocol.TypeReply:
		var err error
		if !f.OK {
			err = &ReplyError{Code: "refused"}
			if f.Error != nil {
				err = &ReplyError{Code: f.Error.Code, Message: f.Error.Message}
			}
		}
		if !s.answer(f.ID, f.Result, err) {
			c.log.Debug("wsgate client: reply to no pending request", "id", f.ID)
		}
	case protocol.TypeError:
		// Error frames carry no id: one pending request is surely the one
		// refused; with several, nobody can tell.
		if !s.answerSingle(&ReplyError{Code: f.Code, Message: f.Message}) {
			c.log.Warn("wsgate client: error frame", "code", f.Code, "message", f.Message)
			if h := c.cfg.Handlers.OnError; h != nil {
				h(protocol.ErrorBody{Code: f.Code, Message: f.Message})
			}
		}
	case protocol.TypeJoined, protocol.TypeLeft:
		if h := c.cfg.Handlers.OnPresence; h != nil {
			h(PresenceEvent{Type: f.Type, Room: f.Room, User: f.User, ConnID: f.ConnID, Info: f.Info})
		}
	case protocol.TypePong:
		s.pong(f.TS)
	case protocol.TypeGap:
		c.st.gaps.Add(1)
		c.st.missed.Add(f.Missed)
		if f.Target != nil && f.Target.Type == protocol.TargetRoom {
			room := f.Target.ID
			c.log.Warn("wsgate client: room messages lost", "room", room, "from", f.From, "to", f.To, "missed", f.Missed)
			if h := c.cfg.Handlers.OnRoomGap; h != nil {
				h(room, f.From, f.To, f.Missed)
			}
			c.seqMu.Lock()
			if f.To > c.roomSeq[room] {
				c.roomSeq[room] = f.To
			}
			c.seqMu.Unlock()
			return
		}
		c.log.Warn("wsgate client: reliable messages lost", "from", f.From, "to", f.To, "missed", f.Missed)
		if h := c.cfg.Handlers.OnGap; h != nil {
			h(f.From, f.To, f.Missed)
		}
		// from..to will never come: resume after them.
		c.seqMu.Lock()
		if f.To > c.lastSeq {
			c.lastSeq, c.hasSeq = f.To, true
		}
		c.seqMu.Unlock()
	case protocol.TypeExpiring:
		select {
		case s.refreshKick <- struct{}{}:
		default:
		}
	case protocol.TypeRedirect:
		s.redirect = f.URL
		s.redirectAfter = time.Duration(max(f.RetryAfterMS, 0)) * time.Millisecond
	}
}

// onRoomMessage delivers a reliable room message (called with deliverMu
// held, which it releases): only when newer than the room's position,
// which it then moves. Room history is not acknowledged.
func (s *session) onRoomMessage(m protocol.Message) {
	c := s.c
	defer s.deliverMu.Unlock()
	c.seqMu.Lock()
	dup := m.Seq <= c.roomSeq[m.Target.ID]
	c.seqMu.Unlock()
	if dup {
		c.st.duplicates.Add(1)
		return
	}
	c.st.messages.Add(1)
	if h := c.cfg.Handlers.OnMessage; h != nil {
		h(m)
	}
	c.seqMu.Lock()
	c.roomSeq[m.Target.ID] = m.Seq
	c.seqMu.Unlock()
}

// onMessage delivers a message; a reliable one only when it is newer than
// every seq seen (older ones are duplicates of a resume), and it is counted
// for the next ack after OnMessage returned.
func (s *session) onMessage(f *protocol.ServerFrame) {
	c := s.c
	s.gotMessage = true
	m := f.AsMessage()
	s.deliverMu.Lock()
	if s.closing.Load() {
		s.deliverMu.Unlock()
		return // not delivered, not acknowledged: it comes again on resume
	}
	if m.Seq > 0 && m.Target.Type == protocol.TargetRoom {
		s.onRoomMessage(m)
		return
	}
	if m.Seq > 0 && m.Seq <= c.LastSeq() {
		s.deliverMu.Unlock()
		c.st.duplicates.Add(1)
		return
	}
	c.st.messages.Add(1)
	if h := c.cfg.Handlers.OnMessage; h != nil {
		h(m)
	}
	if m.Seq == 0 {
		s.deliverMu.Unlock()
		return
	}
	c.seqMu.Lock()
	c.lastSeq, c.hasSeq = m.Seq, true
	c.unacked++
	n := c.unacked
	c.seqMu.Unlock()
	s.deliverMu.Unlock()
	if n >= c.cfg.AckEvery {
		s.flushAck()
	} else if n == 1 {
		s.kickAck()
	}
}

func (c *Client) needAck() bool {
	c.seqMu.Lock()
	defer c.seqMu.Unlock()
	return c.hasSeq && c.lastSeq > c.ackedSeq
}

func (s *session) kickAck() {
	select {
	case s.ackKick <- struct{}{}:
	default:
	}
}

// flushAck sends a cumulative ack for everything delivered, if anything is
// unacknowledged.
func (s *session) flushAck() {
	c := s.c
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	c.seqMu.Lock()
	seq := c.lastSeq
	need := c.hasSeq && seq > c.ackedSeq
	if need {
		c.unacked = 0
	}
	c.seqMu.Unlock()
	if !need {
		return
	}
	if err := s.conn.WriteFrame(&protocol.ClientFrame{Type: protocol.TypeAck, Seq: seq}); err != nil {
		c.log.Debug("wsgate client: ack not sent", "seq", seq, "err", err)
		return // sent again on the next connection
	}
	c.st.acks.Add(1)
	c.seqMu.Lock()
	c.ackedSeq = max(c.ackedSeq, seq)
	c.seqMu.Unlock()
}

// helper sends the delayed acks and, when Run's context ends, closes the
// connection politely: final ack, close 1000, the echo or closeWait.
func (s *session) helper(ctx context.Context) {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	// The refresh timer (see refresh.go).
	refreshT := time.NewTimer(time.Hour)
	refreshT.Stop()
	defer refreshT.Stop()
	arm := func() {
		if at := s.refreshAt(); !at.IsZero() {
			refreshT.Reset(max(at.Sub(s.c.now()), minRefreshGap))
		}
	}
	arm()
	for {
		select {
		case <-s.done:
			return
		case <-s.refreshKick:
			s.startRefresh(ctx)
		case <-refreshT.C:
			s.startRefresh(ctx)
		case ok := <-s.refreshed:
			// After a refused refresh, the expiring frame or the close
			// at exp (4401: reconnect with a new token) comes next.
			s.refreshing = false
			if ok {
				arm()
			}
		case <-s.ackKick:
			if !armed {
				armed = true
				timer.Reset(s.c.cfg.AckDelay)
			}
		case <-timer.C:
			armed = false
			s.flushAck()
		case <-ctx.Done():
			s.c.clearSession(s)
			s.closing.Store(true)
			s.deliverMu.Lock() // wait for a delivery under way
			s.deliverMu.Unlock()
			s.flushAck()
			s.conn.WriteClose(protocol.CloseNormal, "")
			timer.Reset(closeWait)
			select {
			case <-s.done:
			case <-timer.C:
				s.conn.Close()
				<-s.done
			}
			return
		}
	}
}

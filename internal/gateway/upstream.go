package gateway

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/upstream"
	"github.com/wsgate/wsgate/protocol"
)

// Client send frames (contract section 13).
const (
	// upstreamDeadline bounds one send (claim, sink write, answer) and one
	// rpc: past it the client is answered unavailable.
	upstreamDeadline = 5 * time.Second
	// sendDedupTTL is how long an accepted send's id is remembered per
	// user, cluster-wide.
	sendDedupTTL = 10 * time.Minute
	// maxQueuedSends bounds the sends of one connection waiting for the
	// sink. A send past it is answered unavailable at once.
	maxQueuedSends = 64
)

// info is the token's info claim, nil when absent.
func (c *conn) info() []byte {
	if cl := c.claims(); cl != nil {
		return cl.Info
	}
	return nil
}

// handleSend checks a send frame and queues it for the connection's send
// worker: the records of one connection reach the sink in frame order, and
// neither the event loop nor the inbound goroutine waits for the sink.
func (c *conn) handleSend(cf *protocol.ClientFrame) {
	if c.n.sink == nil {
		c.replyRefused(cf.ID, protocol.ErrForbidden, "no upstream is configured (WSGATE_UPSTREAM_URL)")
		return
	}
	if !auth.AllowSend(c.claims(), cf.Event) {
		c.replyRefused(cf.ID, protocol.ErrForbidden, "the token's send claim does not allow event "+strconv.Quote(cf.Event))
		return
	}
	c.mu.Lock()
	x := c.extra()
	if len(x.sendq) >= maxQueuedSends {
		c.mu.Unlock()
		c.replyRefused(cf.ID, protocol.ErrUnavailable, "too many sends waiting for the upstream; retry")
		return
	}
	x.sendq = append(x.sendq, queuedSend{cf: cf, deadline: time.Now().Add(upstreamDeadline)})
	start := !x.sending
	x.sending = true
	c.mu.Unlock()
	if start && !c.n.goFunc(c.runSends) {
		c.mu.Lock()
		x.sendq, x.sending = nil, false
		c.mu.Unlock()
		c.replyRefused(cf.ID, protocol.ErrUnavailable, "node shutting down")
	}
}

// queuedSend is a send frame waiting for its connection's send worker,
// with the time by which it must be answered: the 5 s of the contract run
// from the frame's arrival, also for a send queued behind others.
type queuedSend struct {
	cf       *protocol.ClientFrame
	deadline time.Time
}

// sendBlockFor is how long a failed send of a connection holds back its
// later ids (see runSends) without being retried: a client that retries
// in order retries it first and gets it through at the latest once its
// claim, if the claim's answer was lost, can be taken over (ClaimLease,
// plus a send's 5 s); one that gave it up is not blocked for longer.
const sendBlockFor = cluster.ClaimLease + upstreamDeadline

// errSendBlocked: an earlier send of the connection failed and was not
// accepted since.
type errSendBlocked string

func (e errSendBlocked) Error() string {
	return "send " + strconv.Quote(string(e)) + " of this connection is not accepted yet; retry it first, then this one"
}

// runSends forwards the queued sends one after the other. When one fails,
// the sends queued behind it are answered unavailable without being tried,
// and so is every later send with another id until the failed one is
// accepted (or not retried for sendBlockFor): a client retrying them in
// order keeps its order, also when its retries of the later ones arrive
// after the failed one was answered.
func (c *conn) runSends() {
	for {
		c.mu.Lock()
		x := c.x
		if x == nil || len(x.sendq) == 0 || c.state >= stClosing {
			if x != nil {
				x.sendq, x.sending = nil, false
				c.dropIdleExtraLocked()
			}
			c.mu.Unlock()
			return
		}
		q := x.sendq[0]
		x.sendq[0] = queuedSend{}
		x.sendq = x.sendq[1:]
		cf := q.cf
		var err error
		if x.sendBlock != "" && x.sendBlock != cf.ID && time.Since(x.sendBlockAt) < sendBlockFor {
			err = errSendBlocked(x.sendBlock)
		}
		c.mu.Unlock()
		if err == nil {
			err = c.forward(cf, q.deadline)
		}
		c.mu.Lock()
		switch {
		case err == nil:
			if x.sendBlock == cf.ID {
				x.sendBlock = ""
			}
		case errors.As(err, new(errSendBlocked)):
		default:
			if x.sendBlock == "" || x.sendBlock == cf.ID || time.Since(x.sendBlockAt) >= sendBlockFor {
				x.sendBlock, x.sendBlockAt = cf.ID, time.Now()
			}
		}
		c.mu.Unlock()
		if err != nil {
			c.replyRefused(cf.ID, protocol.ErrUnavailable, err.Error())
			c.mu.Lock()
			behind := x.sendq
			x.sendq = nil
			c.mu.Unlock()
			for _, b := range behind {
				c.replyRefused(b.cf.ID, protocol.ErrUnavailable, "an earlier send of this connection failed; retry in order")
			}
			continue
		}
		c.reply(cf.ID, nil, 0)
	}
}

// errSendLate: the send waited its whole 5 s behind earlier sends of its
// connection; it is answered unavailable untried (the client retries).
var errSendLate = errors.New("no answer from the upstream within 5 s (earlier sends of this connection were still waiting); retry")

// errSendInFlight: the same send id is being forwarded right now (by this
// node or another one after a retry).
var errSendInFlight = errors.New("a send with this id is still being forwarded; retry")

// forward hands one send to the sink unless the user's same id was
// accepted in the last 10 minutes. The id is claimed in the cluster backend
// first (cluster-wide, so a retry landing on another node is seen), and
// marked accepted only after the sink accepted the record.
func (c *conn) forward(cf *protocol.ClientFrame, deadline time.Time) error {
	n := c.n
	if !time.Now().Before(deadline) {
		return errSendLate
	}
	ctx, cancel := context.WithDeadline(n.ctx, deadline)
	defer cancel()
	key := sendKey(c.user, cf.ID)
	kc, err := n.claimSend(ctx, key)
	if err != nil {
		return err
	}
	if !kc.Claimed {
		return nil // accepted before: answered ok, not forwarded again
	}
	rec := upstream.Record{
		Type: "message", ID: kc.ID, User: c.user, ConnID: c.connID(), Node: n.cfg.NodeID,
		Device: c.deviceName(), TS: time.Now().UnixMilli(),
		ClientMsgID: cf.ID, Event: cf.Event, Data: cf.Data, Info: c.info(),
	}
	if err := n.writeUpstream(ctx, []upstream.Record{rec}); err != nil {
		rctx, rcancel := n.bctx(n.ctx)
		_ = n.backend.ReleaseKey(rctx, key) // a retry forwards it again (same record id)
		rcancel()
		return fmt.Errorf("upstream unavailable: %w", err)
	}
	sctx, scancel := n.bctx(n.ctx)
	if err := n.backend.StoreKey(sctx, key, []byte("1"), sendDedupTTL); err != nil {
		// The record is accepted; only a retry of this id (after a lost
		// reply) would forward it a second time, with the same record id.
		c.logger().Warn("send accepted but its id not remembered", "id", cf.ID, "err", err)
	}
	scancel()
	return nil
}

// claimSend claims a send's key. A claim whose answer did not come may
// have been made: it is released (best effort), so that the client's
// retry claims it at once instead of after ClaimLease. A claim in flight
// (the same id being forwarded, or such a claim whose release was lost
// too) is waited for until the send's deadline: its outcome is the
// answer, or the claim is taken over once free.
func (n *Node) claimSend(ctx context.Context, key string) (cluster.KeyClaim, error) {
	delay := 50 * time.Millisecond
	for {
		kc, err := n.backend.ClaimKey(ctx, key, "send", n.newID(), sendDedupTTL)
		if err != nil {
			rctx, rcancel := n.bctx(n.ctx)
			_ = n.backend.ReleaseKey(rctx, key)
			rcancel()
			return kc, fmt.Errorf("cluster backend unavailable: %w", err)
		}
		if kc.Claimed || kc.Answer != nil {
			return kc, nil
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return kc, errSendInFlight
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// sendKey is the backend key of a user's send id (lengths first, so that
// no two (user, id) pairs share a key).
func sendKey(user, id string) string {
	return "send:" + strconv.Itoa(len(user)) + ":" + user + ":" + id
}

// writeUpstream writes records to the sink and counts the outcome.
func (n *Node) writeUpstream(ctx context.Context, recs []upstream.Record) error {
	start := time.Now()
	err := n.sink.Write(ctx, recs)
	n.metrics.UpstreamLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		n.metrics.UpstreamErrors.Inc()
		n.log.Warn("upstream write failed", "records", len(recs), "err", err)
		return err
	}
	for i := range recs {
		n.metrics.UpstreamRecords.WithLabelValues(recs[i].Type).Inc()
	}
	return nil
}

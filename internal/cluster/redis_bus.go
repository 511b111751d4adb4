package cluster

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bus on Redis Pub/Sub: node ID listens on P:bus:node:ID and P:bus:all
// (and, on Redis Cluster, on sharded channels: see shardBus).
// Pub/Sub forgets: a message published while a subscriber is disconnected
// is lost to it (reliable messages go through the inbox instead).
const (
	// busIdle: a subscription that received nothing for this long sends a
	// PING; one more idle period without any reply means the connection is
	// dead (even half-open) and the subscription is rebuilt.
	busIdle = 5 * time.Second
	// busBackoff bounds the pause between reconnect attempts.
	busBackoffMin = 100 * time.Millisecond
	busBackoffMax = 2 * time.Second
)

// Send implements Backend: PUBLISH to each named node's channel (a node
// named twice gets one copy), pipelined.
func (r *Redis) Send(ctx context.Context, nodes []string, payload []byte) error {
	sharded := r.busPublishSharded()
	channels := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if ch := r.busChannel(n, sharded); !slices.Contains(channels, ch) {
			channels = append(channels, ch)
		}
	}
	if len(channels) == 0 {
		return nil
	}
	return r.publishes.call(ctx, r, "send", r.publishBatch, &publishReq{channels: channels, payload: payload, sharded: sharded})
}

// SendEach implements Backend: one PUBLISH per message, in order, in one
// pipeline (shared with concurrent sends).
func (r *Redis) SendEach(ctx context.Context, msgs []BusMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	sharded := r.busPublishSharded()
	q := &publishReq{channels: make([]string, len(msgs)), payloads: make([][]byte, len(msgs)), sharded: sharded}
	for i, m := range msgs {
		q.channels[i], q.payloads[i] = r.busChannel(m.Node, sharded), m.Payload
	}
	return r.publishes.call(ctx, r, "send", r.publishBatch, q)
}

// publishMany sends one payload per channel, in order, pipelined.
//
// A PUBLISH that reached no subscriber is not sent again: its count says
// nothing certain (a subscriber on a replica, or on another Redis Cluster
// node, hears the message though the master counts it 0), and a resend
// would deliver a non-reliable message twice. A node whose subscription
// broke is told so when it is restored (Subscribe's nil payload) and
// catches its connections up from the inbox instead.
func (r *Redis) publishMany(ctx context.Context, channels []string, payloads [][]byte) error {
	c, err := r.publisher(ctx)
	if err != nil {
		return err
	}
	if len(channels) == 1 {
		return c.Publish(ctx, channels[0], payloads[0]).Err()
	}
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, ch := range channels {
			p.Publish(ctx, ch, payloads[i])
		}
		return nil
	})
	return err
}

// publisher is where PUBLISH goes (publishCluster routes Redis Cluster's
// sends). In Redis Cluster every classic PUBLISH of this deployment goes
// through one node, the master of the slot of redisKeys.busRoute: PUBLISH
// reaches subscribers on every node through the cluster bus anyway, and
// with a single entry point one publisher's messages to a subscriber
// (targeted or broadcast) cannot overtake each other on different
// cluster-bus links.
func (r *Redis) publisher(ctx context.Context) (redis.Cmdable, error) {
	if cc, ok := r.c.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, r.k.busRoute())
	}
	return r.c, nil
}

// Broadcast implements Backend: one PUBLISH to the all-nodes channel, or
// one SPUBLISH to each bucket's (sharded Redis Cluster).
func (r *Redis) Broadcast(ctx context.Context, payload []byte) error {
	q := &publishReq{channels: []string{r.k.busAll()}, payload: payload}
	if r.busPublishSharded() {
		q.sharded, q.channels = true, make([]string, busBuckets)
		for b := range q.channels {
			q.channels[b] = r.shard.all(b)
		}
	}
	return r.publishes.call(ctx, r, "broadcast", r.publishBatch, q)
}

// redisSub is one Subscribe call: a go-redis PubSub on the node's two
// channels and the goroutine that reads it.
type redisSub struct {
	r        *Redis
	node     string
	sharded  bool // SSUBSCRIBE (Redis Cluster), not SUBSCRIBE
	channels []string
	handle   func([]byte)
	ctx      context.Context
	cancel   context.CancelFunc

	mu sync.Mutex
	ps *redis.PubSub // replaced when a dead connection is rebuilt
}

// Subscribe implements Backend. It returns once Redis confirmed both
// channels (messages sent after that are delivered), or an error. A
// goroutine then calls handle for each message, in order, until ctx ends or
// the backend is closed; messages arriving after that are dropped. The
// subscription survives Redis restarts and failovers: go-redis reconnects
// and resubscribes, and a connection silent for two idle periods despite a
// PING is replaced.
func (r *Redis) Subscribe(ctx context.Context, node string, handle func(payload []byte)) error {
	if r.shard != nil {
		return r.subscribeCluster(ctx, node, handle)
	}
	_, err := r.subscribe(ctx, node, false, []string{r.k.busNode(node), r.k.busAll()}, handle)
	return err
}

// subscribe is one subscription on channels (sharded or classic).
func (r *Redis) subscribe(ctx context.Context, node string, sharded bool, channels []string, handle func([]byte)) (*redisSub, error) {
	s := &redisSub{
		r:        r,
		node:     node,
		sharded:  sharded,
		channels: channels,
		handle:   handle,
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		s.cancel()
		return nil, errClosed
	}
	r.subs[s] = struct{}{}
	r.wg.Add(1) // here, so that Close never waits while a Subscribe is still adding
	r.mu.Unlock()

	var early []*redis.Message
	err := r.do(s.ctx, "subscribe", true, func(ctx context.Context) error {
		s.open(ctx)
		early = early[:0]
		return s.awaitSubscribed(ctx, &early)
	})
	if err != nil {
		s.cancel()
		s.closePS()
		r.forget(s)
		r.wg.Done()
		return nil, err
	}
	context.AfterFunc(s.ctx, s.closePS)
	go s.run(early)
	return s, nil
}

func (r *Redis) forget(s *redisSub) {
	r.mu.Lock()
	delete(r.subs, s)
	r.mu.Unlock()
}

// open replaces the PubSub with a new one on the same channels.
func (s *redisSub) open(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps != nil {
		_ = s.ps.Close()
	}
	s.ps = s.newPubSub(ctx)
}

// newPubSub subscribes a new PubSub to the channels. A sharded one
// connects to the master of the channels' slot, as go-redis knows it.
func (s *redisSub) newPubSub(ctx context.Context) *redis.PubSub {
	if s.sharded {
		return s.r.c.SSubscribe(ctx, s.channels...)
	}
	return s.r.c.Subscribe(ctx, s.channels...)
}

// subscribed reports a confirmation of one of the channels.
func subscribed(kind string) bool { return kind == "subscribe" || kind == "ssubscribe" }

func (s *redisSub) closePS() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps != nil {
		_ = s.ps.Close()
	}
}

func (s *redisSub) current() *redis.PubSub {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ps
}

// awaitSubscribed reads until Redis confirmed every channel, keeping any
// message that came in between.
func (s *redisSub) awaitSubscribed(ctx context.Context, early *[]*redis.Message) error {
	ps := s.current()
	for confirmed := 0; confirmed < len(s.channels); {
		msg, err := ps.ReceiveTimeout(ctx, redisReadTimeout)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if subscribed(m.Kind) {
				confirmed++
			}
		case *redis.Message:
			*early = append(*early, m)
		}
	}
	return nil
}

func (s *redisSub) run(early []*redis.Message) {
	defer s.r.wg.Done()
	defer s.r.forget(s)
	for _, m := range early {
		s.deliver(m)
	}
	var (
		pinged    bool // a PING is out and nothing came back since
		failing   error
		backoff   = busBackoffMin
		lost      bool // the connection broke: messages may have been lost
		confirmed int  // channels subscribed again since
	)
	for {
		msg, err := s.current().ReceiveTimeout(context.Background(), busIdle)
		if s.ctx.Err() != nil {
			return
		}
		if err == nil {
			if failing != nil {
				s.r.log.Info("bus subscription restored", "node", s.node)
				failing = nil
			}
			pinged, backoff = false, busBackoffMin
			moved := false
			switch m := msg.(type) {
			case *redis.Message:
				s.deliver(m)
			case *redis.Subscription:
				if lost && subscribed(m.Kind) {
					if confirmed++; confirmed == len(s.channels) {
						// Subscribed again: whatever was published
						// meanwhile did not reach this node.
						lost, confirmed = false, 0
						s.deliverLost()
					}
				}
				// Redis unsubscribes sharded channels itself when their
				// slot leaves the master (resharding, failover).
				moved = m.Kind == "sunsubscribe"
			}
			if !moved {
				continue
			}
			err = errShardMoved
		}
		if isTimeout(err) && !pinged {
			pinged = true
			pctx, cancel := context.WithTimeout(s.ctx, redisWriteTimeout)
			err = s.current().Ping(pctx)
			cancel()
			if err == nil {
				continue
			}
			pinged = false // the failed PING made go-redis reconnect
		} else if isTimeout(err) {
			// Silent after a PING: rebuild rather than trust the socket.
			s.rebuild()
			pinged = false
		}
		lost, confirmed = true, 0
		if cc, ok := s.r.c.(*redis.ClusterClient); ok && s.sharded {
			// The channels' master may have changed: go-redis reconnects
			// to the one its slot map names.
			cc.ReloadState(s.ctx)
		}
		if failing == nil {
			s.r.log.Warn("bus subscription broken, reconnecting", "node", s.node, "err", err)
		}
		failing = err
		if !sleepCtx(s.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, busBackoffMax)
		var re redis.Error
		if errors.As(err, &re) || errors.Is(err, errShardMoved) {
			// Redis answered with an error (e.g. NOPERM for a SUBSCRIBE
			// refused after an ACL change, MOVED for an SSUBSCRIBE to a
			// former master) or unsubscribed us: go-redis will not
			// subscribe again by itself on a healthy connection, so
			// start over.
			s.rebuild()
		}
	}
}

// rebuild opens a new PubSub unless the subscription is ending.
func (s *redisSub) rebuild() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return
	}
	_ = s.ps.Close()
	s.ps = s.newPubSub(s.ctx)
}

func (s *redisSub) deliver(m *redis.Message) {
	if s.ctx.Err() == nil {
		s.handle([]byte(m.Payload))
	}
}

// deliverLost tells the handler that messages may have been lost.
func (s *redisSub) deliverLost() {
	if s.ctx.Err() == nil {
		s.handle(nil)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var _ Backend = (*Redis)(nil)

// ErrNotReplicated is returned by AppendInbox when RedisOptions.Replicas is
// set and fewer replicas than that confirmed the write within a second. The
// message is stored on the master (the AppendResult that comes with the
// error is filled in) but could be lost if the master failed now. It wraps
// ErrUnavailable.
var ErrNotReplicated = fmt.Errorf("%w: write not confirmed by enough replicas", ErrUnavailable)

// RedisOptions configure NewRedis. Zero values take the documented defaults.
type RedisOptions struct {
	// URL names the deployment:
	//
	//	redis://[[user]:password@]host:port[/db]      standalone (rediss:// for TLS;
	//	                                              go-redis query options allowed)
	//	host:port                                     standalone
	//	redis://[[user]:password@]h1:p1,h2:p2[/0]     Redis Cluster seeds (also rediss://)
	//	h1:p1,h2:p2                                   Redis Cluster seeds
	//	redis-cluster://h1:p1[,h2:p2...]              Redis Cluster, even with one seed
	//	redis-sentinel://[[user]:password@]s1:p1[,s2:p2...]/mastername[?db=N&sentinel_password=P]
	//	                                              Sentinel: the sentinels' addresses and the
	//	                                              master's name; the password is the data
	//	                                              nodes' one, sentinel_password the sentinels'
	//
	// Every command is bounded: dial 2 s, read and write 2 s each, wait for a
	// pooled connection 3 s, and the caller's context.
	URL string
	// Prefix starts every key and channel (default "wsgate"), so several
	// deployments can share one Redis.
	Prefix string
	// Replicas, when > 0, makes AppendInbox wait (WAIT n 1000) until that
	// many replicas have the message before it returns; fewer within a
	// second give ErrNotReplicated. 0 = no wait (asynchronous replication:
	// a failover can lose the last acknowledged messages).
	Replicas int
	// NodeTTL is the lifetime of a node record that no heartbeat refreshes
	// (default 5 minutes). Readers judge liveness by the Heartbeat field;
	// the TTL only collects records that nobody removed. Keep it longer
	// than the age at which survivors RemoveNode a silent node, so that
	// they still see it and clean up its room interest.
	NodeTTL time.Duration
	// OpTimeout bounds a call whose context has no deadline (default 5 s).
	OpTimeout time.Duration
	// Logger receives connection trouble of the bus (default slog.Default()).
	Logger *slog.Logger
}

// Defaults of RedisOptions.
const (
	DefaultRedisPrefix = "wsgate"
	DefaultNodeTTL     = 5 * time.Minute
	DefaultOpTimeout   = 5 * time.Second
)

// Lifetimes of derived keys.
const (
	// keySlack is added to a route or room-interest TTL for the lifetime of
	// the key that holds the entry. Correctness comes from each entry's own
	// expiry; the key TTL only collects garbage, and the slack keeps a write
	// with a shorter TTL from cutting short entries of other nodes.
	keySlack = 10 * time.Minute
	// minSeqLifetime: a user's seq and ack keys live max(inbox TTL, 7 days)
	// after the last append. The inbox TTL alone would be enough for the
	// messages (they are gone by then), but clients keep their last seq
	// across sessions: a seq restarting at 1 while a client still resumes
	// with since=41 would hide messages 1..41 from it. A week of silence is
	// the longest that can happen.
	minSeqLifetime = 7 * 24 * time.Hour
)

// Redis is the clustered Backend on Redis (standalone, Cluster or
// Sentinel), with the key layout described at redisKeys. It is safe for
// concurrent use; Close stops its subscriptions and closes the client.
//
// Every error caused by Redis being unreachable or not answering in time
// wraps ErrUnavailable. Calls that are safe to repeat are retried twice on
// such errors within the caller's deadline; AppendInbox, Heartbeat, Send and
// Broadcast are retried only when the command surely did not run (refused
// dial, pool timeout, LOADING, READONLY, ...).
type Redis struct {
	c   redis.UniversalClient
	k   redisKeys
	opt RedisOptions
	log *slog.Logger

	mu         sync.Mutex
	closed     bool
	registered map[string]bool // nodes registered through this backend
	subs       map[*redisSub]struct{}
	wg         sync.WaitGroup
	connects   connectBatcher
	joins      joinBatcher
	appends    scriptBatcher // AppendInbox without WAIT
	publishes  publishBatcher
	acks       ackBatcher
	shard      *shardBus                  // Redis Cluster: sharded Pub/Sub; nil otherwise
	confirms   map[string]*masterConfirms // by master address (redis_confirm.go)
}

// NewRedis connects to the deployment that opt.URL names. It fails only for
// a bad URL: if Redis does not answer now, it logs a warning and returns the
// backend, whose calls fail with ErrUnavailable until Redis is back.
func NewRedis(ctx context.Context, opt RedisOptions) (*Redis, error) {
	if opt.URL == "" {
		return nil, errors.New("redis url: empty")
	}
	if opt.Prefix == "" {
		opt.Prefix = DefaultRedisPrefix
	}
	if opt.NodeTTL <= 0 {
		opt.NodeTTL = DefaultNodeTTL
	}
	if opt.OpTimeout <= 0 {
		opt.OpTimeout = DefaultOpTimeout
	}
	if opt.Replicas < 0 {
		return nil, fmt.Errorf("redis replicas: %d is negative", opt.Replicas)
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	redisLogOnce.Do(func() { redis.SetLogger(goRedisLogger{}) })
	c, err := newRedisClient(opt.URL)
	if err != nil {
		return nil, err
	}
	r := &Redis{
		c:          c,
		k:          redisKeys{p: opt.Prefix},
		opt:        opt,
		log:        opt.Logger.With("component", "cluster.redis"),
		registered: map[string]bool{},
		subs:       map[*redisSub]struct{}{},
	}
	if _, ok := c.(*redis.ClusterClient); ok {
		r.shard = newShardBus(opt.Prefix)
	}
	if err := r.Ping(ctx); err != nil {
		r.log.Warn("redis does not answer yet", "err", err)
	} else {
		r.refreshBusMode(ctx)
	}
	return r, nil
}

// Client returns the underlying go-redis client, for diagnostics and tests.
func (r *Redis) Client() redis.UniversalClient { return r.c }

// Ping implements Backend.
func (r *Redis) Ping(ctx context.Context) error {
	return r.do(ctx, "ping", true, func(ctx context.Context) error {
		return r.c.Ping(ctx).Err()
	})
}

// Close stops every subscription, waits for their goroutines and closes
// the client. It is idempotent.
// PoolConns is the number of connections the client holds to Redis: its
// command and pipeline pools (which grow under load and keep idle
// connections) and its Pub/Sub connections.
func (r *Redis) PoolConns() int {
	s := r.c.PoolStats()
	n := s.TotalConns + s.PubSubStats.Active
	if s.PipelineStats != nil {
		n += s.PipelineStats.TotalConns
	}
	return int(n)
}

func (r *Redis) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for s := range r.subs {
		s.cancel()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return r.c.Close()
}

// do runs fn with the call's deadline, retries it while that is safe, and
// wraps its error. idempotent says whether fn may run twice.
func (r *Redis) do(ctx context.Context, op string, idempotent bool, fn func(ctx context.Context) error) error {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		// A deadline passed before the call could start (a batch queued
		// behind a hung one) is Redis not answering in time: unavailable,
		// as the same deadline passing during the call is.
		return r.wrap(op, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opt.OpTimeout)
		defer cancel()
	}
	var err error
	for attempt := 0; ; attempt++ {
		if err = fn(ctx); err == nil {
			return nil
		}
		if attempt == 2 || !(notExecuted(err) || idempotent && unavailable(err)) {
			break
		}
		t := time.NewTimer(time.Duration(25<<attempt) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return r.wrap(op, err)
		case <-t.C:
		}
	}
	return r.wrap(op, err)
}

func (r *Redis) wrap(op string, err error) error {
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("cluster: redis %s: %w", op, errClosed)
	}
	if unavailable(err) {
		return fmt.Errorf("%w: redis %s: %w", ErrUnavailable, op, err)
	}
	return fmt.Errorf("cluster: redis %s: %w", op, err)
}

// unavailable reports whether err comes from Redis being unreachable, slow
// or temporarily unable to serve, rather than from the request.
func unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, io.EOF) {
		return transientReply(re.Error())
	}
	return true // network, timeout, pool, sentinel or cluster discovery errors
}

// transientReply reports error replies that mean "not now" rather than
// "wrong request".
func transientReply(msg string) bool {
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "NOREPLICAS", "MOVED", "ASK", "ERR max number of clients"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// notExecuted reports errors after which the command surely did not run,
// so that even a write that must not run twice can be retried.
func notExecuted(err error) bool {
	if errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return false
}

// errPastDeadline: a script found its caller's deadline passed and did
// nothing.
var errPastDeadline = fmt.Errorf("%w: the call reached redis after its deadline", ErrUnavailable)

var redisLogOnce sync.Once

// goRedisLogger sends go-redis's own log lines (reconnects, sentinel
// master changes) to slog.Default() at debug level, so that a node's
// stderr stays JSON lines. go-redis has one logger per process.
type goRedisLogger struct{}

func (goRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}

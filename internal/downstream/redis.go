package downstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/cluster"
)

// A Redis stream source (contract section 20):
//
//	redis://host:port/db?stream=NAME&group=GROUP[&claim_idle=30s]
//
// The group (default "wsgate") is created at the stream's start (0,
// MKSTREAM) when missing; each node reads with XREADGROUP as the consumer
// named by its node id, and XACKs an entry once it was handled. An entry's
// value is its field "publish". Refused entries are appended to NAME:dead
// (field "record": {"error","record","id"}), once per entry id even when
// the entry comes again, then acknowledged.
//
// Takeover: every second a node XAUTOCLAIMs the entries idle for
// claim_idle (30 s) in other consumers' pending lists (a dead or stuck
// node's), and at start it handles its own pending list (a restart after a
// crash). A node keeps the entries it holds from going idle (XCLAIM
// JUSTID every claim_idle/3), so that a slow record (a retry while the
// backend is away) is not taken from a live node.
//
// Order across nodes: entries are spread over the consumers, so two
// entries naming the same target may be in two nodes' hands at once. Before
// an entry is handled, the node reads the group's pending entries older
// than it (XPENDING, and XRANGE for the values it has not seen) and waits
// until those naming one of its targets are acknowledged: an entry is
// never published before an older one of the same target, on any node.
// The pending list is bounded by the nodes' in-flight bounds, and nothing
// older than a read entry can join it later (a group delivers in stream
// order), so one read of it per batch is enough.

// redisOpts is what a redis:// source URL names.
type redisOpts struct {
	clientURL string // without the source's query options
	stream    string
	group     string
	claimIdle time.Duration
}

// DefaultGroup is the consumer group of a Redis source without group=.
const DefaultGroup = "wsgate"

// DefaultClaimIdle is how long an entry stays in a consumer's pending list
// untouched before another node claims it (contract: 30 s).
const DefaultClaimIdle = 30 * time.Second

func redisTarget(u *url.URL) (redisOpts, error) {
	o := redisOpts{group: DefaultGroup, claimIdle: DefaultClaimIdle}
	c := *u
	q := c.Query()
	o.stream = q.Get("stream")
	if o.stream == "" {
		return o, errors.New("source: a redis source needs ?stream=NAME")
	}
	if q.Has("group") {
		if o.group = q.Get("group"); o.group == "" {
			return o, errors.New("source: empty group")
		}
	}
	if q.Has("claim_idle") {
		d, err := time.ParseDuration(q.Get("claim_idle"))
		if err != nil || d < 100*time.Millisecond {
			return o, fmt.Errorf("source: claim_idle %q must be a duration of at least 100ms", q.Get("claim_idle"))
		}
		o.claimIdle = d
	}
	q.Del("stream")
	q.Del("group")
	q.Del("claim_idle")
	c.RawQuery = q.Encode()
	probe, err := cluster.NewRedisClient(c.String())
	if err != nil {
		return o, fmt.Errorf("source %w", err)
	}
	_ = probe.Close() // nothing was dialled yet
	o.clientURL = c.String()
	return o, nil
}

// redisSource consumes one stream in one consumer group.
type redisSource struct {
	*core
	opts     redisOpts
	c        redis.UniversalClient
	consumer string
	dead     string // the dead-letter stream
	keySrc   string // the source part of default idempotency keys

	acks  chan ackReq // to ackLoop
	ackWG sync.WaitGroup

	mu      sync.Mutex
	held    map[string]time.Time // entries in hand (lanes and claims) since
	targets map[string][]string  // targets of other entries (order guard)
}

// redisClient parses a redis source URL and makes its client (nothing
// is dialled yet).
func redisClient(u *url.URL) (redisOpts, redis.UniversalClient, error) {
	o, err := redisTarget(u)
	if err != nil {
		return o, nil, err
	}
	c, err := cluster.NewRedisClient(o.clientURL)
	if err != nil {
		return o, nil, fmt.Errorf("source %w", err)
	}
	return o, c, nil
}

func openRedis(u *url.URL, opt Options) (Source, error) {
	o, c, err := redisClient(u)
	if err != nil {
		return nil, err
	}
	db := strings.Trim(u.Path, "/")
	return &redisSource{
		core:     newCore("redis:"+o.stream, opt),
		opts:     o,
		c:        c,
		consumer: opt.NodeID,
		dead:     o.stream + ":dead",
		keySrc:   "redis/" + u.Host + "/" + db + "/" + o.stream,
		held:     map[string]time.Time{},
		targets:  map[string][]string{},
		acks:     make(chan ackReq, maxAckBatch),
	}, nil
}

func (s *redisSource) Name() string { return s.name }
func (s *redisSource) Close() error { return s.c.Close() }

// entry is one stream entry read.
type entry struct {
	id      string
	value   []byte
	has     bool     // the entry has a value (not deleted)
	targets []string // what its value names
	guard   []string // older pending entries of the same targets
}

func toEntry(m redis.XMessage) entry {
	e := entry{id: m.ID}
	if v, ok := m.Values["publish"]; ok {
		s, _ := v.(string)
		e.value, e.has = []byte(s), true
	} else if m.Values != nil {
		e.has = true // an entry without the field: dead-lettered
	}
	e.targets = targetsOf(e.value)
	return e
}

// Run implements Source.
func (s *redisSource) Run(ctx context.Context) {
	hctx, stop := s.handleCtx(ctx)
	defer stop()
	s.ackWG.Go(s.ackLoop)
	defer s.ackWG.Wait()
	defer close(s.acks) // after the lanes and the claims: nothing acknowledges any more
	s.startLanes()
	defer s.stopLanes()
	for try := 0; !s.ensureGroup(ctx); try++ {
		if !sleep(ctx, backoff(try)) {
			return
		}
	}
	var bg sync.WaitGroup
	bg.Go(func() { s.claimLoop(ctx, hctx) })
	bg.Go(func() { s.refreshLoop(ctx) })
	bg.Go(func() { s.lagLoop(ctx) })
	// This consumer's pending entries from before (a restart after a
	// crash) before any new read: once reads start, new entries join
	// that list too.
	s.ownPending(ctx, hctx)
	s.readLoop(ctx, hctx)
	bg.Wait()
}

// ensureGroup creates the group at the stream's start if it is missing.
func (s *redisSource) ensureGroup(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.c.XGroupCreateMkStream(cctx, s.opts.stream, s.opts.group, "0").Err()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		s.log.Warn("cannot create the consumer group; retrying", "group", s.opts.group, "err", err)
		return false
	}
	s.log.Info("consuming", "stream", s.opts.stream, "group", s.opts.group, "consumer", s.consumer, "in_flight", s.opt.InFlight)
	return true
}

// readLoop reads new entries while the node has room for them and hands
// each to its target's lane.
func (s *redisSource) readLoop(ctx, hctx context.Context) {
	chunk := readChunk(s.opt.InFlight)
	for try := 0; ctx.Err() == nil; {
		// Room for a chunk at least (the backpressure): each read costs
		// an order-guard read of every pending entry, so reads of one or
		// two entries as slots free one by one would cost that much more.
		if !s.reserve(ctx, chunk) {
			return
		}
		count := min(chunk+s.free(), maxRead)
		res, err := s.c.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: s.opts.group, Consumer: s.consumer, Streams: []string{s.opts.stream, ">"},
			Count: int64(count), Block: time.Second,
		}).Result()
		if err != nil || len(res) == 0 || len(res[0].Messages) == 0 {
			s.unreserve(chunk)
			if err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil {
				if strings.Contains(err.Error(), "NOGROUP") {
					s.ensureGroup(ctx) // the stream or group was deleted
				} else if try == 0 || try%20 == 0 {
					s.log.Warn("XREADGROUP failed; retrying", "err", err)
				}
				sleep(ctx, backoff(try))
				try++
			}
			continue
		}
		try = 0
		msgs := res[0].Messages
		entries := make([]entry, len(msgs))
		for i, m := range msgs {
			entries[i] = toEntry(m)
			s.hold(entries[i].id)
		}
		s.computeGuards(hctx, entries)
		// The slots of a chunk not filled by the read.
		s.unreserve(max(chunk-len(entries), 0))
		for i := range entries {
			e := entries[i]
			if i < chunk {
				s.use()
			} else {
				// free() said there was room. Taken here, not before: a
				// record naming several targets waits for every record
				// in hand, which must not include the ones behind it.
				s.take()
			}
			s.dispatch(e.targets, func() {
				defer s.release()
				defer s.unhold(e.id)
				s.process(hctx, e)
			})
		}
	}
}

// maxRead bounds the entries of one XREADGROUP.
const maxRead = 100

// readChunk is the room a node waits for before it reads: a quarter of its
// in-flight bound (at most maxRead), so that a read brings a few dozen
// entries when the node is busy.
func readChunk(inFlight int) int { return max(1, min(inFlight/4, maxRead)) }

// process waits for the entry's guard, handles it, writes its dead
// letters and acknowledges it; an entry left unacknowledged (hctx ended)
// comes again.
func (s *redisSource) process(ctx context.Context, e entry) {
	if !e.has {
		// Deleted from the stream (trimmed) before it was handled.
		s.retryUntil(ctx, "XACK", func(ctx context.Context) error { return s.ack(ctx, e.id) })
		return
	}
	if !s.awaitGuard(ctx, e.guard) {
		return
	}
	r := Record{ID: e.id, Key: recordKey(s.keySrc, e.id), Value: e.value}
	if e.value == nil {
		r.Value = []byte{}
	}
	o, ok := s.handle(ctx, r)
	if !ok {
		return
	}
	if len(o.Dead) > 0 {
		if e.value == nil { // no field "publish"
			for i := range o.Dead {
				o.Dead[i].Record = []byte("null")
			}
		}
		if !s.retryUntil(ctx, "dead-letter write", func(ctx context.Context) error { return s.writeDead(ctx, e.id, deadJSON(o)) }) {
			return
		}
	}
	if !s.retryUntil(ctx, "XACK", func(ctx context.Context) error { return s.ack(ctx, e.id) }) {
		return
	}
	s.count(r, o)
}

// maxAckBatch bounds the entries one XACK acknowledges.
const maxAckBatch = 512

// ackReq is one entry to acknowledge; done gets the XACK's error.
type ackReq struct {
	id   string
	done chan error
}

// ack acknowledges one entry through ackLoop, with the others handled
// meanwhile: one XACK for all of them instead of one round trip each.
func (s *redisSource) ack(ctx context.Context, id string) error {
	done := make(chan error, 1)
	select {
	case s.acks <- ackReq{id: id, done: done}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err() // retried, or left to come again: an XACK twice is harmless
	}
}

// ackLoop sends the acknowledgements handed to ack: whatever waits when
// one XACK is done goes in the next.
func (s *redisSource) ackLoop() {
	batch := make([]ackReq, 0, maxAckBatch)
	ids := make([]string, 0, maxAckBatch)
	for first := range s.acks {
		batch, ids = append(batch[:0], first), append(ids[:0], first.id)
	more:
		for len(batch) < maxAckBatch {
			select {
			case r, ok := <-s.acks:
				if !ok {
					break more
				}
				batch, ids = append(batch, r), append(ids, r.id)
			default:
				break more
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.c.XAck(ctx, s.opts.stream, s.opts.group, ids...).Err()
		cancel()
		for _, r := range batch {
			r.done <- err
		}
	}
}

// deadDedupWindow is how long the dead-letter stream remembers the entry
// ids it holds: an entry that comes again within it (its XACK was lost) is
// not written twice.
const deadDedupWindow = 24 * time.Hour

// deadMaxLen bounds the dead-letter stream (XADD MAXLEN ~).
const deadMaxLen = 1_000_000

// scriptDead: KEYS dead stream, its ids (a sorted set in the same slot);
// ARGV entry id, window ms, maxlen, then the dead-letter JSONs.
var scriptDead = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]))
if redis.call('ZADD', KEYS[2], 'NX', now, ARGV[1]) == 1 then
  for i = 4, #ARGV do
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'record', ARGV[i])
  end
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 0
`)

// deadIDsKey is the sorted set of the entry ids a dead-letter stream
// holds, in the stream's Redis Cluster slot.
func deadIDsKey(stream string) string {
	if strings.Contains(stream, "{") {
		return stream + ":ids"
	}
	return "{" + stream + "}:ids"
}

func (s *redisSource) writeDead(ctx context.Context, id string, entries [][]byte) error {
	args := []any{id, deadDedupWindow.Milliseconds(), deadMaxLen}
	for _, b := range entries {
		args = append(args, b)
	}
	err := scriptDead.Run(ctx, s.c, []string{s.dead, deadIDsKey(s.dead)}, args...).Err()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return err
}

func (s *redisSource) hold(id string) {
	s.mu.Lock()
	s.held[id] = time.Now()
	s.mu.Unlock()
}

func (s *redisSource) unhold(id string) {
	s.mu.Lock()
	delete(s.held, id)
	s.mu.Unlock()
}

func (s *redisSource) holds(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.held[id]
	return ok
}

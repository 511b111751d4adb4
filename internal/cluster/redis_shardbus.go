package cluster

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sharded Pub/Sub on Redis Cluster.
//
// Classic Pub/Sub in Redis Cluster copies every PUBLISH to every node over
// the cluster bus, so more shards add no bus capacity. Sharded Pub/Sub
// (SPUBLISH/SSUBSCRIBE, Redis 7) keeps a channel on the master of its
// slot: a message costs that shard alone.
//
// The node IDs are hashed into busBuckets buckets; a bucket is one hash
// tag and so one slot, and the buckets' slots are spread evenly over the
// slot space (one per 1/busBuckets of it), hence over the masters of a
// cluster whose masters hold equal slot ranges. Node ID listens, on one
// connection to its bucket's master, on
//
//	{TAG}:node:ID   messages for node ID
//	{TAG}:all       broadcasts, for every node of the bucket
//
// so every message for a node, targeted or broadcast, goes through one
// slot: a publisher sends them in order on one connection to that
// master, and they arrive in that order. A broadcast is one SPUBLISH per
// bucket. busBuckets bounds how many masters share the bus (a 17th master
// carries none of it) and is the cost of a broadcast in commands.
//
// Rolling upgrades: nodes of the versions before this one PUBLISH and
// SUBSCRIBE classic channels (P:bus:node:ID, P:bus:all). A node of this
// version listens on both kinds (the classic subscription costs one idle
// connection when nobody uses it) and writes bus=sharded into its node
// record; it publishes sharded only while every live node record says so
// (checked at start and at every RegisterNode and Heartbeat), classic
// otherwise. So old nodes hear new ones during the upgrade, new ones hear
// everyone, and nobody gets a message twice (each publisher uses one kind
// at a time).
const busBuckets = 16

// clusterSlots is the number of hash slots of Redis Cluster.
const clusterSlots = 16384

// busModeValue is the value of the bus field of a node record written by
// a node that listens on sharded channels.
const busModeValue = "sharded"

type shardBus struct {
	tags    [busBuckets]string // hash tag of each bucket (without braces)
	sharded atomic.Bool        // publish with SPUBLISH (every live node listens sharded)
}

func newShardBus(prefix string) *shardBus {
	s := &shardBus{}
	span := clusterSlots / busBuckets
	for b := range busBuckets {
		base := prefix + ":bus:" + strconv.Itoa(b) + "."
		s.tags[b] = base + "0"
		// A prefix with a '}' in it ends the hash tag early (every bucket
		// then has one slot): the search is bounded, and falls back to ".0".
		for k := 0; k < 1<<16; k++ {
			tag := base + strconv.Itoa(k)
			if keySlot("{"+tag+"}")/span == b {
				s.tags[b] = tag
				break
			}
		}
	}
	return s
}

// bucket is the bucket of node id.
func (s *shardBus) bucket(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % busBuckets)
}

func (s *shardBus) node(id string) string { return "{" + s.tags[s.bucket(id)] + "}:node:" + id }
func (s *shardBus) all(b int) string      { return "{" + s.tags[b] + "}:all" }

// channels are the sharded channels node id listens on (one slot).
func (s *shardBus) channels(id string) []string {
	return []string{s.node(id), s.all(s.bucket(id))}
}

// keySlot is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash tag
// (the text between the first '{' and the next '}', when not empty) or of
// the whole key, modulo 16384.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) % clusterSlots
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// scriptBusSharded: KEYS index; ARGV node hash key prefix. Returns 1 when
// every live node record has bus=sharded (or there is none).
var scriptBusSharded = redis.NewScript(`
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = ARGV[1] .. id
  if redis.call('HGET', key, 'bus') ~= 'sharded' and redis.call('EXISTS', key) == 1 then return 0 end
end
return 1
`)

// refreshBusMode decides, on Redis Cluster, whether this backend
// publishes sharded: only when every live node listens sharded. On an
// error the mode stays as it was.
func (r *Redis) refreshBusMode(ctx context.Context) {
	if r.shard == nil {
		return
	}
	v, err := scriptBusSharded.Run(ctx, r.c, []string{r.k.nodeIndex()}, r.k.nodePrefix()).Int64()
	if err != nil {
		r.log.Debug("bus mode not checked", "err", err)
		return
	}
	if was := r.shard.sharded.Swap(v == 1); was != (v == 1) {
		r.log.Info("bus publish mode", "sharded", v == 1)
	}
}

// nodeBusField is what putNode adds to a node record: on Redis Cluster,
// that this node listens on sharded channels.
func (r *Redis) nodeBusField() []any {
	if r.shard == nil {
		return nil
	}
	return []any{"bus", busModeValue}
}

// busPublishSharded reports whether a send made now goes sharded.
func (r *Redis) busPublishSharded() bool { return r.shard != nil && r.shard.sharded.Load() }

// busChannel is node's channel for a send of that kind.
func (r *Redis) busChannel(node string, sharded bool) string {
	if sharded {
		return r.shard.node(node)
	}
	return r.k.busNode(node)
}

// busCmd is one publish of a batch on Redis Cluster.
type busCmd struct {
	channel string
	payload []byte
	sharded bool
	req     int // index of its call in the batch
	err     error
}

// publishCluster sends a batch on Redis Cluster: each message to the
// master of its slot (classic ones to the master of busRoute's slot, as
// before sharding), one pipeline per master, the masters in parallel. A
// message for one node always goes to one slot, and so one pipeline, in
// call order. go-redis's cluster pipeline is not used: it sends a
// pipeline again after a read error, which would deliver twice. Messages
// that surely did not run (MOVED after a failover or resharding, a
// refused dial) are sent again, in order, once the slot map is reloaded.
// Each call is answered with the first error of its messages.
func (r *Redis) publishCluster(batch []*publishReq) {
	ctx, cancel := batchCtx(batch)
	defer cancel()
	var cmds []*busCmd
	for i, q := range batch {
		for j, ch := range q.channels {
			p := q.payload
			if q.payloads != nil {
				p = q.payloads[j]
			}
			cmds = append(cmds, &busCmd{channel: ch, payload: p, sharded: q.sharded, req: i})
		}
	}
	cc := r.c.(*redis.ClusterClient)
	for attempt, pending := 0, cmds; len(pending) > 0; attempt++ {
		pending = r.publishOnce(ctx, cc, pending)
		if len(pending) == 0 || attempt == 2 {
			break
		}
		cc.ReloadState(ctx)
		if !sleepCtx(ctx, time.Duration(25<<attempt)*time.Millisecond) {
			break
		}
	}
	errs := make([]error, len(batch))
	for _, c := range cmds {
		if c.err != nil && errs[c.req] == nil {
			errs[c.req] = r.wrap("send", c.err)
		}
	}
	for i, q := range batch {
		q.finish(errs[i])
	}
}

// publishOnce sends cmds and returns those that failed without running.
func (r *Redis) publishOnce(ctx context.Context, cc *redis.ClusterClient, cmds []*busCmd) []*busCmd {
	type group struct {
		c    *redis.Client
		cmds []*busCmd
	}
	var groups []*group
	byClient := map[*redis.Client]*group{}
	for _, c := range cmds {
		key := c.channel
		if !c.sharded {
			key = r.k.busRoute()
		}
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			c.err = err
			continue
		}
		g := byClient[m]
		if g == nil {
			g = &group{c: m}
			byClient[m] = g
			groups = append(groups, g)
		}
		g.cmds = append(g.cmds, c)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(func() { publishPipeline(ctx, g.c, g.cmds) })
	}
	wg.Wait()
	var retry []*busCmd
	for _, c := range cmds {
		if c.err != nil && notExecuted(c.err) {
			retry = append(retry, c)
		}
	}
	return retry
}

// publishPipeline sends cmds to one master in order and sets their errors.
func publishPipeline(ctx context.Context, m *redis.Client, cmds []*busCmd) {
	send := func(p redis.Cmdable, c *busCmd) *redis.IntCmd {
		if c.sharded {
			return p.SPublish(ctx, c.channel, c.payload)
		}
		return p.Publish(ctx, c.channel, c.payload)
	}
	if len(cmds) == 1 {
		cmds[0].err = send(m, cmds[0]).Err()
		return
	}
	out := make([]*redis.IntCmd, len(cmds))
	_, _ = m.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range cmds {
			out[i] = send(p, c)
		}
		return nil
	})
	for i, c := range cmds {
		c.err = out[i].Err() // a broken connection fails every command it carried
	}
}

// subscribeCluster subscribes node on Redis Cluster: to its sharded
// channels and, for publishers of the versions before sharding, to its
// classic ones. Both deliver to handle, one message at a time.
func (r *Redis) subscribeCluster(ctx context.Context, node string, handle func([]byte)) error {
	var mu sync.Mutex
	h := func(p []byte) {
		mu.Lock()
		defer mu.Unlock()
		handle(p)
	}
	sharded, err := r.subscribe(ctx, node, true, r.shard.channels(node), h)
	if err != nil {
		return err
	}
	if _, err := r.subscribe(ctx, node, false, []string{r.k.busNode(node), r.k.busAll()}, h); err != nil {
		sharded.cancel()
		return err
	}
	return nil
}

// errShardMoved: Redis unsubscribed a sharded subscription itself (the
// channels' slot moved to another master).
var errShardMoved = errors.New("sharded channels unsubscribed by redis (slot moved)")

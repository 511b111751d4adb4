package cluster_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/cluster/clustertest"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// streamSub records what one node's subscription received: per
// publisher, the sequence numbers of payloads "p<publisher>:<n>", and the
// loss notices (nil payloads).
type streamSub struct {
	mu    sync.Mutex
	seqs  map[int][]int
	other map[string]int
	lost  int
}

func (s *streamSub) handle(m []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m == nil {
		s.lost++
		return
	}
	if p, n, ok := parseStream(string(m)); ok {
		s.seqs[p] = append(s.seqs[p], n)
		return
	}
	s.other[string(m)]++
}

func parseStream(m string) (pub, n int, ok bool) {
	a, b, found := strings.Cut(m, ":")
	if !found || !strings.HasPrefix(a, "p") {
		return 0, 0, false
	}
	pub, err1 := strconv.Atoi(a[1:])
	n, err2 := strconv.Atoi(b)
	return pub, n, err1 == nil && err2 == nil
}

func newStreamSub(t *testing.T, b cluster.Backend, node string) *streamSub {
	t.Helper()
	s := &streamSub{seqs: map[int][]int{}, other: map[string]int{}}
	if err := b.Subscribe(ctxTimeout(t, 2*time.Minute), node, s.handle); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *streamSub) has(m string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.other[m] > 0
}

func (s *streamSub) losses() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// checkOrder fails unless every publisher's messages arrived in publish
// order, each at most once; it returns how many arrived.
func (s *streamSub) checkOrder(t *testing.T, node string) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0
	for p, seqs := range s.seqs {
		total += len(seqs)
		for i := 1; i < len(seqs); i++ {
			if seqs[i] <= seqs[i-1] {
				t.Fatalf("%s: publisher %d's message %d arrived after its message %d", node, p, seqs[i], seqs[i-1])
			}
		}
	}
	return total
}

var markerSeq atomic.Int64

// awaitMarker sends fresh markers (never sent before) from b to node
// until one arrives.
func awaitMarker(t *testing.T, b cluster.Backend, s *streamSub, node string) {
	t.Helper()
	eventually(t, 30*time.Second, node+" hears again", func() error {
		m := fmt.Sprintf("marker-%s-%d", node, markerSeq.Add(1))
		if err := b.Send(ctxTimeout(t, 2*time.Second), []string{node}, []byte(m)); err != nil {
			return err
		}
		for range 25 {
			if s.has(m) {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("%s not received", m)
	})
}

// shardNodes lists, for each master of c, the nodes whose sharded bus
// channels it holds.
func shardNodes(t *testing.T, c *redistest.ClusterServers) [][]string {
	t.Helper()
	out := make([][]string, len(c.Servers))
	for i, s := range c.Servers {
		chans, err := s.Client().PubSubShardChannels(ctxTimeout(t, 5*time.Second), "*:node:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chans {
			_, node, _ := strings.Cut(ch, ":node:")
			out[i] = append(out[i], node)
		}
	}
	return out
}

// The bus suite again on Redis Cluster with a node of the version before
// sharded Pub/Sub registered: every backend then publishes classic.
func TestRedisClusterClassicBus(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	clustertest.RunBus(t, func(t *testing.T) cluster.Backend {
		prefix := fmt.Sprintf("t%d", prefixSeq.Add(1))
		registerOldNode(t, c, prefix, "old")
		return newRedis(t, c.Seeds(), func(o *cluster.RedisOptions) { o.Prefix = prefix })
	})
}

// registerOldNode writes the node record that a node of the version
// before sharded Pub/Sub writes: no bus field.
func registerOldNode(t testing.TB, c *redistest.ClusterServers, prefix, id string) {
	t.Helper()
	admin := c.Client()
	defer admin.Close()
	ctx := ctxTimeout(t, 10*time.Second)
	if err := admin.HSet(ctx, "{"+prefix+":nodes}:n:"+id, "id", id, "heartbeat", time.Now().UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.SAdd(ctx, "{"+prefix+":nodes}:index", id).Err(); err != nil {
		t.Fatal(err)
	}
}

// Nodes' channels are spread over the three masters, and a node on each
// master gets what is sent to it.
func TestRedisClusterBusOnEveryMaster(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	b := newRedis(t, c.Seeds())
	subs := map[string]*streamSub{}
	for i := range 24 {
		node := fmt.Sprintf("n%d", i)
		subs[node] = newStreamSub(t, b, node)
	}
	for i, nodes := range shardNodes(t, c) {
		if len(nodes) == 0 {
			t.Fatalf("master %d holds the bus channels of none of 24 nodes", i)
		}
		t.Logf("master %d: %d nodes", i, len(nodes))
		node := nodes[0]
		msg := "hello-" + node
		if err := b.Send(ctxTimeout(t, 5*time.Second), []string{node}, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, node+" gets its message", func() error {
			if !subs[node].has(msg) {
				return errNotYet
			}
			return nil
		})
	}
}

// Several publisher nodes stream to several subscriber nodes while every
// master closes its sharded Pub/Sub connections (CLIENT KILL ID): each
// subscriber is told it may have lost messages, hears again, and what it
// got from each publisher is in publish order without duplicates.
func TestRedisClusterBusKilledSubscriptions(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	const (
		publishers = 3
		nodes      = 6
		perPub     = 1500
	)
	prefix := fmt.Sprintf("t%d", prefixSeq.Add(1))
	opt := func(o *cluster.RedisOptions) { o.Prefix = prefix }
	sub := newRedis(t, c.Seeds(), opt)
	names := make([]string, nodes)
	subs := make([]*streamSub, nodes)
	for i := range subs {
		names[i] = fmt.Sprintf("s%d", i)
		subs[i] = newStreamSub(t, sub, names[i])
	}
	pubs := make([]*cluster.Redis, publishers)
	for i := range pubs {
		pubs[i] = newRedis(t, c.Seeds(), opt)
	}
	var sent atomic.Int64
	killed := make(chan struct{})
	var wg sync.WaitGroup
	for p, b := range pubs {
		wg.Go(func() {
			for i := range perPub {
				// Errors (Redis refusing a connection just killed) lose
				// the message: the order of the rest is what counts.
				_ = b.Send(ctxTimeout(t, 5*time.Second), []string{names[(i+p)%nodes]}, []byte(fmt.Sprintf("p%d:%d", p, i)))
				if sent.Add(1) == publishers*perPub/3 {
					close(killed)
				}
			}
		})
	}
	<-killed
	if n := c.KillShardedSubscribers(t); n == 0 {
		t.Fatal("no sharded subscription to kill")
	}
	wg.Wait()
	total := 0
	for i, s := range subs {
		awaitMarker(t, pubs[0], s, names[i])
		eventually(t, 20*time.Second, names[i]+" is told of the loss", func() error {
			if s.losses() == 0 {
				return errNotYet
			}
			return nil
		})
		total += s.checkOrder(t, names[i])
	}
	t.Logf("%d of %d messages arrived", total, publishers*perPub)
	if total == 0 {
		t.Fatal("no stream message arrived")
	}
}

// A master restarts during a stream: its nodes are told they may have
// lost messages and hear again; order holds.
func TestRedisClusterBusMasterRestart(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	pub, subs := newStreamRig(t, c.Seeds())
	shards := shardNodes(t, c)
	victim := c.Servers[0]
	if len(shards[0]) == 0 {
		t.Fatal("master 0 holds no node's channels")
	}
	node := shards[0][0]
	s := subs[node]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var delivered atomic.Int64
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if pub.Send(ctxTimeout(t, 2*time.Second), []string{node}, []byte(fmt.Sprintf("p0:%d", i))) == nil {
				delivered.Add(1)
			} else {
				time.Sleep(20 * time.Millisecond) // the cluster is down: no busy loop
			}
		}
	})
	eventually(t, 10*time.Second, "the stream runs", func() error {
		if delivered.Load() < 100 {
			return errNotYet
		}
		return nil
	})
	victim.Stop()
	victim.Start()
	awaitMarker(t, pub, s, node)
	close(stop)
	wg.Wait()
	eventually(t, 20*time.Second, node+" is told of the loss", func() error {
		if s.losses() == 0 {
			return errNotYet
		}
		return nil
	})
	t.Logf("%d of %d sent messages arrived", s.checkOrder(t, node), delivered.Load())
}

// A rolling upgrade: a node of the version before sharded Pub/Sub
// (PUBLISH, SUBSCRIBE) and a new one. While the old one is registered
// both hear each other; once it left, the new one publishes sharded (a
// classic listener hears nothing of it) and still hears each message
// once.
func TestRedisClusterBusMixedFleet(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	const prefix = "mixed"
	registerOldNode(t, c, prefix, "old")
	admin := c.Client()
	defer admin.Close()
	ctx := ctxTimeout(t, time.Minute)
	old := subscribeRaw(t, admin, prefix+":bus:node:old", prefix+":bus:all")

	b := newRedis(t, c.Seeds(), func(o *cluster.RedisOptions) { o.Prefix = prefix })
	s := newStreamSub(t, b, "new")
	info := cluster.NodeInfo{ID: "new"}
	if err := b.RegisterNode(ctx, info); err != nil {
		t.Fatal(err)
	}
	// new -> old, and a broadcast: both hear it.
	if err := b.Send(ctx, []string{"old"}, []byte("to-old")); err != nil {
		t.Fatal(err)
	}
	if err := b.Broadcast(ctx, []byte("all-1")); err != nil {
		t.Fatal(err)
	}
	old.expect(t, "to-old", "all-1")
	// old -> new.
	if err := admin.Publish(ctx, prefix+":bus:node:new", "from-old").Err(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"all-1", "from-old"} {
		eventually(t, 10*time.Second, "the new node gets "+m, func() error {
			if !s.has(m) {
				return errNotYet
			}
			return nil
		})
	}

	// The old node leaves; at its next heartbeat the new one goes sharded.
	if err := b.RemoveNode(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Heartbeat(ctx, info); err != nil {
		t.Fatal(err)
	}
	spy := subscribeRaw(t, admin, prefix+":bus:node:new", prefix+":bus:all")
	if err := b.Send(ctx, []string{"new"}, []byte("sharded-1")); err != nil {
		t.Fatal(err)
	}
	if err := b.Broadcast(ctx, []byte("all-2")); err != nil {
		t.Fatal(err)
	}
	// Through the master that classic sends of b use: had b published
	// sharded-1 or all-2 classic, the spy would get them first.
	route, err := admin.MasterForKey(ctx, "{"+prefix+":bus}")
	if err != nil {
		t.Fatal(err)
	}
	if err := route.Publish(ctx, prefix+":bus:node:new", "spy-marker").Err(); err != nil {
		t.Fatal(err)
	}
	spy.expect(t, "spy-marker")
	awaitMarker(t, b, s, "new")
	for _, m := range []string{"sharded-1", "all-2", "all-1", "from-old"} {
		if n := s.count(m); n != 1 {
			t.Fatalf("the new node got %q %d times, want once", m, n)
		}
	}
}

func (s *streamSub) count(m string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.other[m]
}

// rawSub is a go-redis subscription of a test, as an old node holds.
type rawSub struct{ ps *redis.PubSub }

func subscribeRaw(t *testing.T, c *redis.ClusterClient, channels ...string) *rawSub {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	ps := c.Subscribe(ctx)
	t.Cleanup(func() { _ = ps.Close() })
	if err := ps.Subscribe(ctx, channels...); err != nil {
		t.Fatal(err)
	}
	for range channels {
		if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return &rawSub{ps: ps}
}

// expect reads the next messages and fails unless they are want, in order.
func (r *rawSub) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := r.ps.ReceiveMessage(ctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for %q: %v", w, err)
		}
		if m.Payload != w {
			t.Fatalf("got %q on %s, want %q", m.Payload, m.Channel, w)
		}
	}
}

// A node's bucket slot moves to another master (resharding): Redis
// unsubscribes the node's sharded subscription itself; the node is told
// it may have lost messages, subscribes on the new master, and
// publishers follow the slot (MOVED) without reordering.
func TestRedisClusterBusSlotMoved(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	prefix := fmt.Sprintf("t%d", prefixSeq.Add(1))
	opt := func(o *cluster.RedisOptions) { o.Prefix = prefix }
	sub := newRedis(t, c.Seeds(), opt)
	pub := newRedis(t, c.Seeds(), opt)
	s := newStreamSub(t, sub, "mover")
	ctx := ctxTimeout(t, time.Minute)
	var src, dst *redistest.Server
	var channel string
	for i, srv := range c.Servers {
		chans, err := srv.Client().PubSubShardChannels(ctx, "*:node:mover").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(chans) == 1 {
			src, dst, channel = srv, c.Servers[(i+1)%len(c.Servers)], chans[0]
		}
	}
	if src == nil {
		t.Fatal("no master holds the node's channel")
	}
	slot, err := src.Client().ClusterKeySlot(ctx, channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	awaitMarker(t, pub, s, "mover")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if pub.Send(ctxTimeout(t, 2*time.Second), []string{"mover"}, []byte(fmt.Sprintf("p0:%d", i))) != nil {
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	id := func(srv *redistest.Server) string {
		v, err := srv.Client().Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	srcID, dstID := id(src), id(dst)
	if n, err := src.Client().ClusterCountKeysInSlot(ctx, int(slot)).Result(); err != nil || n != 0 {
		t.Fatalf("slot %d holds %d keys (%v): the test moves it without MIGRATE", slot, n, err)
	}
	for _, step := range []struct {
		srv  *redistest.Server
		args []any
	}{
		{dst, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", srcID}},
		{src, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", dstID}},
		{dst, []any{"CLUSTER", "SETSLOT", slot, "NODE", dstID}},
		{src, []any{"CLUSTER", "SETSLOT", slot, "NODE", dstID}},
	} {
		if err := step.srv.Client().Do(ctx, step.args...).Err(); err != nil {
			t.Fatalf("%v: %v", step.args, err)
		}
	}
	eventually(t, 20*time.Second, "the node is told of the loss", func() error {
		if s.losses() == 0 {
			return errNotYet
		}
		return nil
	})
	awaitMarker(t, pub, s, "mover")
	close(stop)
	wg.Wait()
	eventually(t, 20*time.Second, "the node's channel is on the new master", func() error {
		chans, err := dst.Client().PubSubShardChannels(ctx, "*:node:mover").Result()
		if err != nil {
			return err
		}
		if len(chans) != 1 {
			return errNotYet
		}
		return nil
	})
	t.Logf("%d stream messages arrived, in order", s.checkOrder(t, "mover"))
}

// The master of a node's bucket is killed (SIGKILL) during a stream and
// its replica takes over: the node is told it may have lost messages,
// subscribes on the new master and hears again; the publisher follows the
// slot to the new master; order holds.
func TestRedisClusterBusFailover(t *testing.T) {
	t.Parallel()
	c := redistest.ClusterWithReplicas(t)
	pub, subs := newStreamRig(t, c.Seeds())
	shards := shardNodes(t, c)
	if len(shards[0]) == 0 {
		t.Fatal("master 0 holds no node's channels")
	}
	node, victim, heir := shards[0][0], c.Servers[0], c.Replicas[0]
	s := subs[node]
	awaitMarker(t, pub, s, node)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if pub.Send(ctxTimeout(t, 2*time.Second), []string{node}, []byte(fmt.Sprintf("p0:%d", i))) == nil {
				sent.Add(1)
			} else {
				time.Sleep(20 * time.Millisecond) // no busy loop while the slot has no master
			}
		}
	})
	eventually(t, 10*time.Second, "the stream runs", func() error {
		if sent.Load() < 100 {
			return errNotYet
		}
		return nil
	})
	victim.Kill()
	eventually(t, 30*time.Second, "the replica is master", func() error {
		info, err := heir.Client().Info(ctxTimeout(t, 2*time.Second), "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "role:master") {
			return errNotYet
		}
		return nil
	})
	// Every node of the lost master hears again.
	for _, n := range shards[0] {
		awaitMarker(t, pub, subs[n], n)
	}
	close(stop)
	wg.Wait()
	for _, n := range shards[0] {
		eventually(t, 20*time.Second, n+" is told of the loss", func() error {
			if subs[n].losses() == 0 {
				return errNotYet
			}
			return nil
		})
	}
	eventually(t, 20*time.Second, "the node's channels are on the new master", func() error {
		chans, err := heir.Client().PubSubShardChannels(ctxTimeout(t, 2*time.Second), "*:node:"+node).Result()
		if err != nil {
			return err
		}
		if len(chans) != 1 {
			return errNotYet
		}
		return nil
	})
	t.Logf("%d of %d sent messages arrived, in order", s.checkOrder(t, node), sent.Load())
}

// On Redis Cluster too, Close ends every goroutine the backend started,
// both subscriptions of each node included. Not parallel: the goroutine
// snapshot must not see other tests.
func TestRedisClusterNoGoroutineLeak(t *testing.T) {
	c := redistest.Cluster(t)
	ignore := goleak.IgnoreCurrent()
	b := newRedis(t, c.Seeds())
	ctx, cancel := context.WithCancel(context.Background())
	s := newStreamSub(t, b, "n1")
	if err := b.Subscribe(ctx, "n2", func([]byte) {}); err != nil {
		t.Fatal(err)
	}
	awaitMarker(t, b, s, "n1")
	if err := b.Broadcast(ctxTimeout(t, 5*time.Second), []byte("all")); err != nil {
		t.Fatal(err)
	}
	cancel() // one node's subscriptions end by their context, the other's by Close
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(context.Background(), []string{"n1"}, []byte("late")); err == nil {
		t.Fatal("Send after Close succeeded")
	}
	goleak.VerifyNone(t, ignore)
}

// newStreamRig is a subscriber backend holding the streams of 12 nodes
// (n0..n11) and a publisher backend, both under a prefix of their own.
func newStreamRig(t *testing.T, seeds string) (pub *cluster.Redis, subs map[string]*streamSub) {
	t.Helper()
	prefix := fmt.Sprintf("t%d", prefixSeq.Add(1))
	opt := func(o *cluster.RedisOptions) { o.Prefix = prefix }
	sub := newRedis(t, seeds, opt)
	pub = newRedis(t, seeds, opt)
	subs = map[string]*streamSub{}
	for i := range 12 {
		node := fmt.Sprintf("n%d", i)
		subs[node] = newStreamSub(t, sub, node)
	}
	return pub, subs
}

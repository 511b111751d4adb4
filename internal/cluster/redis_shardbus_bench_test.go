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

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// Bus throughput on a 3-master Redis Cluster: P publisher nodes (each a
// backend, C concurrent senders on it) send b.N messages of 200 bytes
// round-robin to K subscriber nodes, batch per SendEach (1: one message
// per call, as single publishes; 16: as batch publishes); the time runs until every message
// arrived. "classic" registers a node of the version before sharded
// Pub/Sub, so every backend PUBLISHes through one master (and Redis
// copies each message to every master); "sharded" is SPUBLISH to the
// master of the node's bucket. Reported: msgs/s, and Redis CPU (user+sys
// from INFO cpu) per message, summed over the masters and of the busiest.
//
//	go test -run '^$' -bench 'BenchmarkRedisClusterBus' -benchtime 200000x -count 5 ./internal/cluster/
func BenchmarkRedisClusterBus(b *testing.B) {
	c := redistest.Cluster(b)
	for _, mode := range []string{"classic", "sharded"} {
		for _, batch := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, batch), func(b *testing.B) { benchClusterBus(b, c, mode == "classic", batch) })
		}
	}
}

func benchClusterBus(b *testing.B, c *redistest.ClusterServers, classic bool, batch int) {
	const (
		publishers = 4
		senders    = 16 // per publisher
		nodes      = 12
	)
	prefix := fmt.Sprintf("bench%d", prefixSeq.Add(1))
	if classic {
		registerOldNode(b, c, prefix, "old")
	}
	opt := func(o *cluster.RedisOptions) { o.Prefix = prefix }
	var got atomic.Int64
	done := make(chan struct{})
	var want atomic.Int64
	want.Store(-1)
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("node-%d", i)
		sub := newRedis(b, c.Seeds(), opt) // one backend per node, as in a fleet
		if err := sub.Subscribe(ctxTimeout(b, time.Hour), names[i], func(m []byte) {
			if m != nil && got.Add(1) == want.Load() {
				close(done)
			}
		}); err != nil {
			b.Fatal(err)
		}
	}
	pubs := make([]*cluster.Redis, publishers)
	for i := range pubs {
		pubs[i] = newRedis(b, c.Seeds(), opt)
	}
	// Warm up: every publisher reaches every node once.
	for _, p := range pubs {
		if err := p.Send(ctxTimeout(b, 10*time.Second), names, []byte("warm-up")); err != nil {
			b.Fatal(err)
		}
	}
	warm := int64(publishers * nodes)
	for got.Load() < warm {
		time.Sleep(10 * time.Millisecond)
	}
	payload := []byte(strings.Repeat("x", 200))
	cpu0, bus0 := clusterCPU(b, c), clusterBusPublishes(b, c)
	b.ResetTimer()
	start := time.Now()
	want.Store(warm + int64(b.N))
	if b.N == 0 {
		close(done)
	}
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, p := range pubs {
		for range senders {
			wg.Go(func() {
				ctx := context.Background()
				msgs := make([]cluster.BusMessage, 0, batch)
				for {
					i := next.Add(int64(batch)) - int64(batch)
					if i >= int64(b.N) {
						return
					}
					msgs = msgs[:0]
					for j := i; j < min(i+int64(batch), int64(b.N)); j++ {
						msgs = append(msgs, cluster.BusMessage{Node: names[j%nodes], Payload: payload})
					}
					if err := p.SendEach(ctx, msgs); err != nil {
						failed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d sends failed", f)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d messages arrived", got.Load()-warm, b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cpu, bus := clusterCPU(b, c), clusterBusPublishes(b, c)
	var total, busiest float64
	shares := make([]string, len(cpu))
	for i := range cpu {
		d := cpu[i] - cpu0[i]
		total += d
		busiest = max(busiest, d)
		shares[i] = fmt.Sprintf("%.2fs", d)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(total*1e6/float64(b.N), "redis-cpu-us/msg")
	b.ReportMetric(busiest*1e6/float64(b.N), "busiest-shard-cpu-us/msg")
	b.ReportMetric(float64(bus-bus0)/float64(b.N), "cluster-bus-copies/msg")
	b.Logf("N=%d in %s; Redis CPU per master: %s", b.N, elapsed.Round(time.Millisecond), strings.Join(shares, " "))
}

// clusterCPU is used_cpu_user+used_cpu_sys of each master, in seconds.
func clusterCPU(b *testing.B, c *redistest.ClusterServers) []float64 {
	b.Helper()
	out := make([]float64, len(c.Servers))
	for i, s := range c.Servers {
		info, err := s.Client().Info(ctxTimeout(b, 5*time.Second), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			k, v, _ := strings.Cut(line, ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, _ := strconv.ParseFloat(v, 64)
				out[i] += f
			}
		}
	}
	return out
}

// clusterBusPublishes is the number of Pub/Sub messages the masters
// received over the cluster bus (CLUSTER INFO
// cluster_stats_messages_publish_received, summed).
func clusterBusPublishes(b *testing.B, c *redistest.ClusterServers) int64 {
	b.Helper()
	var n int64
	for _, s := range c.Servers {
		info, err := s.Client().ClusterInfo(ctxTimeout(b, 5*time.Second)).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "cluster_stats_messages_publish_received:"); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n
}

package cluster_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// BenchmarkRedisPresence: one op = a connection entering a room's
// presence and leaving it (AddPresence + RemovePresence, what a join and a
// leave of a presence room cost the backend), while the room holds
// `present` other connections: the cost does not grow with the room.
// Also reported: Redis memory per present connection (used_memory over
// the entries of the room, a user each, a 20-byte conn id and node id, no
// info).
//
//	go test -run XXX -bench RedisPresence -benchtime 2000x ./internal/cluster/
func BenchmarkRedisPresence(b *testing.B) {
	for _, present := range []int{0, 10_000, 100_000} {
		b.Run(fmt.Sprintf("present=%d", present), func(b *testing.B) {
			srv := redistest.Standalone(b, redistest.Options{})
			r := newRedis(b, srv.URL())
			ctx := context.Background()
			before := usedMemory(b, srv.Client())
			var wg sync.WaitGroup
			sem := make(chan struct{}, 64)
			for i := range present {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					e := cluster.PresenceEntry{User: fmt.Sprintf("user%07d", i), ConnID: fmt.Sprintf("0123456789ab%08d", i), Node: "node-a1b2c3", Device: "default"}
					if _, err := r.AddPresence(ctx, "live:1", e); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			perEntry := 0.0
			if present > 0 {
				perEntry = float64(usedMemory(b, srv.Client())-before) / float64(present)
			}
			b.ResetTimer()
			for i := range b.N {
				e := cluster.PresenceEntry{User: "bench", ConnID: "c" + strconv.Itoa(i), Node: "node-a1b2c3", Device: "default"}
				if _, err := r.AddPresence(ctx, "live:1", e); err != nil {
					b.Fatal(err)
				}
				if _, err := r.RemovePresence(ctx, "live:1", e); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/enter+leave")
			b.ReportMetric(0, "ns/op")
			if present > 0 {
				b.ReportMetric(perEntry, "B/present")
			}
		})
	}
}

func usedMemory(b *testing.B, c *redis.Client) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}

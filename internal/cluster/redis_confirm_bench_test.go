package cluster_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// BenchmarkRedisReconnectStormWithReplicas: 10,000 users, each with a
// reliable message to replay, reconnect at once through Sentinel with
// Replicas=1 (one op = the whole storm). Reported: the storm's WAIT
// commands on the master and the time per connect. The confirmations
// share rounds per master (redis_confirm.go).
//
//	go test -run XXX -bench ReconnectStorm -benchtime 3x ./internal/cluster/
func BenchmarkRedisReconnectStormWithReplicas(b *testing.B) {
	const users = 10_000
	set := redistest.Sentinel(b)
	r := newRedis(b, set.URL(), func(o *cluster.RedisOptions) { o.Replicas = 1 })
	opt := cluster.InboxOptions{Limit: 100, TTL: time.Hour}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range users {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := r.AppendInbox(ctxTimeout(b, 10*time.Second), fmt.Sprintf("storm%d", i), []byte("m"), opt); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	before := commandStats(b, set.Master.Client())["wait"]
	b.ResetTimer()
	for iter := range b.N {
		for i := range users {
			wg.Go(func() {
				route := cluster.Route{User: fmt.Sprintf("storm%d", i), ConnID: fmt.Sprintf("c%d-%d", iter, i), Node: "n1", ConnectedAt: time.Now().UnixMilli()}
				cr, err := r.Connect(ctxTimeout(b, 60*time.Second), route, time.Minute, 0, opt, cluster.ConnLimit{})
				if err != nil || cr.Unconfirmed || len(cr.Inbox.Messages) != 1 {
					b.Errorf("connect of %s: %+v, %v", route.User, cr, err)
				}
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	waits := commandStats(b, set.Master.Client())["wait"] - before
	b.ReportMetric(float64(waits)/float64(b.N), "WAIT/storm")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*users), "us/connect")
	b.ReportMetric(0, "ns/op")
}

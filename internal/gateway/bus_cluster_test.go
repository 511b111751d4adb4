package gateway

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// On Redis Cluster a node hears the bus on a sharded subscription. When
// Redis closes it, the node is told once it is subscribed again and
// catches its connections up from the inbox: a reliable message whose bus
// copy was lost arrives without a later message, a reconnect or the
// safety-net check.
func TestShardedSubscriptionLossIsCaughtUp(t *testing.T) {
	c := redistest.Cluster(t)
	pub := redisBackend(t, c.Seeds(), "shardloss", 0)
	conn := redisBackend(t, c.Seeds(), "shardloss", 0)
	l := newLostCopy(t, pub, conn, 0, "far")
	l.publish(t) // seq 2's bus copy is lost
	if n := killShardedSubscribers(t, c); n == 0 {
		t.Fatal("no sharded subscription to kill")
	}
	l.expectBoth(t)
}

// killShardedSubscribers closes, on every master, the connections with
// sharded subscriptions (CLIENT LIST's ssub > 0) and returns how many.
func killShardedSubscribers(t *testing.T, c *redistest.ClusterServers) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	killed := 0
	for _, s := range c.Servers {
		list, err := s.Client().ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			var id string
			ssub := 0
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "id":
					id = v
				case "ssub":
					ssub, _ = strconv.Atoi(v)
				}
			}
			if ssub == 0 {
				continue
			}
			if err := s.Client().Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatal(err)
			}
			killed++
		}
	}
	return killed
}

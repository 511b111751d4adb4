package gateway

import (
	"testing"

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
	if n := c.KillShardedSubscribers(t); n == 0 {
		t.Fatal("no sharded subscription to kill")
	}
	l.expectBoth(t)
}

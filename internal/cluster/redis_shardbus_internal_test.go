package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// keySlot agrees with Redis's CLUSTER KEYSLOT, hash tags included, and
// the buckets' slots are each in their own 1/busBuckets of the slot space
// (so spread evenly over masters with equal slot ranges).
func TestKeySlotAgreesWithRedis(t *testing.T) {
	t.Parallel()
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16 check value = %#x, want 0x31c3", got)
	}
	c := redistest.Cluster(t)
	admin := c.Client()
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := []string{"", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}x", "wsgate:bus:node:n1"}
	s := newShardBus("wsgate")
	for b := range busBuckets {
		keys = append(keys, s.all(b), s.node(fmt.Sprintf("n%d", b)))
		if got := keySlot(s.all(b)) / (clusterSlots / busBuckets); got != b {
			t.Errorf("bucket %d's channel %q is in slot range %d", b, s.all(b), got)
		}
	}
	for _, k := range keys {
		want, err := admin.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(k); int64(got) != want {
			t.Errorf("keySlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
	// A node's two channels share a slot (one SSUBSCRIBE, one connection).
	for i := range 100 {
		ch := s.channels(fmt.Sprintf("node-%d", i))
		if keySlot(ch[0]) != keySlot(ch[1]) {
			t.Fatalf("channels %q are in two slots", ch)
		}
	}
}

package cluster_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// When Redis drops a node's Pub/Sub connection, a message sent meanwhile
// reaches no subscriber: the sender publishes it again once the node is
// subscribed again, and the subscriber is told (a nil payload) that it may
// have missed messages.
func TestRedisBusRepairsAKilledSubscription(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	const prefix = "killsub"
	b := newRedis(t, s.URL(), func(o *cluster.RedisOptions) { o.Prefix = prefix })
	var (
		mu   sync.Mutex
		got  = map[string]int{}
		lost atomic.Int32
	)
	if err := b.Subscribe(ctxTimeout(t, time.Minute), "n1", func(m []byte) {
		if m == nil {
			lost.Add(1)
			return
		}
		mu.Lock()
		got[string(m)]++
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	admin := s.Client()
	defer admin.Close()
	ctx := ctxTimeout(t, 30*time.Second)
	channel := prefix + ":bus:node:n1"
	// Kill the subscription and send while nobody listens on the channel.
	sent := false
	for attempt := 0; attempt < 20 && !sent; attempt++ {
		if err := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		subs, err := admin.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if subs[channel] != 0 {
			continue // resubscribed already
		}
		if err := b.Send(ctx, []string{"n1"}, []byte("unheard")); err != nil {
			t.Fatal(err)
		}
		sent = true
	}
	if !sent {
		t.Fatal("never saw the channel without its subscriber")
	}
	eventually(t, 20*time.Second, "the unheard message arrives and the loss is signalled", func() error {
		mu.Lock()
		defer mu.Unlock()
		if got["unheard"] == 0 || lost.Load() == 0 {
			return errNotYet
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if got["unheard"] != 1 {
		t.Fatalf("the unheard message arrived %d times", got["unheard"])
	}
}

var errNotYet = errorString("not yet")

type errorString string

func (e errorString) Error() string { return string(e) }

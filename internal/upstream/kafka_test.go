package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaSink runs the suite against kfake: no Kafka broker can be
// installed here, and kfake speaks the Kafka protocol in-process. Down
// closes every produce connection; hang holds produce requests.
func TestKafkaSink(t *testing.T) {
	runSinkSuite(t, func(t *testing.T) *sinkHarness {
		c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(3, "up"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		var down, hang atomic.Bool
		release := make(chan struct{})
		c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if hang.Load() {
				c.SleepControl(func() { <-release })
			}
			if down.Load() {
				return nil, errors.New("broker down"), true
			}
			return nil, nil, false
		})
		return &sinkHarness{
			url:      "kafka://" + strings.Join(c.ListenAddrs(), ",") + "/up",
			received: kafkaGroupReader(t, c.ListenAddrs(), "up"),
			down:     func() { down.Store(true) }, up: func() { down.Store(false) },
			hang: func() { hang.Store(true) }, release: func() { hang.Store(false); close(release) },
		}
	})
}

// kafkaGroupReader consumes the topic in a consumer group.
func kafkaGroupReader(t *testing.T, brokers []string, topic string) func(t *testing.T) []Record {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("consumers"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var got []Record
	return func(t *testing.T) []Record {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(kr *kgo.Record) {
			var r Record
			if err := json.Unmarshal(kr.Value, &r); err != nil {
				t.Errorf("record: %v", err)
			}
			if string(kr.Key) != r.User {
				t.Errorf("record %s keyed %q, want its user %q", r.ID, kr.Key, r.User)
			}
			got = append(got, r)
		})
		return got
	}
}

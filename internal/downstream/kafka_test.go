package downstream

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaHarness is a topic of three partitions on kfake: no Kafka broker
// can be installed here, and kfake speaks the Kafka protocol (consumer
// groups and commits included) in-process. Records are keyed by their
// target id, so one target's records share a partition.
func kafkaHarness(t *testing.T) *sourceHarness {
	topic := randName("ds-")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &sourceHarness{
		url: "kafka://" + strings.Join(addrs, ",") + "/" + topic,
		produce: func(t *testing.T, values ...[]byte) {
			t.Helper()
			var recs []*kgo.Record
			for _, v := range values {
				var b struct{ Target struct{ ID string } }
				_ = json.Unmarshal(v, &b)
				recs = append(recs, &kgo.Record{Key: []byte(b.Target.ID), Value: v})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		},
		dead: func(t *testing.T) []DeadLetter {
			t.Helper()
			cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic+".dead"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var out []DeadLetter
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				fs := cl.PollFetches(ctx)
				cancel()
				n := 0
				fs.EachRecord(func(r *kgo.Record) {
					var d DeadLetter
					if err := json.Unmarshal(r.Value, &d); err != nil {
						t.Errorf("dead letter: %v", err)
					}
					out = append(out, d)
					n++
				})
				if n == 0 {
					return out
				}
			}
		},
		pending: func(*testing.T) int { return -1 },
	}
}

func TestKafkaSource(t *testing.T) {
	runSourceSuite(t, kafkaHarness)
}

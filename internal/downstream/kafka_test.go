package downstream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
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

// TestKafkaLagOwnPartitionsOnly: each node's wsgate_downstream_lag covers
// the partitions it holds, so that the nodes' gauges add up to the
// group's lag: once a second node has taken partitions from the first,
// the first no longer reports them.
func TestKafkaLagOwnPartitionsOnly(t *testing.T) {
	topic := randName("lag-")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	g := newFakeGateway()
	jobs := 0
	round := func() { // one record on each partition, then wait until all are stored
		t.Helper()
		var recs []*kgo.Record
		for p := range int32(4) {
			recs = append(recs, &kgo.Record{Partition: p, Value: body(fmt.Sprintf("u%d", p), jobs)})
			jobs++
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		await(t, 30*time.Second, "every record stored", func() (bool, string) { return g.storedCount() == jobs, g.String() })
	}
	url := "kafka://" + strings.Join(addrs, ",") + "/" + topic
	n1, _ := runSource(t, url, "n1", Options{Handler: g.handler("n1")})
	round() // n1 holds the 4 partitions and has polled each
	n2, _ := runSource(t, url, "n2", Options{Handler: g.handler("n2")})
	deadline := time.Now().Add(30 * time.Second)
	published := func(node string) int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.by[node]
	}
	for published("n2") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("n2 published nothing within 30s (%s)", g)
		}
		round()
	}
	a, b := n1.(*kafkaSource), n2.(*kafkaSource)
	lags := func(s *kafkaSource) (ps []int32) {
		s.lagMu.Lock()
		defer s.lagMu.Unlock()
		for p := range s.lags {
			ps = append(ps, p)
		}
		return ps
	}
	la, lb := lags(a), lags(b)
	if len(lb) == 0 {
		t.Fatalf("n2 reports no partition's lag although it published records")
	}
	for _, p := range lb {
		if slices.Contains(la, p) {
			t.Errorf("partition %d's lag is reported by both nodes (n1 %v, n2 %v): the sum counts it twice", p, la, lb)
		}
	}
}

// TestKafkaLagWhileEveryRecordIsRetried: the lag follows the records
// produced while the node polls nothing (its one record in hand is
// answered unavailable, again and again).
func TestKafkaLagWhileEveryRecordIsRetried(t *testing.T) {
	topic := randName("lag-")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	produce := func(from, n int) {
		t.Helper()
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, &kgo.Record{Value: body("u", from+i)})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	g := newFakeGateway()
	g.unavailable = func(Record) bool { return true }
	produce(0, 5)
	src, _ := runSource(t, "kafka://"+strings.Join(addrs, ",")+"/"+topic, "n1", Options{Handler: g.handler("n1"), InFlight: 1})
	s := src.(*kafkaSource)
	lag := func() float64 {
		var m dto.Metric
		_ = s.lag.Write(&m)
		return m.GetGauge().GetValue()
	}
	// One record polled and retried: the 4 after it wait.
	await(t, 30*time.Second, "the first lag", func() (bool, string) {
		return g.calls.Load() > 0 && lag() == 4, fmt.Sprintf("lag %v, %d calls", lag(), g.calls.Load())
	})
	produce(5, 7)
	await(t, 30*time.Second, "the lag of the records produced since", func() (bool, string) {
		return lag() == 11, fmt.Sprintf("lag %v, %d calls", lag(), g.calls.Load())
	})
}

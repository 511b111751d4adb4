package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaSink produces each record to one topic, keyed by user id (one
// user's records go to one partition and stay in order), with acks from
// every in-sync replica and the idempotent producer (a retried batch is
// not stored twice).
type kafkaSink struct {
	c *kgo.Client
}

// kafkaTarget reads kafka://host:port[,host:port...]/TOPIC.
func kafkaTarget(u *url.URL) (brokers []string, topic string, err error) {
	topic = strings.Trim(u.Path, "/")
	if topic == "" || strings.Contains(topic, "/") {
		return nil, "", errors.New("upstream url: kafka URL needs exactly one topic as its path")
	}
	if u.RawQuery != "" {
		return nil, "", errors.New("upstream url: kafka URLs take no query")
	}
	for _, b := range strings.Split(u.Host, ",") {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return nil, "", fmt.Errorf("upstream url: kafka broker %q is not host:port", b)
		}
		brokers = append(brokers, b)
	}
	return brokers, topic, nil
}

func openKafka(_ context.Context, u *url.URL, _ Options) (Sink, error) {
	brokers, topic, err := kafkaTarget(u)
	if err != nil {
		return nil, err
	}
	c, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(30*time.Second),
		kgo.ClientID("wsgate"),
	)
	if err != nil {
		return nil, fmt.Errorf("upstream kafka: %w", err)
	}
	return &kafkaSink{c: c}, nil
}

// Write produces the records and waits for all their acks, or for ctx:
// a record whose ctx ended may still be stored later (at least once).
func (s *kafkaSink) Write(ctx context.Context, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	errs := make(chan error, len(recs))
	for i := range recs {
		b, err := json.Marshal(&recs[i])
		if err != nil {
			return err
		}
		s.c.Produce(ctx, &kgo.Record{Key: []byte(recs[i].User), Value: b}, func(_ *kgo.Record, err error) {
			errs <- err
		})
	}
	for range recs {
		select {
		case err := <-errs:
			if err != nil {
				return fmt.Errorf("upstream kafka: %w", err)
			}
		case <-ctx.Done():
			return fmt.Errorf("upstream kafka: %w", ctx.Err())
		}
	}
	return nil
}

func (s *kafkaSink) Close() error {
	s.c.Close()
	return nil
}

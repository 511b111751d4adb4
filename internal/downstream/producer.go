package downstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A Producer writes records into the source a WSGATE_DOWNSTREAM_URL names,
// as the business does (wsgate bench downstream): XADD with the value in
// field "publish", a JetStream publish on SUBJ (acknowledged by the
// stream), a Kafka produce keyed by the record's key (acknowledged by
// every in-sync replica).
type Producer struct {
	name  string
	write func(ctx context.Context, recs []ProducerRecord) []error
	close func()
}

// ProducerRecord is one record to write.
type ProducerRecord struct {
	// Key is the Kafka record key (records with one key share a
	// partition: use the target's id); the other sources ignore it.
	Key   string
	Value []byte
}

// CheckProducer parses a producer URL without connecting: one source in
// WSGATE_DOWNSTREAM_URL's syntax, without {node}.
func CheckProducer(rawURL string) error {
	_, err := parseProducer(rawURL)
	return err
}

func parseProducer(rawURL string) (*url.URL, error) {
	urls := SplitURLs(rawURL)
	switch {
	case len(urls) == 0:
		return nil, errors.New("source: no source URL")
	case len(urls) > 1:
		return nil, fmt.Errorf("source: want one source URL, got %d", len(urls))
	case strings.Contains(urls[0], "{node}"):
		return nil, errors.New("source: {node} names one stream per gateway: give the stream of one node")
	}
	return parse(urls[0], "")
}

// OpenProducer connects to the source rawURL names. A JetStream stream
// that is missing is created as a node would create it (file storage,
// subject SUBJ); a Redis stream and a Kafka topic where the brokers allow
// it are created by the first write.
func OpenProducer(ctx context.Context, rawURL string) (*Producer, error) {
	u, err := parseProducer(rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "redis", "rediss":
		return openRedisProducer(ctx, u)
	case "nats", "tls":
		return openNATSProducer(ctx, u)
	default:
		return openKafkaProducer(ctx, u)
	}
}

// Name is the source's metric label ("redis:orders").
func (p *Producer) Name() string { return p.name }

// Write writes recs and returns, for each, nil once the source holds it,
// or why it may not. Records of one call are written in order (Kafka: in
// order per key).
func (p *Producer) Write(ctx context.Context, recs []ProducerRecord) []error {
	return p.write(ctx, recs)
}

// Close ends the producer's connections.
func (p *Producer) Close() { p.close() }

func openRedisProducer(ctx context.Context, u *url.URL) (*Producer, error) {
	o, c, err := redisClient(u)
	if err != nil {
		return nil, err
	}
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("source redis: %w", err)
	}
	return &Producer{
		name: "redis:" + o.stream,
		write: func(ctx context.Context, recs []ProducerRecord) []error {
			pipe := c.Pipeline()
			cmds := make([]*redis.StringCmd, len(recs))
			for i, r := range recs {
				cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: o.stream, Values: []any{"publish", r.Value}})
			}
			_, _ = pipe.Exec(ctx)
			errs := make([]error, len(recs))
			for i, cmd := range cmds {
				errs[i] = cmd.Err()
			}
			return errs
		},
		close: func() { _ = c.Close() },
	}, nil
}

func openNATSProducer(ctx context.Context, u *url.URL) (*Producer, error) {
	o, err := natsTarget(u)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(o.serverURL, nats.Name("wsgate-bench-producer"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("source nats: %w", err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384))
	if err == nil {
		_, err = js.Stream(ctx, o.stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: o.stream, Subjects: []string{o.subject}, Storage: jetstream.FileStorage})
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				err = nil
			}
		}
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("source nats: %w", err)
	}
	return &Producer{
		name: "nats:" + o.subject,
		write: func(ctx context.Context, recs []ProducerRecord) []error {
			errs := make([]error, len(recs))
			acks := make([]jetstream.PubAckFuture, len(recs))
			for i, r := range recs {
				acks[i], errs[i] = js.PublishAsync(o.subject, r.Value)
			}
			for i, a := range acks {
				if a == nil {
					continue
				}
				select {
				case <-a.Ok():
				case errs[i] = <-a.Err():
				case <-ctx.Done():
					errs[i] = ctx.Err()
				}
			}
			return errs
		},
		close: nc.Close,
	}, nil
}

func openKafkaProducer(ctx context.Context, u *url.URL) (*Producer, error) {
	o, err := kafkaTarget(u)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...), kgo.DefaultProduceTopic(o.topic), kgo.AllowAutoTopicCreation(),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	if err != nil {
		return nil, fmt.Errorf("source kafka: %w", err)
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("source kafka: %w", err)
	}
	return &Producer{
		name: "kafka:" + o.topic,
		write: func(ctx context.Context, recs []ProducerRecord) []error {
			krs := make([]*kgo.Record, len(recs))
			index := make(map[*kgo.Record]int, len(recs))
			for i, r := range recs {
				krs[i] = &kgo.Record{Key: []byte(r.Key), Value: r.Value}
				index[krs[i]] = i
			}
			errs := make([]error, len(recs))
			for _, pr := range cl.ProduceSync(ctx, krs...) { // in the order they were answered
				errs[index[pr.Record]] = pr.Err
			}
			return errs
		},
		close: cl.Close,
	}, nil
}

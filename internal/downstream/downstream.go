// Package downstream consumes publishes from the business's streams
// (contract section 20): each source of WSGATE_DOWNSTREAM_URL (a Redis
// stream, a JetStream stream, a Kafka topic) is read by the cluster as one
// consumer group, each record is handed to a Handler (the gateway's
// publish, as the server API answers it) and acknowledged in the source
// only once it was handled: published, or refused for its content and
// written to the source's dead-letter place. A record answered unavailable
// is retried with backoff and not acknowledged, so a node that dies with
// records in hand leaves them to the others (or to itself after a
// restart), and the idempotency key every record carries (its own, or its
// identity in the source) makes the second handling store and deliver
// nothing again.
//
// Order: a node handles the records of one target one after the other
// (per-target lanes, records naming several targets alone); a Redis
// stream's records are also kept in order across nodes (see redis.go);
// a Kafka partition is handled by one node at a time, in order.
// Backpressure: a node holds at most Options.InFlight records read and
// not yet acknowledged; past it, it stops reading until some are done.
package downstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/metrics"
)

// Record is one record of a source.
type Record struct {
	// ID is the record's identity in its source: the Redis stream entry
	// id, the JetStream stream sequence, or Kafka's partition/offset.
	ID string
	// Key is the idempotency key of a record without one of its own: the
	// source and ID, at most 200 bytes. A batch's message i without a key
	// uses Key + "#" + i.
	Key   string
	Value []byte
}

// ErrorBody is the contract's error object.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// DeadLetter is one refused record (or one refused message of a batch
// record) as written to the dead-letter place.
type DeadLetter struct {
	Error  ErrorBody       `json:"error"`
	Record json.RawMessage `json:"record"` // the value (the message, for a batch's message)
	ID     string          `json:"id"`     // the record's identity in the source
	Index  *int            `json:"index,omitempty"`
}

// Outcome is what handling a record came to.
type Outcome struct {
	// Retry: the record was answered unavailable (503) and is tried again
	// (its messages with their keys; those already published are answered
	// from their key).
	Retry bool
	Err   string // why, for the log, when Retry
	// Dead are the refused parts (400, 409, 413), written to the
	// dead-letter place before the record is acknowledged.
	Dead []DeadLetter
}

// Handler handles one record as the server API would answer its value.
// It is called concurrently for records of different targets.
type Handler func(ctx context.Context, r Record) Outcome

// Source is one consumed source.
type Source interface {
	// Name labels the source's metrics: scheme and stream, subject or
	// topic ("redis:orders").
	Name() string
	// Run consumes until ctx ends, then gives the records in hand up to
	// Options.Grace to finish, and returns.
	Run(ctx context.Context)
	Close() error
}

// Options configure Open.
type Options struct {
	NodeID   string  // the consumer name; replaces {node} in the URL
	InFlight int     // records a node holds unacknowledged (default 256)
	Handler  Handler // required
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	// Grace is how long records in hand may finish after Run's ctx ended
	// (default 5 s); the rest stay unacknowledged and come again.
	Grace time.Duration
}

// DefaultInFlight is Options.InFlight's default.
const DefaultInFlight = 256

func (o *Options) fill() error {
	if o.Handler == nil {
		return errors.New("downstream: no handler")
	}
	if o.InFlight <= 0 {
		o.InFlight = DefaultInFlight
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New()
	}
	if o.Grace <= 0 {
		o.Grace = 5 * time.Second
	}
	return nil
}

// SplitURLs splits WSGATE_DOWNSTREAM_URL's comma list into URLs; a Kafka
// URL's broker list (kafka://b1:9092,b2:9092/T) stays in one piece: a part
// that does not start with a scheme belongs to the one before it.
func SplitURLs(list string) []string {
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if len(out) > 0 && !strings.Contains(p, "://") {
			out[len(out)-1] += "," + p
			continue
		}
		out = append(out, p)
	}
	return out
}

// Check parses a WSGATE_DOWNSTREAM_URL without connecting, so that a bad
// one stops start-up with one clear line.
func Check(list string) error {
	urls := SplitURLs(list)
	if len(urls) == 0 {
		return errors.New("no source")
	}
	seen := map[string]bool{}
	for _, raw := range urls {
		u, err := parse(raw, "node")
		if err != nil {
			return err
		}
		if seen[u.String()] {
			return fmt.Errorf("source %q listed twice", u.Redacted())
		}
		seen[u.String()] = true
	}
	return nil
}

// Open returns the source rawURL names. It fails only for a bad URL; a
// source that is down is returned and Run waits for it.
func Open(rawURL string, opt Options) (Source, error) {
	if err := opt.fill(); err != nil {
		return nil, err
	}
	u, err := parse(rawURL, opt.NodeID)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "redis", "rediss":
		return openRedis(u, opt)
	case "nats", "tls":
		return openNATS(u, opt)
	default: // kafka
		return openKafka(u, opt)
	}
}

// parse replaces {node} and checks the URL's scheme and parts.
func parse(rawURL, node string) (*url.URL, error) {
	rawURL = strings.ReplaceAll(strings.TrimSpace(rawURL), "{node}", node)
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL and its password
		}
		return nil, fmt.Errorf("source: %v", err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("source: no host in %q", u.Redacted())
	}
	switch u.Scheme {
	case "redis", "rediss":
		_, err = redisTarget(u)
	case "nats", "tls":
		_, err = natsTarget(u)
	case "kafka":
		_, err = kafkaTarget(u)
	default:
		return nil, fmt.Errorf("source: unknown scheme %q (want redis, rediss, nats or kafka)", u.Scheme)
	}
	if err != nil {
		return nil, err
	}
	return u, nil
}

// recordKey builds the default idempotency key of a record: "ds:", the
// source, ":" and the id; a long source is replaced by its hash, so that
// the key stays within 200 bytes (the API takes 256, and a batch adds
// "#index").
func recordKey(source, id string) string {
	if len(source)+len(id) > 180 {
		h := sha256.Sum256([]byte(source))
		source = hex.EncodeToString(h[:12])
	}
	return "ds:" + source + ":" + id
}

// backoff is the wait before the next try of a record answered
// unavailable (100 ms doubling to 5 s).
func backoff(try int) time.Duration {
	d := 100 * time.Millisecond << min(try, 6)
	return min(d, 5*time.Second)
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

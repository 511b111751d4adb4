package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Options configure Open.
type Options struct {
	// Prefix is the Redis key prefix of the cluster: the default stream of
	// a redis:// sink is "<Prefix>:upstream" (default prefix "wsgate").
	Prefix string
	// Secret signs webhook requests (X-Wsgate-Signature-V2 and X-Wsgate-Signature); empty sends no
	// signature header.
	Secret string
	// HTTPClient posts webhook batches (default: a client without a
	// timeout of its own; every request is bounded by its Write context).
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Check parses a WSGATE_UPSTREAM_URL without connecting, so that a bad URL
// stops start-up with one clear line.
func Check(rawURL string) error {
	_, err := parse(rawURL)
	return err
}

// Open returns the sink rawURL names (see the package documentation and
// contract section 13). It fails only for a bad URL or a sink that refuses
// its setup (a JetStream stream that cannot be created); a sink that is
// merely down is returned, and its Writes fail until it is back.
func Open(ctx context.Context, rawURL string, opt Options) (Sink, error) {
	u, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Prefix == "" {
		opt.Prefix = "wsgate"
	}
	switch u.Scheme {
	case "redis", "rediss":
		return openRedis(ctx, u, opt)
	case "nats", "tls":
		return openNATS(ctx, u, opt)
	case "kafka":
		return openKafka(ctx, u, opt)
	default: // http, https
		return openWebhook(u, opt)
	}
}

// parse checks the scheme and the parts every sink needs.
func parse(rawURL string) (*url.URL, error) {
	rawURL = strings.TrimSpace(rawURL)
	if rawURL == "" {
		return nil, errors.New("upstream url: empty")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("upstream url: %v", redact(err))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("upstream url: no host in %q", u.Redacted())
	}
	switch u.Scheme {
	case "redis", "rediss":
		_, _, err = redisTarget(u)
	case "nats", "tls":
		_, _, err = natsTarget(u)
	case "kafka":
		_, _, err = kafkaTarget(u)
	case "http", "https":
	default:
		return nil, fmt.Errorf("upstream url: unknown scheme %q (want redis, rediss, nats, kafka, http or https)", u.Scheme)
	}
	if err != nil {
		return nil, err
	}
	return u, nil
}

// redact drops the URL text (with its password) from a url.Parse error.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// ctxErr returns err, or ctx's error wrapping it when ctx ended (a client
// library reports the deadline as an i/o timeout, sometimes a moment before
// ctx.Err is set).
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		if dl, ok := ctx.Deadline(); !ok || time.Now().Before(dl) {
			return err
		}
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return fmt.Errorf("%w (%v)", ctx.Err(), err)
}

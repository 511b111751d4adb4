package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/cluster"
)

// redisMaxLen bounds the stream: XADD ... MAXLEN ~ redisMaxLen.
const redisMaxLen = 1_000_000

// redisSink appends each record to one Redis stream as its field "record".
type redisSink struct {
	c      redis.UniversalClient
	stream string
}

// redisTarget splits the stream name off the URL and returns the URL the
// cluster's Redis client understands (without the query option "stream").
func redisTarget(u *url.URL) (clientURL, stream string, err error) {
	c := *u
	q := c.Query()
	stream = q.Get("stream")
	if q.Has("stream") && stream == "" {
		return "", "", fmt.Errorf("upstream url: empty stream")
	}
	q.Del("stream")
	c.RawQuery = q.Encode()
	probe, err := cluster.NewRedisClient(c.String())
	if err != nil {
		return "", "", fmt.Errorf("upstream %w", err)
	}
	_ = probe.Close() // nothing was dialled yet
	return c.String(), stream, nil
}

func openRedis(_ context.Context, u *url.URL, opt Options) (Sink, error) {
	clientURL, stream, err := redisTarget(u)
	if err != nil {
		return nil, err
	}
	if stream == "" {
		stream = opt.Prefix + ":upstream"
	}
	c, err := cluster.NewRedisClient(clientURL)
	if err != nil {
		return nil, fmt.Errorf("upstream %w", err)
	}
	return &redisSink{c: c, stream: stream}, nil
}

// Write sends one XADD per record in one pipeline; the stream is one key,
// so the records land in order.
func (s *redisSink) Write(ctx context.Context, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	cmds, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range recs {
			b, err := json.Marshal(&recs[i])
			if err != nil {
				return err
			}
			p.XAdd(ctx, &redis.XAddArgs{
				Stream: s.stream,
				MaxLen: redisMaxLen,
				Approx: true,
				Values: []any{"record", b},
			})
		}
		return nil
	})
	if err == nil {
		for _, c := range cmds {
			if err = c.Err(); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("upstream redis: %w", ctxErr(ctx, err))
	}
	return nil
}

func (s *redisSink) Close() error { return s.c.Close() }

package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/cluster"
)

// redisMaxLen bounds the stream: XADD ... MAXLEN ~ redisMaxLen.
const redisMaxLen = 1_000_000

// redisSink appends each record to one Redis stream as its field "record".
// A record id appended in the last redisDedupWindow is not appended again.
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

// redisDedupWindow is how long the sink remembers the record ids it
// appended: a record written again within it (a retry after a write that
// timed out but was executed when Redis came back) is not appended twice.
const redisDedupWindow = 2 * time.Minute

// scriptAppend: KEYS stream, ids (a sorted set of recent record ids by
// Redis time); ARGV maxlen, windowMs, then id, json pairs. Each record
// whose id is not in the set is appended with
// XADD stream MAXLEN ~ maxlen * record json.
var scriptAppend = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]))
for i = 3, #ARGV, 2 do
  if redis.call('ZADD', KEYS[2], 'NX', now, ARGV[i]) == 1 then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'record', ARGV[i + 1])
  end
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 0
`)

// idsKey is the sorted set of recent record ids of a stream, in the same
// Redis Cluster slot as the stream: "{stream}:ids" hashes on the stream's
// name, unless that name has a hash tag of its own, which then applies.
func idsKey(stream string) string {
	if strings.Contains(stream, "{") {
		return stream + ":ids"
	}
	return "{" + stream + "}:ids"
}

// Write appends the records in one script call (one stream key, so they
// land in order), skipping those appended in the last redisDedupWindow.
func (s *redisSink) Write(ctx context.Context, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	args := make([]any, 0, 2+2*len(recs))
	args = append(args, redisMaxLen, redisDedupWindow.Milliseconds())
	for i := range recs {
		b, err := json.Marshal(&recs[i])
		if err != nil {
			return err
		}
		args = append(args, recs[i].ID, b)
	}
	if err := scriptAppend.Run(ctx, s.c, []string{s.stream, idsKey(s.stream)}, args...).Err(); err != nil && err != redis.Nil {
		return fmt.Errorf("upstream redis: %w", ctxErr(ctx, err))
	}
	return nil
}

func (s *redisSink) Close() error { return s.c.Close() }

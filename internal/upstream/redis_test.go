package upstream

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

func TestRedisSink(t *testing.T) {
	runSinkSuite(t, func(t *testing.T) *sinkHarness {
		srv := redistest.Standalone(t, redistest.Options{})
		return &sinkHarness{
			url:      srv.URL() + "?stream=test:up",
			received: redisGroupReader(srv.Client(), "test:up"),
			down:     srv.Pause, up: srv.Resume,
			hang: srv.Pause, release: srv.Resume, dedups: true,
		}
	})
}

func TestRedisSinkDefaultStream(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	h := &sinkHarness{url: srv.URL(), opt: Options{Prefix: "px"}}
	s := openSink(t, h)
	writeOK(t, s, testRecords("d", 1, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n := srv.Client().XLen(ctx, "px:upstream").Val(); n != 2 {
		t.Fatalf("XLEN px:upstream = %d, want 2", n)
	}
}

// redisGroupReader reads a stream the way a consumer does: one consumer
// group from the start, XREADGROUP and XACK.
func redisGroupReader(c *redis.Client, stream string) func(t *testing.T) []Record {
	var got []Record
	created := false
	return func(t *testing.T) []Record {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if !created {
			if err := c.XGroupCreateMkStream(ctx, stream, "consumers", "0").Err(); err != nil {
				t.Fatalf("XGROUP CREATE: %v", err)
			}
			created = true
		}
		for {
			res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: "consumers", Consumer: "c1", Streams: []string{stream, ">"}, Count: 1000, Block: -1,
			}).Result()
			if err == redis.Nil || err == nil && len(res[0].Messages) == 0 {
				return got
			}
			if err != nil {
				t.Fatalf("XREADGROUP: %v", err)
			}
			for _, m := range res[0].Messages {
				var r Record
				if err := json.Unmarshal([]byte(m.Values["record"].(string)), &r); err != nil {
					t.Fatalf("stream entry %s: %v", m.ID, err)
				}
				got = append(got, r)
				c.XAck(ctx, stream, "consumers", m.ID)
			}
		}
	}
}

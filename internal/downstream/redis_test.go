package downstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

func randName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// redisHarness is a stream on a real redis-server, claimed after 500 ms
// of idleness (the contract's 30 s is measured by the e2e test).
func redisHarness(t *testing.T, srv *redistest.Server, stream string) *sourceHarness {
	c := srv.Client()
	ctx := context.Background()
	return &sourceHarness{
		url: srv.URL() + "?stream=" + stream + "&claim_idle=500ms",
		produce: func(t *testing.T, values ...[]byte) {
			t.Helper()
			pipe := c.Pipeline()
			for _, v := range values {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"publish", v}})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatalf("XADD: %v", err)
			}
		},
		dead: func(t *testing.T) []DeadLetter {
			t.Helper()
			msgs, err := c.XRange(ctx, stream+":dead", "-", "+").Result()
			if err != nil {
				t.Fatalf("XRANGE dead: %v", err)
			}
			var out []DeadLetter
			for _, m := range msgs {
				var d DeadLetter
				if err := json.Unmarshal([]byte(m.Values["record"].(string)), &d); err != nil {
					t.Fatalf("dead letter %s: %v", m.ID, err)
				}
				out = append(out, d)
			}
			return out
		},
		pending: func(t *testing.T) int {
			p, err := c.XPending(ctx, stream, DefaultGroup).Result()
			if err != nil {
				return -2 // the group is not there yet
			}
			return int(p.Count)
		},
	}
}

func TestRedisSource(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	runSourceSuite(t, func(t *testing.T) *sourceHarness { return redisHarness(t, srv, randName("ds-")) })
}

// A stream produced before the group exists is read from its start; an
// existing group (created by the business at "$") is used as it is.
func TestRedisSourceGroupStart(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	h := redisHarness(t, srv, randName("early-"))
	h.produce(t, body("u1", 0), body("u1", 1))
	g := newFakeGateway()
	startSource(t, h, "n1", Options{Handler: g.handler("n1")})
	await(t, 15*time.Second, "the records written before the group", func() (bool, string) { return g.storedCount() == 2, g.String() })

	stream := randName("late-")
	if err := srv.Client().XGroupCreateMkStream(context.Background(), stream, DefaultGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	h2 := redisHarness(t, srv, stream)
	g2 := newFakeGateway()
	startSource(t, h2, "n1", Options{Handler: g2.handler("n1")})
	h2.produce(t, body("u1", 5))
	await(t, 15*time.Second, "a record in a stream whose group exists", func() (bool, string) { return g2.storedCount() == 1, g2.String() })
}

// {node} in the URL is the node id: one stream per gateway.
func TestRedisSourcePerNodeStream(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	base := randName("gw-")
	g := newFakeGateway()
	for _, n := range []string{"n1", "n2"} {
		h := redisHarness(t, srv, base+"-{node}")
		startSource(t, h, n, Options{Handler: g.handler(n)})
	}
	redisHarness(t, srv, base+"-n1").produce(t, body("a", 0), body("a", 1))
	redisHarness(t, srv, base+"-n2").produce(t, body("b", 2))
	await(t, 15*time.Second, "each node's stream consumed by that node", func() (bool, string) {
		g.mu.Lock()
		ok := g.by["n1"] == 2 && g.by["n2"] == 1
		g.mu.Unlock()
		return ok, g.String()
	})
}

func TestCheckURLs(t *testing.T) {
	for _, tc := range []struct {
		list string
		ok   bool
	}{
		{"redis://127.0.0.1:6379/0?stream=s", true},
		{"redis://127.0.0.1:6379/0?stream=s&group=g&claim_idle=10s", true},
		{"redis://127.0.0.1:6379/0", false},
		{"redis://127.0.0.1:6379/0?stream=s&claim_idle=fast", false},
		{"redis://127.0.0.1:6379/0?stream=s, redis://127.0.0.1:6379/0?stream=s", false},
		{"ftp://x/y", false},
		{"", false},
	} {
		if err := Check(tc.list); (err == nil) != tc.ok {
			t.Errorf("Check(%q) = %v, want ok=%v", tc.list, err, tc.ok)
		}
	}
	if got := SplitURLs("redis://a:1/0?stream=s,kafka://b1:9092,b2:9092/T?group=g, nats://n:4222?stream=S"); len(got) != 3 || got[1] != "kafka://b1:9092,b2:9092/T?group=g" {
		t.Errorf("SplitURLs: %q", got)
	}
}

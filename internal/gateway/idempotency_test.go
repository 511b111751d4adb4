package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// storeThenFail is the embedded backend whose next inbox appends store
// the message and then answer an error, as a Redis append whose replicas
// did not confirm it or whose reply was lost.
type storeThenFail struct {
	cluster.Backend
	fails atomic.Int32
}

var errAfterStore = cluster.ErrUnavailable

func (f *storeThenFail) AppendInbox(ctx context.Context, user string, payload []byte, opt cluster.InboxOptions) (cluster.AppendResult, error) {
	res, err := f.Backend.AppendInbox(ctx, user, payload, opt)
	if err == nil && f.fails.Add(-1) >= 0 {
		return res, errAfterStore
	}
	return res, err
}

func (f *storeThenFail) AppendInboxes(ctx context.Context, msgs []cluster.InboxAppend, opt cluster.InboxOptions) []cluster.AppendOutcome {
	out := f.Backend.AppendInboxes(ctx, msgs, opt)
	for i := range out {
		if out[i].Err == nil && f.fails.Add(-1) >= 0 {
			out[i].Err = errAfterStore
		}
	}
	return out
}

func keyed(key, user, data string) api.PublishRequest {
	return api.PublishRequest{Target: protocol.Target{Type: "user", ID: user}, Event: "e", Data: raw(data), Reliable: true, IdempotencyKey: key}
}

func isStatus(err error, status int) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Status == status
}

// A publish whose append stored the message but answered an error is
// retried with the same key: one stored copy, the retry answers its seq,
// and the key reused for another message is a conflict.
func TestIdempotentRetryAfterStoredErrorStoresOnce(t *testing.T) {
	b := &storeThenFail{Backend: cluster.NewMemory()}
	n := startNodeWith(t, b, nil)
	ctx := context.Background()
	b.fails.Store(1)
	if _, err := n.Publish(ctx, keyed("k1", "ida", "1")); !isStatus(err, http.StatusServiceUnavailable) {
		t.Fatalf("first try: %v, want 503", err)
	}
	res, err := n.Publish(ctx, keyed("k1", "ida", "1"))
	if err != nil || res.Seq != 1 {
		t.Fatalf("retry: %+v %v, want seq 1", res, err)
	}
	again, err := n.Publish(ctx, keyed("k1", "ida", "1"))
	if err != nil || again.ID != res.ID || again.Seq != res.Seq {
		t.Fatalf("second retry: %+v %v, want the first answer %+v", again, err, res)
	}
	if last, _ := b.LastSeq(ctx, "ida"); last != 1 {
		t.Fatalf("last seq %d after one message and its retries, want 1", last)
	}
	for _, other := range []api.PublishRequest{keyed("k1", "idb", "1"), keyed("k1", "ida", "2")} {
		if _, err := n.Publish(ctx, other); !isStatus(err, http.StatusConflict) {
			t.Fatalf("key reused for %+v: %v, want 409", other, err)
		}
	}
	if last, _ := b.LastSeq(ctx, "idb"); last != 0 {
		t.Fatalf("a conflicting publish stored a message (seq %d)", last)
	}
	// The same in a batch (keyed messages go through Publish).
	b.fails.Store(1)
	r1 := n.publishBatch(ctx, []json.RawMessage{raw(`{"target":{"type":"user","id":"ida"},"event":"e","data":3,"reliable":true,"idempotency_key":"k2"}`)}, "")
	r2 := n.publishBatch(ctx, []json.RawMessage{raw(`{"target":{"type":"user","id":"ida"},"event":"e","data":3,"reliable":true,"idempotency_key":"k2"}`)}, "")
	if _, failed := r1[0].(map[string]protocol.ErrorBody); !failed {
		t.Fatalf("first batch try: %+v, want an error", r1[0])
	}
	if res, ok := r2[0].(api.PublishResult); !ok || res.Seq != 2 {
		t.Fatalf("batch retry: %+v, want seq 2", r2[0])
	}
	if last, _ := b.LastSeq(ctx, "ida"); last != 2 {
		t.Fatalf("last seq %d, want 2", last)
	}
}

// redisBackend is a backend on the Redis at url with the key prefix
// shared by the nodes of one test (replicas as RedisOptions.Replicas);
// it is closed after the nodes started later (cleanups run in reverse).
func redisBackend(t *testing.T, url, prefix string, replicas int) *cluster.Redis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := cluster.NewRedis(ctx, cluster.RedisOptions{URL: url, Prefix: prefix, Replicas: replicas,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// On Redis: an append that no replica confirmed (ErrNotReplicated, the
// message is on the master) and an append that timed out while Redis hung
// and ran when it came back; each retried with the same key stores one
// copy.
func TestIdempotentRetryOnRedisStoresOnce(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	waiting := redisBackend(t, srv.URL(), "idem", 1) // no replica: every append is ErrNotReplicated
	plain := redisBackend(t, srv.URL(), "idem", 0)
	nw := startNodeWith(t, waiting, func(c *config.Gateway) { c.NodeID = "w" })
	np := startNodeWith(t, plain, func(c *config.Gateway) { c.NodeID = "p" })
	ctx := context.Background()

	if _, err := nw.Publish(ctx, keyed("nr", "rda", "1")); !isStatus(err, http.StatusServiceUnavailable) {
		t.Fatalf("append without replica: %v, want 503", err)
	}
	res, err := np.Publish(ctx, keyed("nr", "rda", "1"))
	if err != nil || res.Seq != 1 {
		t.Fatalf("retry on another node: %+v %v, want seq 1", res, err)
	}
	if last, _ := plain.LastSeq(ctx, "rda"); last != 1 {
		t.Fatalf("last seq %d after a not-replicated append and its retry, want 1", last)
	}

	srv.Pause()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = np.Publish(short, keyed("to", "rdb", "1"))
	cancel()
	srv.Resume()
	if !isStatus(err, http.StatusServiceUnavailable) {
		t.Fatalf("append while Redis hangs: %v, want 503", err)
	}
	// The timed-out append may run now that Redis is back: wait until the
	// pipeline that carried it has ended, then retry.
	eventually(t, 10*time.Second, "redis answers", func() bool { return plain.Ping(ctx) == nil })
	var res2 api.PublishResult
	eventually(t, 10*time.Second, "retry answered", func() bool {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		res2, err = np.Publish(rctx, keyed("to", "rdb", "1"))
		return err == nil
	})
	rd, err := plain.ReadInbox(ctx, "rdb", 0, np.inboxOpts())
	if err != nil {
		t.Fatal(err)
	}
	if len(rd.Messages) != 1 || rd.LastSeq != res2.Seq {
		t.Fatalf("after a timed-out append and its retry: %d messages, last seq %d, retry answered %d; want one copy", len(rd.Messages), rd.LastSeq, res2.Seq)
	}
}

package gateway

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// A broadcast answered 503 while Redis hangs is delivered nowhere, also
// after Redis comes back and runs the PUBLISH that sat in its socket: the
// envelope carries the publisher's deadline and receivers drop it late.
func TestBroadcastAnsweredUnavailableIsNotDeliveredLater(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	ba := redisBackend(t, srv.URL(), "bc", 0)
	bb := redisBackend(t, srv.URL(), "bc", 0)
	na := startNodeWith(t, ba, func(c *config.Gateway) { c.NodeID = "a" })
	nb := startNodeWith(t, bb, func(c *config.Gateway) { c.NodeID = "b" })
	c := nb.connect(t, "watcher", "")
	ctx := context.Background()
	bcast := func(ctx context.Context, event string) error {
		_, err := na.Publish(ctx, api.PublishRequest{Target: protocol.Target{Type: "broadcast"}, Event: event})
		return err
	}
	if err := bcast(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if m := c.expect("message"); m["event"] != "first" {
		t.Fatalf("got %v", m)
	}
	// Idle pooled connections on a, so that the PUBLISH is written to
	// Redis's socket rather than wait for a new connection's handshake.
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { ba.Client().BLPop(ctx, 100*time.Millisecond, "nothing") })
	}
	wg.Wait()

	srv.Pause()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := bcast(pctx, "late")
	cancel()
	srv.Resume()
	if !isStatus(err, http.StatusServiceUnavailable) {
		t.Fatalf("broadcast while Redis hangs: %v, want 503", err)
	}
	eventually(t, 10*time.Second, "redis answers", func() bool { return srv.Client().Ping(ctx).Err() == nil })
	if err := bcast(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	if m := c.expect("message"); m["event"] != "marker" {
		t.Fatalf("after the 503 the watcher got %v before the marker", m["event"])
	}
}

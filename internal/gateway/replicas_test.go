package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// With WSGATE_RELIABLE_REPLICAS=1 and the replica down, a user with
// reliable messages to replay still connects (contract 22): the welcome
// comes, a non-reliable message flows, and the replays of the inbox and
// of a reliable room (room_since) come, in order and once, only when the
// replica confirms them.
func TestConnectWhileReplicasDownReplaysOnceConfirmed(t *testing.T) {
	set := redistest.Sentinel(t)
	b := redisBackend(t, set.URL(), "rep", 1)
	n := startNodeWith(t, b, func(c *config.Gateway) { c.ReliableReplicas = 1 })
	join(t, n, "news", "rita")
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "rita"}, Event: "e", Data: raw(`"stored"`), Reliable: true})
	reliableRoom(t, n, "news", 1)

	set.Replica.Pause()
	paused := true
	t.Cleanup(func() {
		if paused {
			set.Replica.Resume()
		}
	})
	c := n.dial(t, "?since=0&room_since=news:0", http.Header{"Authorization": {"Bearer " + token(t, "rita", nil)}}, true)
	if w := c.next(10 * time.Second); w["type"] != "welcome" {
		t.Fatalf("first frame with the replica down: %v, want the welcome", w)
	}
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "rita"}, Event: "e", Data: raw(`"live"`)})
	// A replay is queued before anything live: the plain message coming
	// first shows that nothing unconfirmed was delivered.
	if f := c.next(10 * time.Second); f["type"] != "message" || f["data"] != "live" || f["seq"] != nil {
		t.Fatalf("first frame after the welcome: %v, want the non-reliable message", f)
	}
	set.Replica.Resume()
	paused = false
	got := map[string]bool{}
	for len(got) < 2 {
		f := c.next(20 * time.Second)
		if f["type"] != "message" || f["seq"] != float64(1) {
			t.Fatalf("frame once the replica is back: %v, want the replays (seq 1 of the inbox and of the room)", f)
		}
		key := "inbox"
		if tg, _ := f["target"].(map[string]any); tg["type"] == "room" {
			key = "room " + tg["id"].(string)
		}
		if got[key] {
			t.Fatalf("replay of %s twice: %v", key, f)
		}
		got[key] = true
	}
	if !got["inbox"] || !got["room news"] {
		t.Fatalf("replays %v, want the inbox's and room news's", got)
	}
}

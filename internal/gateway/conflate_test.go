package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
)

var conflateKeys = []string{"a", "b", "c"}

// tickerRounds publishes rounds of a realtime ticker (one message per key
// and round, each ~60 kB so that a reader that does not read fills its
// socket and then its queue) to user through pubNode's API, as single
// publishes or one batch per round, with or without keys; it stops 20
// rounds after dropped (the reason counted on connNode) first moved, and
// returns the last round.
func tickerRounds(t *testing.T, pubNode, connNode *testNode, user string, keyed, batch bool, dropped string) int {
	t.Helper()
	pad := strings.Repeat("x", 60000)
	body := func(key string, round int) string {
		k := ""
		if keyed {
			k = fmt.Sprintf(`,"key":%q`, key)
		}
		return fmt.Sprintf(`{"target":{"type":"user","id":%q},"event":"tick","class":"realtime"%s,"data":{"k":%q,"v":%d,"pad":%q}}`, user, k, key, round, pad)
	}
	last := -1
	for round := 1; round <= 400; round++ {
		if batch {
			var msgs []string
			for _, key := range conflateKeys {
				msgs = append(msgs, body(key, round))
			}
			if status, res := apiCall(t, pubNode, "POST", "/api/v1/publish/batch", "k", `{"messages":[`+strings.Join(msgs, ",")+`]}`); status != 200 || strings.Contains(fmt.Sprint(res), "error") {
				t.Fatalf("batch round %d: %d %v", round, status, res)
			}
		} else {
			for _, key := range conflateKeys {
				if status, res := apiCall(t, pubNode, "POST", "/api/v1/publish", "k", body(key, round)); status != 200 {
					t.Fatalf("publish round %d: %d %v", round, status, res)
				}
			}
		}
		if last < 0 && counterValue(t, connNode, "wsgate_messages_dropped_total", dropped) > 0 {
			last = round + 20
		}
		if round == last {
			return round
		}
	}
	t.Fatalf("no %s drop after 400 rounds", dropped)
	return 0
}

// readTicks reads the ticks a stalled client finally reads: per key, the
// values in the order they came. It stops when no frame comes for 1 s.
func readTicks(t *testing.T, c *wsClient) map[string][]int {
	t.Helper()
	got := map[string][]int{}
	for {
		c.conn.SetReadDeadline(time.Now().Add(time.Second))
		h, err := ws.ReadHeader(c.r)
		if err != nil {
			return got
		}
		payload := make([]byte, h.Length)
		if _, err := io.ReadFull(c.r, payload); err != nil {
			t.Fatalf("read: %v", err)
		}
		var f struct {
			Type  string
			Event string
			Data  struct {
				K string
				V int
			}
		}
		if h.OpCode != ws.OpText || json.Unmarshal(payload, &f) != nil || f.Type != "message" || f.Event != "tick" {
			continue // the welcome
		}
		got[f.Data.K] = append(got[f.Data.K], f.Data.V)
	}
}

// A slow reader of a realtime ticker with keys (contract 19): once it
// reads, it has the latest value of each key, each key's values in
// order, the conflated counter moved, and the connection keeps no mark
// of what it queued. Published on the node of the connection (single
// publishes) and on another node (batches over the bus).
func TestConflationSlowReaderGetsLatestPerKey(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other bool
	}{{"local", false}, {"bus batch", true}} {
		t.Run(tc.name, func(t *testing.T) {
			b := cluster.NewMemory()
			small := func(c *config.Gateway) { c.SendQueue = 8 }
			connNode := startNodeWith(t, b, small)
			pubNode := connNode
			if tc.other {
				pubNode = startNodeWith(t, b, func(c *config.Gateway) { small(c); c.NodeID = "t2" })
			}
			c := connNode.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "slow", nil)}}, false)
			eventually(t, 5*time.Second, "connected", func() bool { return len(connNode.hub.userConns("slow")) == 1 })
			sc := connNode.hub.userConns("slow")[0]
			if tc.other {
				eventually(t, 5*time.Second, "route seen", func() bool {
					res, err := pubNode.Publish(t.Context(), api.PublishRequest{Target: protocolTarget("user", "slow"), Event: "probe"})
					return err == nil && res.Online != nil && *res.Online
				})
			}
			last := tickerRounds(t, pubNode, connNode, "slow", true, tc.other, "conflated")
			got := readTicks(t, c)
			for _, key := range conflateKeys {
				vs := got[key]
				if len(vs) == 0 || vs[len(vs)-1] != last {
					t.Fatalf("key %s: values %v, want the last %d at the end", key, vs, last)
				}
				for i := 1; i < len(vs); i++ {
					if vs[i] <= vs[i-1] {
						t.Fatalf("key %s: values out of order: %v", key, vs)
					}
				}
				if len(vs) >= last {
					t.Fatalf("key %s: all %d values came: nothing was conflated", key, len(vs))
				}
			}
			if got := counterValue(t, connNode, "wsgate_messages_dropped_total", "queue_full"); got != 0 {
				t.Fatalf("%v keyed messages dropped as queue_full", got)
			}
			eventually(t, 5*time.Second, "the connection's marks forgotten", func() bool {
				sc.mu.Lock()
				defer sc.mu.Unlock()
				return sc.x == nil || len(sc.x.keyed) == 0
			})
		})
	}
}

// Without key a full queue drops the new realtime message as before: the
// slow reader ends with stale values and nothing is counted conflated.
func TestConflationWithoutKeyDropsNewest(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.SendQueue = 8 })
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "slow", nil)}}, false)
	eventually(t, 5*time.Second, "connected", func() bool { return n.hub.count() == 1 })
	last := tickerRounds(t, n, n, "slow", false, false, "queue_full")
	got := readTicks(t, c)
	for _, key := range conflateKeys {
		if vs := got[key]; len(vs) > 0 && vs[len(vs)-1] == last {
			t.Fatalf("key %s: the last value %d came through a full queue: %v", key, last, vs)
		}
	}
	if got := counterValue(t, n, "wsgate_messages_dropped_total", "conflated"); got != 0 {
		t.Fatalf("%v messages conflated without a key", got)
	}
}

// key is a name on realtime, non-reliable messages; anything else is 400.
func TestConflationKeyValidation(t *testing.T) {
	n := startNode(t, nil)
	for _, tc := range []struct {
		body   string
		status int
	}{
		{`{"target":{"type":"room","id":"r"},"class":"realtime","key":"price:EURUSD"}`, 200},
		{`{"target":{"type":"broadcast"},"class":"realtime","key":"k"}`, 200},
		{`{"target":{"type":"room","id":"r"},"key":"k"}`, 400},
		{`{"target":{"type":"room","id":"r"},"class":"notify","key":"k"}`, 400},
		{`{"target":{"type":"room","id":"r"},"class":"realtime","reliable":true,"key":"k"}`, 400},
		{`{"target":{"type":"room","id":"r"},"class":"realtime","key":7}`, 400},
		{`{"target":{"type":"room","id":"r"},"class":"realtime","key":"a\u0001b"}`, 400},
		{`{"target":{"type":"room","id":"r"},"class":"realtime","key":"` + strings.Repeat("k", 257) + `"}`, 400},
	} {
		if status, res := apiCall(t, n, "POST", "/api/v1/publish", "k", tc.body); status != tc.status {
			t.Fatalf("%.120s: %d %v, want %d", tc.body, status, res, tc.status)
		}
	}
}

// Every API transport reads key (HTTP, gRPC, gRPC-Web).
func TestConflationKeyEveryTransport(t *testing.T) {
	forEachTransport(t, func(t *testing.T, n *testNode, tr apiTransport) {
		room := protocolTarget("room", "px")
		if _, e := tr.publish("k", api.PublishRequest{Target: room, Event: "tick", Class: "realtime", Key: "EURUSD"}, nil); e != nil {
			t.Fatalf("keyed realtime publish: %+v", e)
		}
		_, e := tr.publish("k", api.PublishRequest{Target: room, Event: "tick", Key: "EURUSD"}, nil)
		wantErr(t, "key on a chat message", e, 400, "bad_request", "key")
		items, e := tr.batch("k", []api.PublishRequest{{Target: room, Class: "realtime", Key: "a"}, {Target: room, Class: "notify", Key: "a"}})
		if e != nil || len(items) != 2 || items[0].err != nil || items[1].err == nil || items[1].err.code != "bad_request" {
			t.Fatalf("batch with a good and a bad key: %+v %+v", items, e)
		}
	})
}

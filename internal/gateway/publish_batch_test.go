package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

// Batch envelope records survive the round trip, target ids with spaces
// and bodies with newlines included.
func TestBatchEnvelopeRecords(t *testing.T) {
	type rec struct {
		t     protocol.Target
		cl    class
		seq   int64
		pubAt int64
		body  string
	}
	in := []rec{
		{protocol.Target{Type: protocol.TargetUser, ID: "alice"}, classChat, 7, 1700000000000000000, `{"type":"message","data":"a\nb"}`},
		{protocol.Target{Type: protocol.TargetUser, ID: "bob smith  "}, classRealtime, 0, 1, ``},
		{protocol.Target{Type: protocol.TargetRoom, ID: "r"}, classNotify, 0, 2, "x\n\n"},
		{protocol.Target{Type: protocol.TargetBroadcast}, classChat, 1 << 62, 1 << 62, "{}"},
	}
	env := append([]byte(nil), batchHeader...)
	for _, r := range in {
		before := len(env)
		env = appendRecord(env, r.t, r.cl, r.seq, r.pubAt, []byte(r.body))
		if added, bound := len(env)-before, recordSize(r.t, []byte(r.body)); added > bound {
			t.Errorf("record of %d bytes, recordSize %d", added, bound)
		}
	}
	i := bytes.IndexByte(env, '\n')
	var e envelope
	if err := json.Unmarshal(env[:i], &e); err != nil || e.Kind != kindMessages {
		t.Fatalf("header %q: %+v %v", env[:i], e, err)
	}
	body := env[i+1:]
	for k, want := range in {
		got, rest, ok := nextRecord(body)
		if !ok {
			t.Fatalf("record %d: not parsed from %q", k, body)
		}
		if got.target != want.t || got.class != want.cl || got.seq != want.seq || got.pubAt != want.pubAt || string(got.body) != want.body {
			t.Fatalf("record %d = %+v, want %+v", k, got, want)
		}
		body = rest
	}
	if len(body) != 0 {
		t.Fatalf("left over: %q", body)
	}
	for _, bad := range []string{"user 1 2 3", "user 1 2 3 99 u\nshort", "user x 2 3 0 u\n", "user 1 2 3 -1 u\n"} {
		if _, _, ok := nextRecord([]byte(bad)); ok {
			t.Errorf("malformed record %q parsed", bad)
		}
	}
	if strings.Contains(string(batchHeader[:len(batchHeader)-1]), "\n") {
		t.Fatal("header spans lines")
	}
}

// A batch to users on two nodes: each message answered in batch order
// (seq for reliable ones, online), delivered in batch order per
// connection, and the other node gets exactly one bus envelope for all of
// its messages.
func TestBatchPublishOneEnvelopePerNode(t *testing.T) {
	backend := cluster.NewMemory()
	n1 := startNodeWith(t, backend, nil)
	n2 := startNodeWith(t, backend, func(c *config.Gateway) { c.NodeID = "t2" })
	ann := n1.connect(t, "ann", "")
	ben := n2.connect(t, "ben", "")
	cat := n2.connect(t, "cat", "")
	ben2 := n1.connect(t, "ben", "") // ben is on both nodes
	envelopes := func(n *testNode) float64 {
		var m dto.Metric
		if err := n.metrics.BusReceived.WithLabelValues("message").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before1, before2 := envelopes(n1), envelopes(n2)

	status, m := apiCall(t, n1, "POST", "/api/v1/publish/batch", "k", `{"messages":[
		{"target":{"type":"user","id":"ben"},"event":"b1","reliable":true,"data":{"n":1}},
		{"target":{"type":"user","id":"ann"},"event":"a1","reliable":true},
		{"target":{"type":"user","id":"cat"},"event":"c1"},
		{"target":{"type":"user","id":"ben"},"event":"b2"},
		{"target":{"type":"user","id":"nobody"},"event":"x1","reliable":true},
		{"target":{"type":"nowhere"}},
		{"target":{"type":"user","id":"ben"},"event":"b3","reliable":true},
		{"target":{"type":"user","id":"ann"},"event":"a2"},
		{"target":{"type":"user","id":"nobody"},"event":"x2"}]}`)
	if status != 200 {
		t.Fatalf("batch: %d %v", status, m)
	}
	res := m["results"].([]any)
	type want struct {
		seq    float64
		online any
	}
	for i, w := range []want{{1, true}, {1, true}, {0, true}, {0, true}, {1, false}, {-1, nil}, {2, true}, {0, true}, {0, false}} {
		r := res[i].(map[string]any)
		if w.seq < 0 {
			if r["error"] == nil {
				t.Errorf("result %d = %v, want an error", i, r)
			}
			continue
		}
		seq, _ := r["seq"].(float64)
		if seq != w.seq || r["online"] != w.online || r["id"] == "" {
			t.Errorf("result %d = %v, want seq %v online %v", i, r, w.seq, w.online)
		}
	}
	events := func(c *wsClient, n int) []string {
		var out []string
		for range n {
			f := c.expect("message")
			ev, _ := f["event"].(string)
			if seq, ok := f["seq"].(float64); ok {
				ev += "#" + strconv.Itoa(int(seq))
			}
			out = append(out, ev)
		}
		return out
	}
	for _, c := range []struct {
		name string
		c    *wsClient
		want []string
	}{
		{"ben on t2", ben, []string{"b1#1", "b2", "b3#2"}},
		{"ben on t1", ben2, []string{"b1#1", "b2", "b3#2"}},
		{"cat on t2", cat, []string{"c1"}},
		{"ann on t1", ann, []string{"a1#1", "a2"}},
	} {
		if got := events(c.c, len(c.want)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s got %v, want %v", c.name, got, c.want)
		}
	}
	// Everything for t2 came in one envelope (counted before its
	// messages were delivered); t1 delivered its own locally.
	if got := envelopes(n2) - before2; got != 1 {
		t.Errorf("t2 received %v bus message envelopes, want 1", got)
	}
	if got := envelopes(n1) - before1; got != 0 {
		t.Errorf("t1 received %v bus message envelopes, want 0", got)
	}
}

// failingSendEach is a backend whose first SendEach calls fail, as when
// Redis does not take the bus envelopes.
type failingSendEach struct {
	cluster.Backend
	fails atomic.Int32
}

func (f *failingSendEach) SendEach(ctx context.Context, msgs []cluster.BusMessage) error {
	if f.fails.Add(-1) >= 0 {
		return errors.New("bus down")
	}
	return f.Backend.SendEach(ctx, msgs)
}

// When a batch's bus envelope cannot be sent, its reliable messages are
// sent again (they are stored, and the connection would otherwise see
// them only behind the next one); its other messages are not sent twice.
func TestBatchPublishResendsReliableOnBusFailure(t *testing.T) {
	mem := cluster.NewMemory()
	failing := &failingSendEach{Backend: mem}
	failing.fails.Store(1)
	n1 := startNodeWith(t, failing, nil)
	n2 := startNodeWith(t, mem, func(c *config.Gateway) { c.NodeID = "t2" })
	ben := n2.connect(t, "ben", "")
	status, m := apiCall(t, n1, "POST", "/api/v1/publish/batch", "k", `{"messages":[
		{"target":{"type":"user","id":"ben"},"event":"r1","reliable":true},
		{"target":{"type":"user","id":"ben"},"event":"p1"},
		{"target":{"type":"user","id":"ben"},"event":"r2","reliable":true}]}`)
	if status != 200 {
		t.Fatalf("batch: %d %v", status, m)
	}
	for i, r := range m["results"].([]any) {
		if r.(map[string]any)["error"] != nil {
			t.Fatalf("result %d: %v (the messages are stored: the answer is not an error)", i, r)
		}
	}
	// The resent envelope holds r1 and r2 only; a message published on
	// n2 afterwards comes next.
	for _, want := range []string{"r1", "r2"} {
		if f := ben.expect("message"); f["event"] != want {
			t.Fatalf("got %v, want %s", f, want)
		}
	}
	pub(t, n2, api.PublishRequest{Target: protocol.Target{Type: protocol.TargetUser, ID: "ben"}, Event: "marker"})
	if f := ben.expect("message"); f["event"] != "marker" {
		t.Fatalf("got %v after the resent messages, want the marker", f)
	}
}

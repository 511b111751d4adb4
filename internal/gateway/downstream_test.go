package gateway

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/downstream"
)

// handleRecord answers a record as the API answers its body: published,
// refused for its content (dead, with the API's code), or unavailable
// (retried); the record's key makes a second handling a no-op.
func TestHandleRecord(t *testing.T) {
	b := &storeThenFail{Backend: cluster.NewMemory()}
	n := startNodeWith(t, b, nil)
	ctx := context.Background()
	rec := func(id, value string) downstream.Record {
		return downstream.Record{ID: id, Key: "ds:test:" + id, Value: []byte(value)}
	}
	pub := `{"target":{"type":"user","id":"dsu"},"event":"e","data":{"n":1},"reliable":true}`

	if o := n.handleRecord(ctx, rec("1-0", pub)); o.Retry || len(o.Dead) > 0 {
		t.Fatalf("a good record: %+v", o)
	}
	if o := n.handleRecord(ctx, rec("1-0", pub)); o.Retry || len(o.Dead) > 0 {
		t.Fatalf("the same record again: %+v", o)
	}
	if last, _ := b.LastSeq(ctx, "dsu"); last != 1 {
		t.Fatalf("seq %d after one record handled twice, want 1", last)
	}

	// Stored, then the backend fails: retried; the retry finds it.
	// (Record 2-0 below.) First: a record id seen before with another
	// body (a topic recreated within the key's lifetime) is a message of
	// its own, not an answer from the first one's key.
	if o := n.handleRecord(ctx, rec("1-0", strings.Replace(pub, `"n":1`, `"n":2`, 1))); o.Retry || len(o.Dead) > 0 {
		t.Fatalf("record 1-0 again with another body: %+v", o)
	}
	if last, _ := b.LastSeq(ctx, "dsu"); last != 2 {
		t.Fatalf("seq %d after record 1-0 came with another body, want 2", last)
	}
	in, err := b.ReadInbox(ctx, "dsu", 0, cluster.InboxOptions{})
	if err != nil || len(in.Messages) != 2 || !strings.Contains(string(in.Messages[1].Payload), `"n":2`) {
		t.Fatalf("inbox after record 1-0 with two bodies: %+v %v", in, err)
	}

	b.fails.Store(1)
	if o := n.handleRecord(ctx, rec("2-0", pub)); !o.Retry {
		t.Fatalf("a record answered unavailable: %+v, want retry", o)
	}
	if o := n.handleRecord(ctx, rec("2-0", pub)); o.Retry || len(o.Dead) > 0 {
		t.Fatalf("its retry: %+v", o)
	}
	if last, _ := b.LastSeq(ctx, "dsu"); last != 3 {
		t.Fatalf("seq %d after three records, want 3", last)
	}

	// A record with a key of its own: the API's claim, so that the key
	// used again with another body is refused.
	own := `{"target":{"type":"user","id":"dso"},"event":"e","idempotency_key":"own-1","reliable":true}`
	if o := n.handleRecord(ctx, rec("2-1", own)); o.Retry || len(o.Dead) > 0 {
		t.Fatalf("a record with its own key: %+v", o)
	}
	for _, tc := range []struct{ value, code string }{
		{`not json`, "bad_request"},
		{`{"target":{"type":"planet","id":"x"}}`, "bad_request"},
		{`{"target":{"type":"user","id":"dso"},"event":"other","idempotency_key":"own-1","reliable":true}`, "conflict"},
		{`{"target":{"type":"user","id":"dsu"},"data":"` + strings.Repeat("x", api.MaxBodyBytes) + `"}`, "too_large"},
		{`{"messages":[` + strings.Repeat(`{"target":{"type":"broadcast"}},`, api.MaxBatch) + `{"target":{"type":"broadcast"}}]}`, "bad_request"},
	} {
		o := n.handleRecord(ctx, rec("3-0", tc.value))
		if o.Retry || len(o.Dead) != 1 || o.Dead[0].Error.Code != tc.code || o.Dead[0].ID != "3-0" || o.Dead[0].Index != nil {
			t.Errorf("record %.60q: %+v, want one dead letter %s", tc.value, o, tc.code)
		}
	}

	// A batch: the good messages are published, each bad one is a dead
	// letter with its index.
	batch := `{"messages":[` + pub + `,{"target":{"type":"user"}},` + pub + `]}`
	o := n.handleRecord(ctx, rec("4-0", batch))
	if o.Retry || len(o.Dead) != 1 || o.Dead[0].Index == nil || *o.Dead[0].Index != 1 || o.Dead[0].Error.Code != "bad_request" {
		t.Fatalf("a batch with one bad message: %+v", o)
	}
	if last, _ := b.LastSeq(ctx, "dsu"); last != 5 {
		t.Fatalf("seq %d after the batch's two good messages, want 5", last)
	}
	if o := n.handleRecord(ctx, rec("4-0", batch)); len(o.Dead) != 1 {
		t.Fatalf("the batch again: %+v", o)
	}
	if last, _ := b.LastSeq(ctx, "dsu"); last != 5 {
		t.Fatalf("seq %d after the batch came again, want 5 (its messages' keys)", last)
	}
}

// A record may carry a conflation key as the API's body does (contract
// 19): read, so a key where it does not belong is a dead letter.
func TestHandleRecordConflationKey(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	rec := func(id, value string) downstream.Record {
		return downstream.Record{ID: id, Key: "ds:key:" + id, Value: []byte(value)}
	}
	good := `{"target":{"type":"room","id":"px"},"event":"tick","class":"realtime","key":"EURUSD","data":1}`
	if o := n.handleRecord(ctx, rec("1-0", good)); o.Retry || len(o.Dead) > 0 {
		t.Fatalf("a keyed realtime record: %+v", o)
	}
	if o := n.handleRecord(ctx, rec("2-0", `{"messages":[`+good+`]}`)); o.Retry || len(o.Dead) > 0 {
		t.Fatalf("a keyed realtime record in a batch: %+v", o)
	}
	bad := `{"target":{"type":"room","id":"px"},"event":"tick","class":"chat","key":"EURUSD"}`
	if o := n.handleRecord(ctx, rec("3-0", bad)); len(o.Dead) != 1 || o.Dead[0].Error.Code != "bad_request" {
		t.Fatalf("a key on a chat record: %+v, want a dead letter bad_request", o)
	}
}

// gatedAppends holds every AppendInboxes call until gate is closed, and
// counts the calls and the messages in those waiting.
type gatedAppends struct {
	cluster.Backend
	calls, waiting atomic.Int32
	gate           chan struct{}
}

func (g *gatedAppends) AppendInboxes(ctx context.Context, msgs []cluster.InboxAppend, opt cluster.InboxOptions) []cluster.AppendOutcome {
	g.calls.Add(1)
	g.waiting.Add(int32(len(msgs)))
	<-g.gate
	return g.Backend.AppendInboxes(ctx, msgs, opt)
}

// The reliable user messages of records handled at once go to the
// backend together: while the flushers wait for Redis, the records that
// come meanwhile gather, and the next append carries all of them.
func TestRecordsPublishedTogether(t *testing.T) {
	g := &gatedAppends{Backend: cluster.NewMemory(), gate: make(chan struct{})}
	n := startNodeWith(t, g, nil)
	ctx := context.Background()
	n.records.start(n.Node) // as startDownstream does: the queue read below exists
	const records = 64
	outs := make(chan downstream.Outcome, records)
	for i := range records {
		go func() {
			id := strconv.Itoa(i)
			outs <- n.handleRecord(ctx, downstream.Record{ID: id, Key: "ds:bulk:" + id,
				Value: []byte(`{"target":{"type":"user","id":"bu` + id + `"},"event":"e","data":1,"reliable":true}`)})
		}()
	}
	// Every record is either in an append that waits or queued for the
	// next one.
	deadline := time.Now().Add(20 * time.Second)
	for int(g.waiting.Load())+len(n.records.in) < records {
		if time.Now().After(deadline) {
			t.Fatalf("records in waiting appends %d, queued %d, want %d in all", g.waiting.Load(), len(n.records.in), records)
		}
		time.Sleep(time.Millisecond)
	}
	close(g.gate)
	for range records {
		if o := <-outs; o.Retry || len(o.Dead) > 0 {
			t.Fatalf("a record: %+v", o)
		}
	}
	// The flushers' first appends, then one more each at most.
	if c := g.calls.Load(); c > 2*recordFlushers {
		t.Fatalf("%d records published in %d appends, want at most %d", records, c, 2*recordFlushers)
	}
	for i := range records {
		if last, _ := g.LastSeq(ctx, "bu"+strconv.Itoa(i)); last != 1 {
			t.Fatalf("user bu%d: seq %d, want 1", i, last)
		}
	}
}

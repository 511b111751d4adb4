package gateway

import (
	"context"
	"strings"
	"testing"

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
	b.fails.Store(1)
	if o := n.handleRecord(ctx, rec("2-0", pub)); !o.Retry {
		t.Fatalf("a record answered unavailable: %+v, want retry", o)
	}
	if o := n.handleRecord(ctx, rec("2-0", pub)); o.Retry || len(o.Dead) > 0 {
		t.Fatalf("its retry: %+v", o)
	}
	if last, _ := b.LastSeq(ctx, "dsu"); last != 2 {
		t.Fatalf("seq %d after two records, want 2", last)
	}

	for _, tc := range []struct{ value, code string }{
		{`not json`, "bad_request"},
		{`{"target":{"type":"planet","id":"x"}}`, "bad_request"},
		{`{"target":{"type":"user","id":"dsu"},"event":"other","idempotency_key":"ds:test:1-0"}`, "conflict"},
		{`{"target":{"type":"user","id":"dsu"},"data":"` + strings.Repeat("x", maxBodyBytes) + `"}`, "too_large"},
		{`{"messages":[` + strings.Repeat(`{"target":{"type":"broadcast"}},`, maxBatch) + `{"target":{"type":"broadcast"}}]}`, "bad_request"},
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
	if last, _ := b.LastSeq(ctx, "dsu"); last != 4 {
		t.Fatalf("seq %d after the batch's two good messages, want 4", last)
	}
	if o := n.handleRecord(ctx, rec("4-0", batch)); len(o.Dead) != 1 {
		t.Fatalf("the batch again: %+v", o)
	}
	if last, _ := b.LastSeq(ctx, "dsu"); last != 4 {
		t.Fatalf("seq %d after the batch came again, want 4 (its messages' keys)", last)
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

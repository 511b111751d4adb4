package clustertest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

func init() {
	miscTests = append(miscTests,
		subtest{"IdempotencyClaimStoreRelease", testIdempotency},
		subtest{"IdempotencyOneClaimUnderRace", testIdempotencyRace},
		subtest{"IdempotencyAbandonedClaimTakenOver", testIdempotencyLease},
	)
	inboxTests = append(inboxTests,
		subtest{"AppendWithKeyStoresOnce", testAppendKeyOnce},
	)
}

func testIdempotency(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	claim := func(key, fp, id string) cluster.KeyClaim {
		t.Helper()
		kc, err := b.ClaimKey(ctx, key, fp, id, longTTL)
		must(t, err)
		return kc
	}
	if kc := claim("k1", "fp1", "id1"); !kc.Claimed || kc.ID != "id1" || kc.Answer != nil || kc.Conflict {
		t.Fatalf("first claim: %+v", kc)
	}
	if kc := claim("k1", "fp1", "id2"); kc.Claimed || kc.Answer != nil || kc.Conflict {
		t.Fatalf("second claim while pending: %+v", kc)
	}
	if kc := claim("k1", "fp2", "id2"); !kc.Conflict || kc.Claimed {
		t.Fatalf("claim with another fingerprint while pending: %+v", kc)
	}
	// A failed call keeps the key's fingerprint and message id: a retry
	// claims it again with the first id; another body is a conflict.
	must(t, b.ReleaseKey(ctx, "k1"))
	if kc := claim("k1", "fp2", "id3"); !kc.Conflict {
		t.Fatalf("claim with another fingerprint after a failure: %+v", kc)
	}
	if kc := claim("k1", "fp1", "id3"); !kc.Claimed || kc.ID != "id1" {
		t.Fatalf("claim after a failure: %+v, want claimed with the first id id1", kc)
	}
	must(t, b.StoreKey(ctx, "k1", []byte(`{"id":"id1","seq":3}`), longTTL))
	if kc := claim("k1", "fp1", "id4"); kc.Claimed || string(kc.Answer) != `{"id":"id1","seq":3}` {
		t.Fatalf("claim after store: %+v", kc)
	}
	if kc := claim("k1", "fp2", "id4"); !kc.Conflict {
		t.Fatalf("claim with another fingerprint after store: %+v", kc)
	}
	// A stored answer is never released.
	must(t, b.ReleaseKey(ctx, "k1"))
	if kc := claim("k1", "fp1", "id5"); kc.Claimed || kc.Answer == nil {
		t.Fatalf("release removed a stored answer: %+v", kc)
	}
	// Expiry.
	kc, err := b.ClaimKey(ctx, "k3", "fp", "id", shortTTL)
	must(t, err)
	if !kc.Claimed {
		t.Fatal("k3 not claimed")
	}
	eventually(t, "claim of k3 expires", func() (bool, string) {
		kc, err := b.ClaimKey(ctx, "k3", "other", "id", longTTL)
		return err == nil && kc.Claimed, fmt.Sprintf("%+v %v", kc, err)
	})
}

func testIdempotencyRace(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kc, err := b.ClaimKey(ctx, "race", "fp", "id", longTTL)
			if err == nil && kc.Claimed {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d callers claimed the same key, want 1", wins)
	}
}

// An append with a key stores the message once: a second append with
// that key (the retry of a call that got an error after the store) answers
// the first seq and stores nothing; the key is bound per user, and
// messages without a key are not affected.
func testAppendKeyOnce(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	one := func(m cluster.InboxAppend) cluster.AppendResult {
		t.Helper()
		out := b.AppendInboxes(ctx, []cluster.InboxAppend{m}, inboxOpts)
		must(t, out[0].Err)
		return out[0].AppendResult
	}
	first := one(cluster.InboxAppend{User: "ka", Payload: []byte("m1"), Key: "k"})
	if first.Seq != 1 || first.Existing {
		t.Fatalf("first append: %+v", first)
	}
	again := one(cluster.InboxAppend{User: "ka", Payload: []byte("m1"), Key: "k"})
	if again.Seq != 1 || !again.Existing {
		t.Fatalf("append with the same key: %+v, want seq 1, existing", again)
	}
	if r := one(cluster.InboxAppend{User: "ka", Payload: []byte("m2")}); r.Seq != 2 || r.Existing {
		t.Fatalf("append without key: %+v", r)
	}
	// In one batch: the repeat within the batch is found too.
	out := b.AppendInboxes(ctx, []cluster.InboxAppend{
		{User: "ka", Payload: []byte("m3"), Key: "k3"},
		{User: "ka", Payload: []byte("m3"), Key: "k3"},
		{User: "kb", Payload: []byte("m1"), Key: "k"},
	}, inboxOpts)
	for i, o := range out {
		must(t, o.Err)
		want := []cluster.AppendResult{{Seq: 3}, {Seq: 3, Existing: true}, {Seq: 1}}[i]
		if o.Seq != want.Seq || o.Existing != want.Existing {
			t.Fatalf("batch message %d: %+v, want %+v", i, o.AppendResult, want)
		}
	}
	rd, err := b.ReadInbox(ctx, "ka", 0, inboxOpts)
	must(t, err)
	if len(rd.Messages) != 3 || rd.LastSeq != 3 {
		t.Fatalf("inbox of ka: %d messages, last seq %d; want 3 and 3", len(rd.Messages), rd.LastSeq)
	}
}

// A claim whose caller never stored nor released it (its reply was lost,
// or its node died mid-publish) is not held for the key's lifetime: after
// ClaimLease a retry with the same body takes it over with the first
// message id; another body is still a conflict.
func testIdempotencyLease(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	started := time.Now()
	kc, err := b.ClaimKey(ctx, "abandoned", "fp", "id1", longTTL)
	must(t, err)
	if !kc.Claimed {
		t.Fatalf("first claim: %+v", kc)
	}
	for deadline := time.Now().Add(cluster.ClaimLease + waitFor); ; {
		kc, err := b.ClaimKey(ctx, "abandoned", "fp", "id2", longTTL)
		must(t, err)
		if kc.Conflict || kc.Answer != nil || (kc.Claimed && kc.ID != "id1") {
			t.Fatalf("retry with the same body: %+v, want pending or taken over with the first id id1", kc)
		}
		if kc.Claimed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned claim was not taken over after %s", cluster.ClaimLease+waitFor)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if time.Since(started) < cluster.ClaimLease {
		t.Fatalf("a pending claim was taken over before its lease ended")
	}
	if kc, err := b.ClaimKey(ctx, "abandoned", "other", "id3", longTTL); err != nil || !kc.Conflict {
		t.Fatalf("another body after the take-over: %+v %v", kc, err)
	}
}

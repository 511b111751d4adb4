package clustertest

import (
	"sync"
	"testing"

	"github.com/wsgate/wsgate/internal/cluster"
)

func init() {
	miscTests = append(miscTests,
		subtest{"IdempotencyClaimStoreRelease", testIdempotency},
		subtest{"IdempotencyOneClaimUnderRace", testIdempotencyRace},
	)
}

func testIdempotency(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	claimed, ans, err := b.ClaimKey(ctx, "k1", longTTL)
	must(t, err)
	if !claimed || ans != nil {
		t.Fatalf("first claim: claimed=%v answer=%q", claimed, ans)
	}
	claimed, ans, err = b.ClaimKey(ctx, "k1", longTTL)
	must(t, err)
	if claimed || ans != nil {
		t.Fatalf("second claim while pending: claimed=%v answer=%q", claimed, ans)
	}
	must(t, b.StoreKey(ctx, "k1", []byte(`{"id":"x","seq":3}`), longTTL))
	claimed, ans, err = b.ClaimKey(ctx, "k1", longTTL)
	must(t, err)
	if claimed || string(ans) != `{"id":"x","seq":3}` {
		t.Fatalf("claim after store: claimed=%v answer=%q", claimed, ans)
	}
	// A failed call releases its claim; a stored answer is never released.
	must(t, b.ReleaseKey(ctx, "k1"))
	if claimed, _, _ := b.ClaimKey(ctx, "k1", longTTL); claimed {
		t.Fatal("release removed a stored answer")
	}
	claimed, _, _ = b.ClaimKey(ctx, "k2", longTTL)
	must(t, b.ReleaseKey(ctx, "k2"))
	if claimed, _, _ = b.ClaimKey(ctx, "k2", longTTL); !claimed {
		t.Fatal("a released key cannot be claimed again")
	}
	// Expiry.
	claimed, _, _ = b.ClaimKey(ctx, "k3", shortTTL)
	if !claimed {
		t.Fatal("k3 not claimed")
	}
	eventually(t, "claim of k3 expires", func() (bool, string) {
		c, _, err := b.ClaimKey(ctx, "k3", longTTL)
		return err == nil && c, "still held"
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
			claimed, _, err := b.ClaimKey(ctx, "race", longTTL)
			if err == nil && claimed {
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

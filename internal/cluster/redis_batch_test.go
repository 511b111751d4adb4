package cluster

import (
	"context"
	"errors"
	"testing"
)

type testReq struct {
	reqBase
	n int
}

// A call whose context is done before its batch is sent is answered and
// never sent; a full queue answers unavailable at once.
func TestBatcherDropsGivenUpCallsAndIsBounded(t *testing.T) {
	var b batcher[*testReq]
	release := make(chan struct{})
	sent := make(chan []int, 16)
	run := func(batch []*testReq) {
		var ns []int
		for _, q := range batch {
			ns = append(ns, q.n)
		}
		sent <- ns
		<-release
		for _, q := range batch {
			q.finish(nil)
		}
	}
	ctx := context.Background()
	first := &testReq{reqBase: newReqBase(ctx), n: 1}
	if err := b.add(run, first); err != nil {
		t.Fatal(err)
	}
	if got := <-sent; len(got) != 1 || got[0] != 1 {
		t.Fatalf("first batch %v", got)
	}
	// While the first batch hangs: one call gives up, one stays.
	gone, cancel := context.WithCancel(ctx)
	givenUp := &testReq{reqBase: newReqBase(gone), n: 2}
	kept := &testReq{reqBase: newReqBase(ctx), n: 3}
	if err := b.add(run, givenUp, kept); err != nil {
		t.Fatal(err)
	}
	cancel()
	// Fill the queue: the call beyond it is refused.
	var filler []*testReq
	for range batchQueueMax - 2 {
		filler = append(filler, &testReq{reqBase: newReqBase(gone), n: 4})
	}
	if err := b.add(run, filler...); err != nil {
		t.Fatal(err)
	}
	if err := b.add(run, &testReq{reqBase: newReqBase(ctx), n: 5}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("add to a full queue: %v, want ErrUnavailable", err)
	}
	close(release)
	if got := <-sent; len(got) != 1 || got[0] != 3 {
		t.Fatalf("second batch %v, want only the call still waiting [3]", got)
	}
	<-givenUp.done
	if !errors.Is(givenUp.err, context.Canceled) || !errors.Is(givenUp.err, ErrUnavailable) {
		t.Fatalf("given-up call answered %v", givenUp.err)
	}
	<-kept.done
	if kept.err != nil {
		t.Fatal(kept.err)
	}
}

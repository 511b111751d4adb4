package clustertest

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/wsgate/wsgate/internal/cluster"
)

// The history of reliable rooms (AppendRooms, ReadRoom, RoomSeqs).
var historyTests = []subtest{
	{"SeqAndNodes", testHistorySeqAndNodes},
	{"ReadSinceAndMost", testHistoryRead},
	{"ReadBefore", testHistoryReadBefore},
	{"ReadBeforeTrimmed", testHistoryReadBeforeTrimmed},
	{"LimitGap", testHistoryLimit},
	{"TTLGap", testHistoryTTL},
	{"IdempotencyKey", testHistoryKey},
	{"RoomSeqs", testHistoryRoomSeqs},
	{"ConcurrentAppends", testHistoryConcurrent},
	{"SeparateFromInbox", testHistorySeparate},
}

func appendRoom(t *testing.T, b cluster.History, room string, n int, opt cluster.InboxOptions) {
	t.Helper()
	msgs := make([]cluster.RoomAppend, n)
	seqs, err := b.RoomSeqs(ctxFor(t), []string{room})
	must(t, err)
	for i := range msgs {
		msgs[i] = cluster.RoomAppend{Room: room, Payload: fmt.Appendf(nil, "m%d", seqs[0]+int64(i)+1)}
	}
	for i, o := range b.AppendRooms(ctxFor(t), msgs, opt) {
		must(t, o.Err)
		if want := seqs[0] + int64(i) + 1; o.Seq != want {
			t.Fatalf("AppendRooms message %d: seq %d, want %d", i, o.Seq, want)
		}
	}
}

func readRoom(t *testing.T, b cluster.History, room string, since int64, most int, opt cluster.InboxOptions) cluster.InboxRead {
	t.Helper()
	r, err := b.ReadRoom(ctxFor(t), room, since, most, opt)
	must(t, err)
	return r
}

func testHistorySeqAndNodes(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	must(t, b.SetRoomInterest(ctx, "n1", []string{"r"}, longTTL))
	must(t, b.SetRoomInterest(ctx, "n2", []string{"r", "other"}, longTTL))
	out := b.AppendRooms(ctx, []cluster.RoomAppend{{Room: "r", Payload: []byte("m1")}, {Room: "r", Payload: []byte("m2")}, {Room: "other", Payload: []byte("m1")}}, inboxOpts)
	for i, want := range []struct {
		seq   int64
		nodes []string
	}{{1, []string{"n1", "n2"}}, {2, []string{"n1", "n2"}}, {1, []string{"n2"}}} {
		must(t, out[i].Err)
		if out[i].Seq != want.seq || !slices.Equal(out[i].Nodes, want.nodes) || out[i].Existing {
			t.Fatalf("append %d: %+v, want seq %d nodes %v", i, out[i].RoomAppendResult, want.seq, want.nodes)
		}
	}
	if o := b.AppendRooms(ctx, []cluster.RoomAppend{{Room: "lonely", Payload: []byte("m1")}}, inboxOpts)[0]; o.Err != nil || o.Seq != 1 || len(o.Nodes) != 0 {
		t.Fatalf("append to a room without interest: %+v", o)
	}
}

func testHistoryRead(t *testing.T, b cluster.Backend) {
	appendRoom(t, b, "r", 5, inboxOpts)
	checkRead(t, "since 0", readRoom(t, b, "r", 0, 0, inboxOpts), []int64{1, 2, 3, 4, 5}, 0, 0, 5, 0)
	checkRead(t, "since 3", readRoom(t, b, "r", 3, 0, inboxOpts), []int64{4, 5}, 0, 0, 5, 0)
	checkRead(t, "since 1, at most 2", readRoom(t, b, "r", 1, 2, inboxOpts), []int64{2, 3}, 0, 0, 5, 0)
	checkRead(t, "since above", readRoom(t, b, "r", 9, 0, inboxOpts), []int64{}, 0, 0, 5, 0)
	checkRead(t, "never reliable", readRoom(t, b, "nothing", 0, 0, inboxOpts), []int64{}, 0, 0, 0, 0)
}

func readBefore(t *testing.T, b cluster.History, room string, before int64, most int, opt cluster.InboxOptions) cluster.InboxRead {
	t.Helper()
	r, err := b.ReadRoomBefore(ctxFor(t), room, before, most, opt)
	must(t, err)
	return r
}

// History pages (contract 19): seq < before, newest first, at most most.
func testHistoryReadBefore(t *testing.T, b cluster.Backend) {
	appendRoom(t, b, "r", 5, inboxOpts)
	checkRead(t, "all", readBefore(t, b, "r", 0, 0, inboxOpts), []int64{5, 4, 3, 2, 1}, 0, 0, 5, 0)
	checkRead(t, "before 4", readBefore(t, b, "r", 4, 0, inboxOpts), []int64{3, 2, 1}, 0, 0, 5, 0)
	checkRead(t, "before 4, at most 2", readBefore(t, b, "r", 4, 2, inboxOpts), []int64{3, 2}, 0, 0, 5, 0)
	checkRead(t, "newest 1", readBefore(t, b, "r", 0, 1, inboxOpts), []int64{5}, 0, 0, 5, 0)
	checkRead(t, "before above last", readBefore(t, b, "r", 99, 3, inboxOpts), []int64{5, 4, 3}, 0, 0, 5, 0)
	checkRead(t, "before 1", readBefore(t, b, "r", 1, 0, inboxOpts), []int64{}, 0, 0, 5, 0)
	checkRead(t, "never reliable", readBefore(t, b, "nothing", 0, 0, inboxOpts), []int64{}, 0, 0, 0, 0)
	// Paging backwards by the oldest seq of each page gives every
	// message once, newest first.
	var all []int64
	for before := int64(0); ; {
		r := readBefore(t, b, "r", before, 2, inboxOpts)
		if len(r.Messages) == 0 {
			break
		}
		all = append(all, seqs(r)...)
		before = r.Messages[len(r.Messages)-1].Seq
	}
	if !slices.Equal(all, []int64{5, 4, 3, 2, 1}) {
		t.Fatalf("pages of 2: %v, want [5 4 3 2 1]", all)
	}
}

// A page read backwards trims first: what the limit or the TTL dropped is
// not returned.
func testHistoryReadBeforeTrimmed(t *testing.T, b cluster.Backend) {
	opt := cluster.InboxOptions{Limit: 3, TTL: longTTL}
	appendRoom(t, b, "r", 7, opt)
	checkRead(t, "all", readBefore(t, b, "r", 0, 0, opt), []int64{7, 6, 5}, 0, 0, 7, 0)
	checkRead(t, "before 6", readBefore(t, b, "r", 6, 10, opt), []int64{5}, 0, 0, 7, 0)
	checkRead(t, "before 5", readBefore(t, b, "r", 5, 10, opt), []int64{}, 0, 0, 7, 0)
	short := cluster.InboxOptions{Limit: 100, TTL: shortTTL}
	appendRoom(t, b, "e", 2, short)
	eventually(t, "room history expired", func() (bool, string) {
		r := readBefore(t, b, "e", 0, 0, short)
		return len(r.Messages) == 0, describe(r)
	})
	checkRead(t, "after expiry", readBefore(t, b, "e", 0, 0, short), []int64{}, 0, 0, 2, 0)
}

func testHistoryLimit(t *testing.T, b cluster.Backend) {
	opt := cluster.InboxOptions{Limit: 3, TTL: longTTL}
	appendRoom(t, b, "r", 7, opt)
	checkRead(t, "since 0", readRoom(t, b, "r", 0, 0, opt), []int64{5, 6, 7}, 1, 4, 7, 0)
	checkRead(t, "since 2", readRoom(t, b, "r", 2, 0, opt), []int64{5, 6, 7}, 3, 4, 7, 0)
	checkRead(t, "since 4", readRoom(t, b, "r", 4, 0, opt), []int64{5, 6, 7}, 0, 0, 7, 0)
	checkRead(t, "since 0, at most 1", readRoom(t, b, "r", 0, 1, opt), []int64{5}, 1, 4, 7, 0)
}

func testHistoryTTL(t *testing.T, b cluster.Backend) {
	opt := cluster.InboxOptions{Limit: 100, TTL: shortTTL}
	appendRoom(t, b, "r", 2, opt)
	eventually(t, "room history expired", func() (bool, string) {
		r := readRoom(t, b, "r", 0, 0, opt)
		return len(r.Messages) == 0, describe(r)
	})
	checkRead(t, "after expiry", readRoom(t, b, "r", 0, 0, opt), []int64{}, 1, 2, 2, 0)
	appendRoom(t, b, "r", 1, opt)
	checkRead(t, "seq goes on after expiry", readRoom(t, b, "r", 0, 0, opt), []int64{3}, 1, 2, 3, 0)
}

func testHistoryKey(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	one := func(m cluster.RoomAppend) cluster.RoomAppendResult {
		t.Helper()
		o := b.AppendRooms(ctx, []cluster.RoomAppend{m}, inboxOpts)[0]
		must(t, o.Err)
		return o.RoomAppendResult
	}
	if r := one(cluster.RoomAppend{Room: "r", Payload: []byte("m1"), Key: "k"}); r.Seq != 1 || r.Existing {
		t.Fatalf("first append: %+v", r)
	}
	if r := one(cluster.RoomAppend{Room: "r", Payload: []byte("m1"), Key: "k"}); r.Seq != 1 || !r.Existing {
		t.Fatalf("append with the same key: %+v, want seq 1, existing", r)
	}
	if r := one(cluster.RoomAppend{Room: "other", Payload: []byte("m1"), Key: "k"}); r.Seq != 1 || r.Existing {
		t.Fatalf("same key on another room: %+v, want a new message", r)
	}
	out := b.AppendRooms(ctx, []cluster.RoomAppend{{Room: "r", Payload: []byte("m2"), Key: "k2"}, {Room: "r", Payload: []byte("m2"), Key: "k2"}}, inboxOpts)
	if out[0].Seq != 2 || out[0].Existing || out[1].Seq != 2 || !out[1].Existing {
		t.Fatalf("repeat within a batch: %+v %+v", out[0], out[1])
	}
	checkRead(t, "history", readRoom(t, b, "r", 0, 0, inboxOpts), []int64{1, 2}, 0, 0, 2, 0)
}

func testHistoryRoomSeqs(t *testing.T, b cluster.Backend) {
	appendRoom(t, b, "a", 3, inboxOpts)
	appendRoom(t, b, "b", 1, inboxOpts)
	got, err := b.RoomSeqs(ctxFor(t), []string{"b", "none", "a"})
	must(t, err)
	if !slices.Equal(got, []int64{1, 0, 3}) {
		t.Fatalf("RoomSeqs = %v, want [1 0 3]", got)
	}
	if got, err := b.RoomSeqs(ctxFor(t), nil); err != nil || len(got) != 0 {
		t.Fatalf("RoomSeqs(nil) = %v, %v", got, err)
	}
}

// Concurrent appends to one room get every seq exactly once.
func testHistoryConcurrent(t *testing.T, b cluster.Backend) {
	const workers, each = 8, 25
	var mu sync.Mutex
	seen := map[int64]bool{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				o := b.AppendRooms(ctxFor(t), []cluster.RoomAppend{{Room: "r", Payload: []byte("x")}}, cluster.InboxOptions{Limit: 1000, TTL: longTTL})[0]
				if o.Err != nil {
					t.Error(o.Err)
					return
				}
				mu.Lock()
				if seen[o.Seq] {
					t.Errorf("seq %d assigned twice", o.Seq)
				}
				seen[o.Seq] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for s := int64(1); s <= workers*each; s++ {
		if !seen[s] {
			t.Fatalf("seq %d never assigned (%d seqs)", s, len(seen))
		}
	}
}

// A room's history and a user's inbox of the same name never mix.
func testHistorySeparate(t *testing.T, b cluster.Backend) {
	appendN(t, b, "x", 2, inboxOpts)
	appendRoom(t, b, "x", 1, inboxOpts)
	checkRead(t, "room x", readRoom(t, b, "x", 0, 0, inboxOpts), []int64{1}, 0, 0, 1, 0)
	checkRead(t, "inbox x", read(t, b, "x", 0, inboxOpts), []int64{1, 2}, 0, 0, 2, 0)
}

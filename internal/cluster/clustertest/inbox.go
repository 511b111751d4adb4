package clustertest

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/wsgate/wsgate/internal/cluster"
)

var inboxTests = []subtest{
	{"SeqIncrements", testInboxSeq},
	{"AppendReturnsRoutes", testInboxRoutes},
	{"ReadSince", testInboxReadSince},
	{"PayloadIntact", testInboxPayload},
	{"LimitDropsOldestWithGap", testInboxLimit},
	{"TTLExpiryWithGap", testInboxTTL},
	{"AckCumulative", testInboxAck},
	{"AckedNotReportedAsGap", testInboxAckedNoGap},
	{"ConcurrentAppends", testInboxConcurrent},
	{"AppendMany", testInboxAppendMany},
	{"AppendManyConcurrent", testInboxAppendManyConcurrent},
}

var inboxOpts = cluster.InboxOptions{Limit: 100, TTL: longTTL}

func appendN(t *testing.T, b cluster.Inbox, user string, n int, opt cluster.InboxOptions) {
	t.Helper()
	for range n {
		last, err := b.LastSeq(ctxFor(t), user)
		must(t, err)
		res, err := b.AppendInbox(ctxFor(t), user, fmt.Appendf(nil, "m%d", last+1), opt)
		must(t, err)
		if res.Seq != last+1 {
			t.Fatalf("AppendInbox seq = %d, want %d", res.Seq, last+1)
		}
	}
}

func read(t *testing.T, b cluster.Inbox, user string, since int64, opt cluster.InboxOptions) cluster.InboxRead {
	t.Helper()
	r, err := b.ReadInbox(ctxFor(t), user, since, opt)
	must(t, err)
	return r
}

func seqs(r cluster.InboxRead) []int64 {
	out := []int64{}
	for _, m := range r.Messages {
		out = append(out, m.Seq)
	}
	return out
}

func describe(r cluster.InboxRead) string {
	return fmt.Sprintf("seqs %v gap %d..%d last %d acked %d", seqs(r), r.GapFrom, r.GapTo, r.LastSeq, r.Acked)
}

// checkRead compares a read with the expected seqs (payloads must be "m<seq>"),
// gap, last seq and ack.
func checkRead(t *testing.T, what string, r cluster.InboxRead, want []int64, gapFrom, gapTo, last, acked int64) {
	t.Helper()
	if !slices.Equal(seqs(r), want) || r.GapFrom != gapFrom || r.GapTo != gapTo || r.LastSeq != last || r.Acked != acked {
		t.Fatalf("%s: got %s; want seqs %v gap %d..%d last %d acked %d", what, describe(r), want, gapFrom, gapTo, last, acked)
	}
	for _, m := range r.Messages {
		if want := fmt.Sprintf("m%d", m.Seq); string(m.Payload) != want {
			t.Fatalf("%s: payload of seq %d = %q, want %q", what, m.Seq, m.Payload, want)
		}
	}
}

func testInboxSeq(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	last, err := b.LastSeq(ctx, "alice")
	must(t, err)
	if last != 0 {
		t.Fatalf("LastSeq of a new user = %d", last)
	}
	checkRead(t, "ReadInbox of a new user", read(t, b, "alice", 0, inboxOpts), nil, 0, 0, 0, 0)
	for want := int64(1); want <= 3; want++ {
		res, err := b.AppendInbox(ctx, "alice", fmt.Appendf(nil, "m%d", want), inboxOpts)
		must(t, err)
		if res.Seq != want {
			t.Fatalf("seq = %d, want %d", res.Seq, want)
		}
	}
	last, err = b.LastSeq(ctx, "alice")
	must(t, err)
	if last != 3 {
		t.Fatalf("LastSeq = %d, want 3", last)
	}
	// Seqs are per user.
	res, err := b.AppendInbox(ctx, "bob", []byte("m1"), inboxOpts)
	must(t, err)
	if res.Seq != 1 {
		t.Fatalf("bob's first seq = %d", res.Seq)
	}
	lasts, err := b.LastSeqs(ctx, []string{"alice", "nobody", "bob"})
	must(t, err)
	if !slices.Equal(lasts, []int64{3, 0, 1}) {
		t.Fatalf("LastSeqs = %v, want [3 0 1]", lasts)
	}
	// Never reused, even once everything was acknowledged and trimmed.
	must(t, b.Ack(ctx, "alice", "", 3, inboxOpts))
	res, err = b.AppendInbox(ctx, "alice", []byte("m4"), inboxOpts)
	must(t, err)
	if res.Seq != 4 {
		t.Fatalf("seq after acknowledging everything = %d, want 4", res.Seq)
	}
}

func testInboxRoutes(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	res, err := b.AppendInbox(ctx, "alice", []byte("m1"), inboxOpts)
	must(t, err)
	if len(res.Routes) != 0 {
		t.Fatalf("routes of an offline user = %+v", res.Routes)
	}
	r1 := cluster.Route{User: "alice", ConnID: "c1", Node: "n1", ConnectedAt: 11}
	r2 := cluster.Route{User: "alice", ConnID: "c2", Node: "n2", ConnectedAt: 12}
	gone := cluster.Route{User: "alice", ConnID: "c3", Node: "n3", ConnectedAt: 13}
	other := cluster.Route{User: "bob", ConnID: "c4", Node: "n1", ConnectedAt: 14}
	must(t, b.AddRoutes(ctx, []cluster.Route{r1, r2, gone, other}, longTTL))
	must(t, b.RemoveRoute(ctx, "alice", "c3"))
	res, err = b.AppendInbox(ctx, "alice", []byte("m2"), inboxOpts)
	must(t, err)
	if res.Seq != 2 {
		t.Fatalf("seq = %d, want 2", res.Seq)
	}
	checkRoutes(t, "AppendInbox routes", res.Routes, r1, r2)

	expiring := cluster.Route{User: "carol", ConnID: "c5", Node: "n1", ConnectedAt: 15}
	must(t, b.AddRoutes(ctx, []cluster.Route{expiring}, shortTTL))
	eventually(t, "carol's route expires", func() (bool, string) {
		res, err := b.AppendInbox(ctx, "carol", []byte("x"), inboxOpts)
		must(t, err)
		return len(res.Routes) == 0, routeConns(res.Routes)
	})
}

func testInboxReadSince(t *testing.T, b cluster.Backend) {
	appendN(t, b, "alice", 3, inboxOpts)
	checkRead(t, "since 0", read(t, b, "alice", 0, inboxOpts), []int64{1, 2, 3}, 0, 0, 3, 0)
	checkRead(t, "since 2", read(t, b, "alice", 2, inboxOpts), []int64{3}, 0, 0, 3, 0)
	checkRead(t, "since 3", read(t, b, "alice", 3, inboxOpts), nil, 0, 0, 3, 0)
	checkRead(t, "since above last", read(t, b, "alice", 10, inboxOpts), nil, 0, 0, 3, 0)
	// Reading changes nothing.
	checkRead(t, "since 0 again", read(t, b, "alice", 0, inboxOpts), []int64{1, 2, 3}, 0, 0, 3, 0)
}

func testInboxPayload(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	all := make([]byte, 0, 512)
	for i := range 256 {
		all = append(all, byte(i))
	}
	all = append(all, []byte("|:{}\x00\r\n$*-+")...)
	payloads := [][]byte{all, {}, bytes.Repeat([]byte("x"), 64<<10), []byte("m4")}
	for _, p := range payloads {
		_, err := b.AppendInbox(ctx, "alice", p, inboxOpts)
		must(t, err)
	}
	r := read(t, b, "alice", 0, inboxOpts)
	if len(r.Messages) != len(payloads) {
		t.Fatalf("read %s", describe(r))
	}
	for i, m := range r.Messages {
		if m.Seq != int64(i+1) || !bytes.Equal(m.Payload, payloads[i]) {
			t.Fatalf("message %d: seq %d, payload of %d bytes differs from the %d appended", i, m.Seq, len(m.Payload), len(payloads[i]))
		}
	}
}

func testInboxLimit(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	opt := cluster.InboxOptions{Limit: 3, TTL: longTTL}
	appendN(t, b, "alice", 5, opt)
	checkRead(t, "since 0", read(t, b, "alice", 0, opt), []int64{3, 4, 5}, 1, 2, 5, 0)
	checkRead(t, "since 1", read(t, b, "alice", 1, opt), []int64{3, 4, 5}, 2, 2, 5, 0)
	checkRead(t, "since 2", read(t, b, "alice", 2, opt), []int64{3, 4, 5}, 0, 0, 5, 0)
	checkRead(t, "since 4", read(t, b, "alice", 4, opt), []int64{5}, 0, 0, 5, 0)
	// An acknowledged message is not missing, even if it was dropped.
	must(t, b.Ack(ctx, "alice", "", 1, inboxOpts))
	checkRead(t, "since 0 after ack 1", read(t, b, "alice", 0, opt), []int64{3, 4, 5}, 2, 2, 5, 1)
	// Seqs never reused; the gap grows with the drops.
	appendN(t, b, "alice", 2, opt)
	checkRead(t, "since 0 after 2 more", read(t, b, "alice", 0, opt), []int64{5, 6, 7}, 2, 4, 7, 1)
	// A lower limit at read time applies at once.
	low := cluster.InboxOptions{Limit: 1, TTL: longTTL}
	checkRead(t, "since 0 with limit 1", read(t, b, "alice", 0, low), []int64{7}, 2, 6, 7, 1)
}

func testInboxTTL(t *testing.T, b cluster.Backend) {
	short := cluster.InboxOptions{Limit: 100, TTL: shortTTL}
	appendN(t, b, "alice", 2, short)
	eventually(t, "messages expire", func() (bool, string) {
		r := read(t, b, "alice", 0, short)
		return len(r.Messages) == 0, describe(r)
	})
	checkRead(t, "since 0 after expiry", read(t, b, "alice", 0, short), nil, 1, 2, 2, 0)
	checkRead(t, "since 1 after expiry", read(t, b, "alice", 1, short), nil, 2, 2, 2, 0)
	// The seq survives the expiry of every message.
	appendN(t, b, "alice", 1, inboxOpts)
	checkRead(t, "since 0 after a new message", read(t, b, "alice", 0, inboxOpts), []int64{3}, 1, 2, 3, 0)
	checkRead(t, "since 2 after a new message", read(t, b, "alice", 2, inboxOpts), []int64{3}, 0, 0, 3, 0)
}

func testInboxAck(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	must(t, b.Ack(ctx, "nobody", "", 5, inboxOpts)) // unknown user: no error
	appendN(t, b, "alice", 5, inboxOpts)
	must(t, b.Ack(ctx, "alice", "", 3, inboxOpts))
	checkRead(t, "after ack 3", read(t, b, "alice", 0, inboxOpts), []int64{4, 5}, 0, 0, 5, 3)
	must(t, b.Ack(ctx, "alice", "", 2, inboxOpts)) // never backwards
	checkRead(t, "after ack 2", read(t, b, "alice", 0, inboxOpts), []int64{4, 5}, 0, 0, 5, 3)
	must(t, b.Ack(ctx, "alice", "", 3, inboxOpts)) // same again
	checkRead(t, "after ack 3 again", read(t, b, "alice", 0, inboxOpts), []int64{4, 5}, 0, 0, 5, 3)
	// An ack beyond the last seq acknowledges what exists, nothing to come.
	must(t, b.Ack(ctx, "alice", "", 100, inboxOpts))
	checkRead(t, "after ack 100", read(t, b, "alice", 0, inboxOpts), nil, 0, 0, 5, 5)
	appendN(t, b, "alice", 1, inboxOpts)
	checkRead(t, "after one more", read(t, b, "alice", 0, inboxOpts), []int64{6}, 0, 0, 6, 5)
	last, err := b.LastSeq(ctx, "alice")
	must(t, err)
	if last != 6 {
		t.Fatalf("LastSeq = %d, want 6", last)
	}
}

func testInboxAckedNoGap(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	short := cluster.InboxOptions{Limit: 100, TTL: shortTTL}
	appendN(t, b, "alice", 3, short)
	must(t, b.Ack(ctx, "alice", "", 2, inboxOpts))
	eventually(t, "message 3 expires", func() (bool, string) {
		r := read(t, b, "alice", 0, short)
		return len(r.Messages) == 0, describe(r)
	})
	checkRead(t, "since 0", read(t, b, "alice", 0, short), nil, 3, 3, 3, 2)
	must(t, b.Ack(ctx, "alice", "", 3, inboxOpts))
	checkRead(t, "since 0 after ack 3", read(t, b, "alice", 0, short), nil, 0, 0, 3, 3)
}

func testInboxConcurrent(t *testing.T, b cluster.Backend) {
	const n = 50
	var wg sync.WaitGroup
	got := make([]int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			res, err := b.AppendInbox(ctxFor(t), "alice", fmt.Appendf(nil, "g%d", i), inboxOpts)
			got[i], errs[i] = res.Seq, err
		})
	}
	wg.Wait()
	for _, err := range errs {
		must(t, err)
	}
	bySeq := map[int64]string{}
	for i, s := range got {
		bySeq[s] = fmt.Sprintf("g%d", i)
	}
	sorted := slices.Sorted(slices.Values(got))
	for i, s := range sorted {
		if s != int64(i+1) {
			t.Fatalf("seqs of %d concurrent appends = %v, want 1..%d each once", n, sorted, n)
		}
	}
	r := read(t, b, "alice", 0, inboxOpts)
	if len(r.Messages) != n || r.LastSeq != n {
		t.Fatalf("read after concurrent appends: %s", describe(r))
	}
	for i, m := range r.Messages {
		if m.Seq != int64(i+1) || string(m.Payload) != bySeq[m.Seq] {
			t.Fatalf("message %d: seq %d payload %q, want seq %d payload %q", i, m.Seq, m.Payload, i+1, bySeq[int64(i+1)])
		}
	}
}

// AppendInboxes: each message its own seq in the order given (per user),
// with the user's routes, exactly as AppendInbox one by one.
func testInboxAppendMany(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	if out := b.AppendInboxes(ctx, nil, inboxOpts); len(out) != 0 {
		t.Fatalf("AppendInboxes of nothing = %+v", out)
	}
	r1 := cluster.Route{User: "alice", ConnID: "c1", Node: "n1", ConnectedAt: 11}
	must(t, b.AddRoutes(ctx, []cluster.Route{r1}, longTTL))
	appendN(t, b, "bob", 2, inboxOpts)
	msgs := []cluster.InboxAppend{
		{User: "alice", Payload: []byte("m1")},
		{User: "bob", Payload: []byte("m3")},
		{User: "alice", Payload: []byte("m2")},
		{User: "carol", Payload: []byte("m1")},
		{User: "alice", Payload: []byte("m3")},
	}
	out := b.AppendInboxes(ctx, msgs, inboxOpts)
	if len(out) != len(msgs) {
		t.Fatalf("%d outcomes for %d messages", len(out), len(msgs))
	}
	wantSeq := []int64{1, 3, 2, 1, 3}
	for i, o := range out {
		must(t, o.Err)
		if o.Seq != wantSeq[i] {
			t.Fatalf("message %d (%s): seq %d, want %d", i, msgs[i].User, o.Seq, wantSeq[i])
		}
		if msgs[i].User == "alice" {
			checkRoutes(t, "alice's routes", o.Routes, r1)
		} else if len(o.Routes) != 0 {
			t.Fatalf("routes of offline %s = %+v", msgs[i].User, o.Routes)
		}
	}
	checkRead(t, "alice", read(t, b, "alice", 0, inboxOpts), []int64{1, 2, 3}, 0, 0, 3, 0)
	checkRead(t, "bob", read(t, b, "bob", 0, inboxOpts), []int64{1, 2, 3}, 0, 0, 3, 0)
	checkRead(t, "carol", read(t, b, "carol", 0, inboxOpts), []int64{1}, 0, 0, 1, 0)
	// The inbox limit applies per append, as with AppendInbox.
	limit := cluster.InboxOptions{Limit: 2, TTL: longTTL}
	out = b.AppendInboxes(ctx, []cluster.InboxAppend{{User: "carol", Payload: []byte("m2")}, {User: "carol", Payload: []byte("m3")}, {User: "carol", Payload: []byte("m4")}}, limit)
	for _, o := range out {
		must(t, o.Err)
	}
	checkRead(t, "carol after a limited batch", read(t, b, "carol", 0, limit), []int64{3, 4}, 1, 2, 4, 0)
}

// Batches and single appends of one user, concurrently: every seq once,
// and within each batch increasing in batch order.
func testInboxAppendManyConcurrent(t *testing.T, b cluster.Backend) {
	const batches, per = 8, 20
	opt := cluster.InboxOptions{Limit: 1000, TTL: longTTL}
	var wg sync.WaitGroup
	outs := make([][]cluster.AppendOutcome, batches)
	singles := make([]int64, batches)
	errs := make([]error, batches)
	for i := range batches {
		wg.Go(func() {
			msgs := make([]cluster.InboxAppend, per)
			for j := range msgs {
				msgs[j] = cluster.InboxAppend{User: "alice", Payload: fmt.Appendf(nil, "b%d-%d", i, j)}
			}
			outs[i] = b.AppendInboxes(ctxFor(t), msgs, opt)
		})
		wg.Go(func() {
			res, err := b.AppendInbox(ctxFor(t), "alice", fmt.Appendf(nil, "s%d", i), opt)
			singles[i], errs[i] = res.Seq, err
		})
	}
	wg.Wait()
	var all []int64
	payload := map[int64]string{}
	for i, out := range outs {
		for j, o := range out {
			must(t, o.Err)
			if j > 0 && o.Seq <= out[j-1].Seq {
				t.Fatalf("batch %d: seq %d after %d", i, o.Seq, out[j-1].Seq)
			}
			all = append(all, o.Seq)
			payload[o.Seq] = fmt.Sprintf("b%d-%d", i, j)
		}
		must(t, errs[i])
		all = append(all, singles[i])
		payload[singles[i]] = fmt.Sprintf("s%d", i)
	}
	slices.Sort(all)
	for i, s := range all {
		if s != int64(i+1) {
			t.Fatalf("seqs = %v, want 1..%d each once", all, len(all))
		}
	}
	r := read(t, b, "alice", 0, opt)
	if len(r.Messages) != len(all) {
		t.Fatalf("read: %s", describe(r))
	}
	for _, m := range r.Messages {
		if string(m.Payload) != payload[m.Seq] {
			t.Fatalf("seq %d holds %q, want %q", m.Seq, m.Payload, payload[m.Seq])
		}
	}
}

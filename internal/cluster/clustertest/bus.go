package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/wsgate/wsgate/internal/cluster"
)

var busTests = []subtest{
	{"SendReachesOnlyTargets", testBusSend},
	{"SendToSeveralNodes", testBusSendMany},
	{"SendEach", testBusSendEach},
	{"Broadcast", testBusBroadcast},
	{"PayloadIntactAndOrdered", testBusPayload},
	{"StopsWhenContextEnds", testBusStop},
}

func subscribe(t *testing.T, b cluster.Backend, node string) *recorder {
	t.Helper()
	r := &recorder{}
	must(t, b.Subscribe(ctxFor(t), node, r.handle))
	return r
}

func checkMsgs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s received %q, want %q", what, got, want)
	}
}

func testBusSend(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	a, bb := subscribe(t, b, "A"), subscribe(t, b, "B")
	must(t, b.Send(ctx, []string{"A"}, []byte("to-a")))
	// Messages to one subscriber arrive in order, so once B has the marker
	// sent after A's message, B would have A's message too had it leaked.
	must(t, b.Send(ctx, []string{"B"}, []byte("marker-b")))
	must(t, b.Send(ctx, []string{"A"}, []byte("marker-a")))
	checkMsgs(t, "B", bb.await(t, "B gets its marker", 1), "marker-b")
	checkMsgs(t, "A", a.await(t, "A gets its messages", 2), "to-a", "marker-a")
	must(t, b.Send(ctx, nil, []byte("nobody"))) // no target: no error
	must(t, b.Send(ctx, []string{"C"}, []byte("no subscriber")))
}

func testBusSendMany(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	a, bb, c := subscribe(t, b, "A"), subscribe(t, b, "B"), subscribe(t, b, "C")
	must(t, b.Send(ctx, []string{"A", "B", "A"}, []byte("x"))) // A named twice gets it once
	must(t, b.Send(ctx, []string{"A", "B", "C"}, []byte("end")))
	checkMsgs(t, "A", a.await(t, "A", 2), "x", "end")
	checkMsgs(t, "B", bb.await(t, "B", 2), "x", "end")
	checkMsgs(t, "C", c.await(t, "C", 1), "end")
}

func testBusSendEach(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	a, bb, c := subscribe(t, b, "A"), subscribe(t, b, "B"), subscribe(t, b, "C")
	must(t, b.SendEach(ctx, nil))
	must(t, b.Send(ctx, []string{"A"}, []byte("a0")))
	must(t, b.SendEach(ctx, []cluster.BusMessage{
		{Node: "A", Payload: []byte("a1")},
		{Node: "B", Payload: []byte("b1")},
		{Node: "A", Payload: []byte("a2")},
		{Node: "D", Payload: []byte("nobody")},
	}))
	must(t, b.Send(ctx, []string{"A", "B", "C"}, []byte("end")))
	checkMsgs(t, "A", a.await(t, "A", 4), "a0", "a1", "a2", "end")
	checkMsgs(t, "B", bb.await(t, "B", 2), "b1", "end")
	checkMsgs(t, "C", c.await(t, "C", 1), "end")
}

func testBusBroadcast(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	a, bb := subscribe(t, b, "A"), subscribe(t, b, "B")
	must(t, b.Broadcast(ctx, []byte("all-1")))
	must(t, b.Send(ctx, []string{"A"}, []byte("a")))
	must(t, b.Broadcast(ctx, []byte("all-2")))
	checkMsgs(t, "A", a.await(t, "A", 3), "all-1", "a", "all-2")
	checkMsgs(t, "B", bb.await(t, "B", 2), "all-1", "all-2")
}

func testBusPayload(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	a := subscribe(t, b, "A")
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	big := bytes.Repeat([]byte("0123456789"), 10_000)
	want := []string{string(binary), "", string(big)}
	for i := range 100 {
		want = append(want, fmt.Sprintf("seq-%03d", i))
	}
	for _, p := range want {
		must(t, b.Send(ctx, []string{"A"}, []byte(p)))
	}
	got := a.await(t, "A gets everything", len(want))
	if !slices.Equal(got, want) {
		t.Fatalf("A received %d messages, differing from the %d sent (payload or order)", len(got), len(want))
	}
}

func testBusStop(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	stopped := &recorder{}
	sctx, cancel := context.WithCancel(ctx)
	must(t, b.Subscribe(sctx, "A", stopped.handle))
	live := subscribe(t, b, "A")
	must(t, b.Send(ctx, []string{"A"}, []byte("before")))
	stopped.await(t, "first subscription gets a message", 1)
	live.await(t, "second subscription gets a message", 1)
	cancel()
	must(t, b.Send(ctx, []string{"A"}, []byte("after")))
	must(t, b.Broadcast(ctx, []byte("after-all")))
	checkMsgs(t, "live subscription", live.await(t, "live subscription", 3), "before", "after", "after-all")
	checkMsgs(t, "cancelled subscription", stopped.got(), "before")
}

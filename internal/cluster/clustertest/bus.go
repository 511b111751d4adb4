package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
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
	{"OrderPerPublisherUnderLoad", testBusOrderUnderLoad},
	{"ManyNodes", testBusManyNodes},
}

// RunBus runs the bus subtests alone (as Run does), e.g. against a Redis
// backend in a mode that Run's backends do not use.
func RunBus(t *testing.T, newBackend func(t *testing.T) cluster.Backend) {
	for _, st := range busTests {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t)
			t.Cleanup(func() { _ = b.Close() })
			st.run(t, b)
		})
	}
}

func subscribe(t *testing.T, b cluster.Bus, node string) *recorder {
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

// Several publishers send concurrently to several nodes, with Send,
// SendEach and Broadcast mixed: each node gets, from each publisher,
// exactly what it was sent, in the order sent.
func testBusOrderUnderLoad(t *testing.T, b cluster.Backend) {
	const (
		publishers = 4
		nodes      = 5
		perPub     = 300
	)
	ctx := ctxFor(t)
	subs := make([]*recorder, nodes)
	names := make([]string, nodes)
	for i := range subs {
		names[i] = fmt.Sprintf("N%d", i)
		subs[i] = subscribe(t, b, names[i])
	}
	// want[p][n]: what publisher p sent node n, in order.
	want := make([][][]string, publishers)
	errs := make(chan error, publishers)
	for p := range publishers {
		want[p] = make([][]string, nodes)
		go func() {
			errs <- func() error {
				for i := 0; i < perPub; i++ {
					msg := fmt.Sprintf("p%d:%d", p, i)
					switch {
					case i%25 == 0:
						for n := range nodes {
							want[p][n] = append(want[p][n], msg)
						}
						if err := b.Broadcast(ctx, []byte(msg)); err != nil {
							return err
						}
					case i%5 == 0:
						// One SendEach: a message to each of two nodes, then
						// a second one to the first.
						n1, n2 := i%nodes, (i+1)%nodes
						want[p][n1] = append(want[p][n1], msg+"a", msg+"c")
						want[p][n2] = append(want[p][n2], msg+"b")
						if err := b.SendEach(ctx, []cluster.BusMessage{
							{Node: names[n1], Payload: []byte(msg + "a")},
							{Node: names[n2], Payload: []byte(msg + "b")},
							{Node: names[n1], Payload: []byte(msg + "c")},
						}); err != nil {
							return err
						}
					default:
						n := (i * (p + 1)) % nodes
						want[p][n] = append(want[p][n], msg)
						if err := b.Send(ctx, []string{names[n]}, []byte(msg)); err != nil {
							return err
						}
					}
				}
				return nil
			}()
		}()
	}
	for range publishers {
		must(t, <-errs)
	}
	for n, r := range subs {
		total := 0
		for p := range publishers {
			total += len(want[p][n])
		}
		got := r.await(t, names[n]+" gets everything", total)
		for p := range publishers {
			var mine []string
			for _, m := range got {
				if strings.HasPrefix(m, fmt.Sprintf("p%d:", p)) {
					mine = append(mine, m)
				}
			}
			if !slices.Equal(mine, want[p][n]) {
				t.Fatalf("%s got %d messages of publisher %d, want the %d sent in order; first difference at %d",
					names[n], len(mine), p, len(want[p][n]), firstDiff(mine, want[p][n]))
			}
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Many nodes (their channels spread over every shard of a Redis
// Cluster): each gets its own message and each broadcast once, nothing
// of another node's.
func testBusManyNodes(t *testing.T, b cluster.Backend) {
	const nodes = 48
	ctx := ctxFor(t)
	subs := make([]*recorder, nodes)
	for i := range subs {
		subs[i] = subscribe(t, b, fmt.Sprintf("node-%d", i))
	}
	must(t, b.Broadcast(ctx, []byte("all-1")))
	for i := range subs {
		must(t, b.Send(ctx, []string{fmt.Sprintf("node-%d", i)}, []byte(fmt.Sprintf("to-%d", i))))
	}
	must(t, b.Broadcast(ctx, []byte("all-2")))
	for i, r := range subs {
		checkMsgs(t, fmt.Sprintf("node-%d", i), r.await(t, fmt.Sprintf("node-%d", i), 3), "all-1", fmt.Sprintf("to-%d", i), "all-2")
	}
}

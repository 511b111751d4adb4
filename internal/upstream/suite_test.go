package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// sinkHarness is one real sink under test: how to open a sink writing to
// it, how to read back what the real system received, and its faults.
type sinkHarness struct {
	url string // for Open
	opt Options
	// received returns every record the real system holds so far, in the
	// order a consumer sees them (per user, at least).
	received func(t *testing.T) []Record
	// down makes the sink refuse or lose connections until up.
	down, up func()
	// hang makes the sink accept connections but answer nothing until
	// release.
	hang, release func()
	// dedups: a record written again (same id) within the sink's window
	// is stored once (Redis Streams, JetStream).
	dedups bool
}

// runSinkSuite runs the tests every sink must pass.
func runSinkSuite(t *testing.T, newHarness func(t *testing.T) *sinkHarness) {
	t.Run("OrderAndFields", func(t *testing.T) {
		h := newHarness(t)
		s := openSink(t, h)
		var sent []Record
		for w := range 5 {
			batch := testRecords(fmt.Sprintf("b%d", w), 3, 50+w)
			sent = append(sent, batch...)
			writeOK(t, s, batch)
		}
		got := waitReceived(t, h, len(sent))
		assertExactlyOnceInOrder(t, sent, got)
		for i := range got {
			if got[i].ID == sent[0].ID {
				a, _ := json.Marshal(got[i])
				b, _ := json.Marshal(sent[0])
				if string(a) != string(b) {
					t.Fatalf("record changed on the way:\n got %s\nwant %s", a, b)
				}
			}
		}
	})
	t.Run("DownThenBack", func(t *testing.T) {
		h := newHarness(t)
		s := openSink(t, h)
		var accepted []Record
		write := func(prefix string, n int) (ok, failed int) {
			for i := range n {
				recs := testRecords(fmt.Sprintf("%s%d", prefix, i), 2, 2)
				ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
				err := s.Write(ctx, recs)
				cancel()
				if err == nil {
					accepted = append(accepted, recs...)
					ok++
				} else {
					failed++
				}
			}
			return ok, failed
		}
		if ok, _ := write("before", 5); ok != 5 {
			t.Fatalf("%d of 5 writes accepted before the fault", ok)
		}
		h.down()
		if ok, failed := write("during", 3); failed == 0 {
			t.Fatalf("all %d writes accepted while the sink was down", ok)
		}
		h.up()
		// After recovery the sink must accept again (a client retries).
		deadline := time.Now().Add(30 * time.Second)
		for {
			if ok, _ := write("after", 1); ok == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the sink accepts nothing 30 s after it came back")
			}
		}
		write("more", 5)
		got := waitReceivedIDs(t, h, accepted)
		assertAcceptedPresentInOrder(t, accepted, got)
	})
	t.Run("RewrittenRecordStoredOnce", func(t *testing.T) {
		h := newHarness(t)
		if !h.dedups {
			t.Log("this sink stores a record written twice twice; consumers dedupe by record id")
			return
		}
		s := openSink(t, h)
		recs := testRecords("dup", 2, 3)
		writeOK(t, s, recs)
		writeOK(t, s, append(recs[2:4:4], testRecords("new", 1, 1)...))
		got := waitReceived(t, h, len(recs)+1)
		assertExactlyOnceInOrder(t, append(recs, testRecords("new", 1, 1)...), got)
	})
	t.Run("SlowSinkHonoursContext", func(t *testing.T) {
		h := newHarness(t)
		s := openSink(t, h)
		writeOK(t, s, testRecords("warm", 1, 1)) // connected before the hang
		h.hang()
		defer h.release()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- s.Write(ctx, testRecords("slow", 1, 3)) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Write on a hanging sink returned %v, want a context deadline error", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Write did not return after its context ended")
		}
	})
}

func openSink(t *testing.T, h *sinkHarness) Sink {
	t.Helper()
	s, err := Open(context.Background(), h.url, h.opt)
	if err != nil {
		t.Fatalf("Open(%s): %v", h.url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func writeOK(t *testing.T, s Sink, recs []Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Write(ctx, recs); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// testRecords returns n message records for each of users users, one
// user's after the other's interleaved.
func testRecords(prefix string, users, n int) []Record {
	var out []Record
	for i := range n {
		for u := range users {
			out = append(out, Record{
				Type: "message", ID: fmt.Sprintf("%s-%d-%d", prefix, u, i), User: fmt.Sprintf("u%d", u),
				ConnID: "c" + prefix, Node: "n1", Device: "default", TS: 1700000000000 + int64(i),
				ClientMsgID: fmt.Sprintf("m%d", i), Event: "chat", Data: json.RawMessage(`{"i":` + fmt.Sprint(i) + `}`),
				Info: json.RawMessage(`{"name":"x"}`),
			})
		}
	}
	return out
}

func waitReceived(t *testing.T, h *sinkHarness, n int) []Record {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := h.received(t)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReceivedIDs waits until every record of want was received.
func waitReceivedIDs(t *testing.T, h *sinkHarness, want []Record) []Record {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := h.received(t)
		seen := map[string]bool{}
		for _, r := range got {
			seen[r.ID] = true
		}
		missing := 0
		for _, r := range want {
			if !seen[r.ID] {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertExactlyOnceInOrder: got holds each sent record once, and each
// user's records in the order sent.
func assertExactlyOnceInOrder(t *testing.T, sent, got []Record) {
	t.Helper()
	count := map[string]int{}
	for _, r := range got {
		count[r.ID]++
	}
	for _, r := range sent {
		if count[r.ID] != 1 {
			t.Fatalf("record %s received %d times, want 1 (got %d records for %d sent)", r.ID, count[r.ID], len(got), len(sent))
		}
	}
	assertAcceptedPresentInOrder(t, sent, got)
}

// assertAcceptedPresentInOrder: every accepted record was received, and
// the first receipt of each user's accepted records follows their order.
func assertAcceptedPresentInOrder(t *testing.T, accepted, got []Record) {
	t.Helper()
	pos := map[string]int{}
	for i, r := range got {
		if _, ok := pos[r.ID]; !ok {
			pos[r.ID] = i
		}
	}
	last := map[string]int{}
	lastID := map[string]string{}
	for _, r := range accepted {
		p, ok := pos[r.ID]
		if !ok {
			t.Fatalf("record %s was accepted (Write returned nil) but never received (%d received)", r.ID, len(got))
		}
		if prev, ok := last[r.User]; ok && p < prev {
			t.Fatalf("user %s: record %s received before %s, written after it", r.User, r.ID, lastID[r.User])
		}
		last[r.User], lastID[r.User] = p, r.ID
	}
}

// collector keeps records received by a harness (webhook, tests).
type collector struct {
	mu   sync.Mutex
	recs []Record
}

func (c *collector) add(r ...Record) {
	c.mu.Lock()
	c.recs = append(c.recs, r...)
	c.mu.Unlock()
}

func (c *collector) all() []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Record(nil), c.recs...)
}

func contextWithTimeout(ms int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(ms)*time.Millisecond)
}

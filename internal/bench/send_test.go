package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wsgate/wsgate/internal/testutil/natstest"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// TestSendRedisStreams runs the send scenario twice against a node whose
// sink is a real redis-server: every frame written is answered ok, and
// the stream holds exactly that many records after each run (the second
// run's ids are new, not answered from the first run's deduplication).
func TestSendRedisStreams(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	g := startGateway(t, "dev", "WSGATE_UPSTREAM_URL="+srv.URL()+"?stream=bench-up")
	var records int64
	for run := range 2 {
		res := runBench(t, "send", "--url", g.wsURL(), "--conns", "20", "--rate", "100", "--duration", "2s", "--settle", smokeSettle)
		checkCommon(t, res, 20)
		records += checkSends(t, res.rep, 200).OK
		n, err := srv.Client().XLen(context.Background(), "bench-up").Result()
		if err != nil || n != records {
			t.Errorf("run %d: the stream holds %d records (%v), want the %d sends answered ok", run+1, n, err, records)
		}
	}
}

// TestSendJetStream: the same against nats-server -js, once: the stream
// holds a record for each ok reply.
func TestSendJetStream(t *testing.T) {
	ns := natstest.Start(t)
	g := startGateway(t, "dev", "WSGATE_UPSTREAM_URL="+ns.URL()+"?subject=bench.up&stream=BENCH")
	res := runBench(t, "send", "--url", g.wsURL(), "--conns", "20", "--rate", "100", "--duration", "2s", "--settle", smokeSettle)
	checkCommon(t, res, 20)
	s := checkSends(t, res.rep, 200)
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), "BENCH")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != uint64(s.OK) {
		t.Errorf("the stream holds %d records, want the %d sends answered ok", n, s.OK)
	}
}

// TestSendNoUpstream: without a sink every send is refused (forbidden);
// the bench counts the refusals and fails its check.
func TestSendNoUpstream(t *testing.T) {
	g := startGateway(t, "dev")
	res := runBench(t, "send", "--url", g.wsURL(), "--conns", "5", "--rate", "50", "--duration", "1s", "--settle", smokeSettle)
	s := res.rep.Sends
	if res.code != 1 || s == nil || s.Written != 50 || s.Refused != 50 || s.RefusedCode != "forbidden" || s.OK != 0 || s.Unanswered != 0 {
		t.Fatalf("exit %d, sends %+v: want 50 written, 50 refused forbidden, exit 1", res.code, s)
	}
}

// TestSendSinkPaused: with the sink's redis-server stopped (SIGSTOP) every
// send is answered unavailable, its sink write timed out or it was queued
// behind one that did, and the bench counts each one with its reason.
func TestSendSinkPaused(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	g := startGateway(t, "dev", "WSGATE_UPSTREAM_URL="+srv.URL()+"?stream=bench-up")
	srv.Pause()
	t.Cleanup(srv.Resume)
	res := runBench(t, "send", "--url", g.wsURL(), "--conns", "2", "--rate", "10", "--duration", "1s", "--settle", smokeSettle)
	s := res.rep.Sends
	if res.code != 1 || s == nil || s.Written != 10 || s.Unavailable != 10 || s.OK != 0 || s.Unanswered != 0 {
		t.Fatalf("exit %d, sends %+v: want 10 written, 10 unavailable, exit 1", res.code, s)
	}
	var n int64
	for why, k := range s.UnavailableWhy {
		if !strings.HasPrefix(why, "upstream unavailable") && !strings.HasPrefix(why, "an earlier send of this connection failed") {
			t.Errorf("%d unavailable replies said %q", k, why)
		}
		n += k
	}
	if n != 10 {
		t.Errorf("reasons %v count %d replies, want 10", s.UnavailableWhy, n)
	}
}

// checkSends asserts that want frames were written and each got one ok
// reply with its latency, and that the node's CPU was divided by them.
func checkSends(t *testing.T, rep *Report, want int64) *SendsReport {
	t.Helper()
	s := rep.Sends
	if s == nil {
		t.Fatal("no send figures")
	}
	if s.Written != want || s.OK != want || s.Unavailable != 0 || s.Refused != 0 || s.Unanswered != 0 || s.Foreign != 0 || s.Skipped != 0 {
		t.Errorf("sends %+v: want %d written, all ok", s, want)
	}
	if rep.Latency == nil || rep.Latency.Count != uint64(want) {
		t.Errorf("latency %+v, want %d samples", rep.Latency, want)
	}
	var sent, replies int64
	for _, p := range rep.Timeline {
		sent, replies = sent+p.Sent, replies+p.Received
	}
	if sent != want || replies != want {
		t.Errorf("the timeline has %d sends and %d replies, want %d", sent, replies, want)
	}
	if s.CPUPerOKS <= 0 {
		t.Errorf("CPU per record %v, want > 0 (node CPU %v s)", s.CPUPerOKS, rep.Derived.LoadCPUSeconds)
	}
	return s
}

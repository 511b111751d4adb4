package bench

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wsgate/wsgate/internal/testutil/natstest"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// The downstream scenario against a real gateway consuming a real source:
// 100 records per second for 2 s into the source the node consumes, 50
// users. Every record must be written, consumed, delivered once, and the
// source must hold exactly the records the bench counted as written.

// runDownstream runs the scenario against a `wsgate dev` consuming src and
// checks what every source must show.
func runDownstream(t *testing.T, src, name string) benchResult {
	t.Helper()
	g := startGateway(t, "dev", "WSGATE_DOWNSTREAM_URL="+src)
	res := runBench(t, "downstream", "--url", g.wsURL(), "--source", src, "--conns", smokeConns,
		"--rate", "100", "--duration", "2s", "--settle", smokeSettle)
	checkCommon(t, res, 50)
	checkMessages(t, res.rep, 200, 50)
	m := res.rep.Messages
	if !m.Reliable || m.OutOfOrder != 0 || m.GapFrames != 0 || m.Foreign != 0 || m.BadFrames != 0 {
		t.Errorf("reliable %v, out of order %d, gaps %d, foreign %d, bad frames %d", m.Reliable, m.OutOfOrder, m.GapFrames, m.Foreign, m.BadFrames)
	}
	d := res.rep.Downstream
	if d == nil {
		t.Fatal("no downstream figures")
	}
	if d.Source != name || d.Written != 200 || d.WriteErrors != 0 || d.WriteRate <= 0 || d.DeliveredRate <= 0 {
		t.Errorf("downstream %+v, want source %s, 200 written, positive rates", d, name)
	}
	if !strings.Contains(res.stdout, "source  ") || !strings.Contains(res.stdout, "written 200") {
		t.Errorf("the summary has no source line:\n%s", res.stdout)
	}
	return res
}

func TestDownstreamRedisStream(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	runDownstream(t, srv.URL()+"?stream=bench-ds", "redis:bench-ds")
	// The records went through the stream, and the node acknowledged each.
	c := srv.Client()
	ctx := context.Background()
	if n, err := c.XLen(ctx, "bench-ds").Result(); err != nil || n != 200 {
		t.Errorf("the stream holds %d entries (%v), want 200", n, err)
	}
	if p, err := c.XPending(ctx, "bench-ds", "wsgate").Result(); err != nil || p.Count != 0 {
		t.Errorf("pending %+v (%v), want none", p, err)
	}
}

func TestDownstreamJetStream(t *testing.T) {
	srv := natstest.Start(t)
	// The stream does not exist: the bench and the node each create it if
	// missing, whoever comes first.
	runDownstream(t, srv.URL()+"?stream=BENCHDS&subject=bench.ds", "nats:bench.ds")
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "BENCHDS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 200 {
		t.Errorf("the stream holds %v messages (%v), want 200", info.State.Msgs, err)
	}
}

func TestDownstreamKafka(t *testing.T) {
	// kfake in this process; the gateway process speaks Kafka to it.
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "bench-ds"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	runDownstream(t, "kafka://"+strings.Join(c.ListenAddrs(), ",")+"/bench-ds", "kafka:bench-ds")
	// The topic holds the 200 records, each keyed by its user.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("bench-ds"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for n < 200 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			n++
			var v struct{ Target struct{ ID string } }
			if err := json.Unmarshal(r.Value, &v); err != nil || v.Target.ID != string(r.Key) {
				t.Errorf("record %s/%d key %q, value %s", r.Topic, r.Offset, r.Key, r.Value)
			}
		})
	}
	if n != 200 {
		t.Errorf("the topic holds %d records, want 200", n)
	}
}

// TestDownstreamNotConsumed: records written into a source the node does
// not consume are all lost, and the report says what to check.
func TestDownstreamNotConsumed(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	g := startGateway(t, "dev", "WSGATE_DOWNSTREAM_URL="+srv.URL()+"?stream=consumed")
	res := runBench(t, "downstream", "--url", g.wsURL(), "--source", srv.URL()+"?stream=other", "--conns", "10",
		"--rate", "20", "--duration", "1s", "--settle", "1s")
	if m := res.rep.Messages; res.code != 1 || m.Sent != 20 || m.Lost != 20 {
		t.Errorf("exit status %d, sent %d, lost %d; want 1, 20, 20", res.code, m.Sent, m.Lost)
	}
	if !strings.Contains(res.stdout, "warning: no record written to the source reached a connection") {
		t.Errorf("no warning in the summary:\n%s", res.stdout)
	}
}

// TestDownstreamFlags: --source errors are one line, naming the flag.
func TestDownstreamFlags(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"downstream"}, "--source is required for downstream"},
		{[]string{"push", "--source", "redis://h:1/0?stream=s"}, "--source is only for downstream"},
		{[]string{"downstream", "--source", "ftp://h/x"}, `--source: unknown scheme "ftp"`},
		{[]string{"downstream", "--source", "redis://h:1/0"}, "--source: a redis source needs ?stream=NAME"},
		{[]string{"downstream", "--source", "nats://h:4222?stream=S"}, "--source: a nats source needs ?stream=STREAM&subject=SUBJ"},
		{[]string{"downstream", "--source", "kafka://b1:9092,b2:9092"}, "--source: a kafka URL needs exactly one topic"},
		{[]string{"downstream", "--source", "redis://h:1/0?stream=a,redis://h:1/0?stream=b"}, "--source: want one source URL, got 2"},
		{[]string{"downstream", "--source", "redis://h:1/0?stream=gw.{node}"}, "--source: {node} names one stream per gateway"},
		{[]string{"downstream", "--source", "redis:///0?stream=s"}, "--source: no host"},
		{[]string{"downstream", "--source", "redis://h:1/0?stream=s", "--rate", "-1"}, "--rate must not be negative"},
	} {
		var stdout, stderr strings.Builder
		code := mainWith(tc.args, noEnv, &stdout, &stderr)
		msg := stderr.String()
		if code != 2 || !strings.Contains(msg, tc.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%v: status %d, stderr %q; want 2 and one line containing %q", tc.args, code, msg, tc.want)
		}
	}
	// A source that does not answer ends the run before any connection,
	// with one line naming it.
	port := strconv.Itoa(redistest.FreePort(t))
	var stdout, stderr strings.Builder
	code := mainWith([]string{"downstream", "--url", "ws://127.0.0.1:1/ws", "--source", "redis://127.0.0.1:" + port + "/0?stream=s", "--quiet"}, noEnv, &stdout, &stderr)
	if msg := stderr.String(); code != 1 || !strings.Contains(msg, "wsgate bench: --source: redis: ") || strings.Count(msg, "\n") != 1 {
		t.Errorf("unreachable source: status %d, stderr %q", code, msg)
	}
	if !strings.Contains(stdout.String(), "attempted 0") {
		t.Errorf("connections were opened for an unreachable source:\n%s", stdout.String())
	}
}

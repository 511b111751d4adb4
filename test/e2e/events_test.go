package e2e

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// waitRecords polls the sink stream until cond holds (the stream is a
// Redis key: there is nothing to subscribe to).
func waitRecords(t *testing.T, sink *redistest.Server, stream, what string, cond func([]map[string]any) bool) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		recs := upstreamStream(t, sink.Client(), stream)
		if cond(recs) {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 60s; %d records: %v", what, len(recs), recs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func recsOf(recs []map[string]any, typ, user string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["type"] == typ && (user == "" || r["user"] == user) {
			out = append(out, r)
		}
	}
	return out
}

func num(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

// TestEventsRedisStreams: the lifecycle records of real gateway processes
// in a real Redis stream: a normal close, a kick, a drain, and the
// connections of a SIGKILLed node (reported once, by a survivor); presence
// under concurrent churn of one user on two nodes; a sink stopped with
// SIGSTOP loses no record.
func TestEventsRedisStreams(t *testing.T) {
	backend := redistest.Standalone(t, redistest.Options{})
	sink := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, backend.URL(), map[string]string{
		"WSGATE_UPSTREAM_URL": sink.URL() + "?stream=ev",
		"WSGATE_EVENTS":       "connect,disconnect,online,offline",
	})
	nodes := c.startNodes("e", 3, nil)
	e1, e2, e3 := nodes[0], nodes[1], nodes[2]

	// A normal close, a kick, a drain.
	ann := dial(t, e1, "ann", map[string]any{"info": map[string]any{"n": 1}})
	ann.Close()
	ben := dial(t, e1, "ben", nil)
	e2.mustCall(t, 200, "POST", "/api/v1/users/ben/disconnect", map[string]any{"reason": "kick"})
	if code := ben.waitClosed(10 * time.Second); code != protocol.CloseDisconnected {
		t.Fatalf("kick closed with %d", code)
	}
	cat := dial(t, e2, "cat", nil)
	e1.mustCall(t, 202, "POST", "/api/v1/nodes/"+e2.ID+"/drain", nil)
	if code := cat.waitClosed(20 * time.Second); code != protocol.CloseDraining {
		t.Fatalf("drain closed with %d", code)
	}
	recs := waitRecords(t, sink, "ev", "close, kick and drain", func(r []map[string]any) bool {
		return len(recsOf(r, "offline", "ann")) == 1 && len(recsOf(r, "offline", "ben")) == 1 && len(recsOf(r, "offline", "cat")) == 1
	})
	for user, code := range map[string]int64{"ann": 1000, "ben": 4003, "cat": 4001} {
		d := recsOf(recs, "disconnect", user)
		if len(d) != 1 || num(d[0]["code"]) != code || d[0]["duration_ms"] == nil {
			t.Fatalf("%s's disconnect records %v: want one with code %d and a duration", user, d, code)
		}
		cn := recsOf(recs, "connect", user)
		if len(cn) != 1 || cn[0]["conn_id"] != d[0]["conn_id"] || cn[0]["ip"] != "127.0.0.1" {
			t.Fatalf("%s's connect records %v", user, cn)
		}
	}
	if fmt.Sprint(recsOf(recs, "connect", "ann")[0]["info"]) != "map[n:1]" {
		t.Fatalf("ann's connect info: %v", recsOf(recs, "connect", "ann")[0])
	}

	// A SIGKILLed node: its three connections (two of dan's) end once each,
	// reported by a survivor, and dan and eve go offline once.
	var doomed []string
	for _, u := range []string{"dan", "dan", "eve"} {
		p := dial(t, e3, u, nil)
		doomed = append(doomed, p.w.ConnID)
	}
	waitRecords(t, sink, "ev", "the doomed connections' connects", func(r []map[string]any) bool { return len(recsOf(r, "connect", "eve")) == 1 })
	e3.Kill()
	waitRecords(t, sink, "ev", "the dead node's ends", func(r []map[string]any) bool {
		return len(recsOf(r, "offline", "dan")) >= 1 && len(recsOf(r, "offline", "eve")) >= 1 &&
			len(recsOf(r, "disconnect", "dan")) >= 2
	})
	// Another churn after the survivors swept: by the time its offline is
	// in the stream, they have swept again.
	fin := dial(t, e1, "fin", nil)
	fin.Close()
	recs = waitRecords(t, sink, "ev", "a later churn", func(r []map[string]any) bool { return len(recsOf(r, "offline", "fin")) == 1 })
	for _, id := range doomed {
		n := 0
		for _, r := range recsOf(recs, "disconnect", "") {
			if r["conn_id"] == id {
				n++
				if num(r["code"]) != 1006 || r["reason"] != "node died" || r["node"] != e3.ID {
					t.Fatalf("dead connection's disconnect %v", r)
				}
			}
		}
		if n != 1 {
			t.Fatalf("the end of %s was reported %d times, want once", id, n)
		}
	}
	if len(recsOf(recs, "offline", "dan")) != 1 || len(recsOf(recs, "offline", "eve")) != 1 {
		t.Fatalf("dead node's users: %d / %d offline records, want 1 / 1", len(recsOf(recs, "offline", "dan")), len(recsOf(recs, "offline", "eve")))
	}

	// Presence under concurrent connects and disconnects of one user on
	// two nodes: by v, online and offline alternate from v=1, and the
	// last is offline once every connection closed.
	e4 := c.startNode("e4", nil)
	var wg sync.WaitGroup
	for _, g := range []*gateway{e1, e4} {
		wg.Go(func() {
			for range 15 {
				dial(t, g, "gus", nil).Close()
			}
		})
	}
	wg.Wait()
	bar := dial(t, e1, "bar", nil) // a barrier on each node's workers
	bar.Close()
	bar = dial(t, e4, "bar", nil)
	bar.Close()
	recs = waitRecords(t, sink, "ev", "gus's churn", func(r []map[string]any) bool {
		return len(recsOf(r, "offline", "bar")) == 2 && len(recsOf(r, "disconnect", "gus")) == 30
	})
	var gus []map[string]any
	for _, r := range recs {
		if r["user"] == "gus" && (r["type"] == "online" || r["type"] == "offline") {
			gus = append(gus, r)
		}
	}
	slices.SortFunc(gus, func(a, b map[string]any) int { return int(num(a["v"]) - num(b["v"])) })
	for i, r := range gus {
		want := "online"
		if i%2 == 1 {
			want = "offline"
		}
		if num(r["v"]) != int64(i+1) || r["type"] != want {
			t.Fatalf("gus's presence record %d by v is %v %v, want %s with v %d", i, r["type"], r["v"], want, i+1)
		}
	}
	if len(gus) == 0 || gus[len(gus)-1]["type"] != "offline" {
		t.Fatalf("gus's last presence record is not offline: %v", gus)
	}

	// The sink stopped (SIGSTOP) while connections come and go: every
	// record arrives once it runs again, none dropped.
	before := len(upstreamStream(t, sink.Client(), "ev"))
	sink.Pause()
	const churn = 40
	for i := range churn {
		dial(t, e1, fmt.Sprintf("out%d", i), nil).Close()
	}
	// Stopped until the node saw two writes fail (each waits out its 5 s
	// bound), while the records wait in its buffer.
	deadline := time.Now().Add(60 * time.Second)
	for e1.metric(t, "wsgate_upstream_errors_total") < 2 {
		if time.Now().After(deadline) {
			sink.Resume()
			t.Fatal("no sink write failed within 60s while the sink was stopped")
		}
		time.Sleep(200 * time.Millisecond)
	}
	sink.Resume()
	recs = waitRecords(t, sink, "ev", "the outage's records", func(r []map[string]any) bool { return len(r) >= before+4*churn })
	for i := range churn {
		u := fmt.Sprintf("out%d", i)
		for _, typ := range []string{"connect", "online", "disconnect", "offline"} {
			if k := len(recsOf(recs, typ, u)); k < 1 {
				t.Fatalf("%s has %d %s records after the outage", u, k, typ)
			}
		}
	}
	if d := e1.metric(t, "wsgate_upstream_dropped_total"); d != 0 {
		t.Fatalf("wsgate_upstream_dropped_total = %v after the outage", d)
	}
}

// TestEventsUndeliveredRedisStreams: a reliable message nobody acknowledged
// within WSGATE_UNDELIVERED_AFTER is reported once, also when the node that
// published it was SIGKILLed; an acknowledged one is not reported.
func TestEventsUndeliveredRedisStreams(t *testing.T) {
	backend := redistest.Standalone(t, redistest.Options{})
	sink := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, backend.URL(), map[string]string{
		"WSGATE_UPSTREAM_URL":      sink.URL() + "?stream=ev",
		"WSGATE_EVENTS":            "undelivered,ack",
		"WSGATE_UNDELIVERED_AFTER": "1s",
	})
	nodes := c.startNodes("d", 2, nil)
	d1, d2 := nodes[0], nodes[1]
	acker := dial(t, d2, "acker", nil)
	body := toUser("acker", "hello")
	body.Reliable = true
	a := d1.mustPublish(t, body)
	acker.expect("hello")
	if r := acker.request(protocol.ClientFrame{Type: protocol.TypeAck, Seq: a.Seq}); !r.OK {
		t.Fatalf("ack: %+v", r.Error)
	}
	body = toUser("away", "push-me")
	body.Reliable = true
	lost := d1.mustPublish(t, body)
	d1.Kill() // the publishing node dies before the check is due
	waitRecords(t, sink, "ev", "away's undelivered", func(r []map[string]any) bool { return len(recsOf(r, "undelivered", "away")) >= 1 })
	// A later message's report is the barrier for any second report.
	body = toUser("later", "x")
	body.Reliable = true
	d2.mustPublish(t, body)
	recs := waitRecords(t, sink, "ev", "later's undelivered", func(r []map[string]any) bool { return len(recsOf(r, "undelivered", "later")) >= 1 })
	u := recsOf(recs, "undelivered", "away")
	if len(u) != 1 || num(u[0]["seq"]) != lost.Seq || u[0]["message_id"] != lost.ID || u[0]["event"] != "push-me" || u[0]["node"] != d2.ID {
		t.Fatalf("away's undelivered records %v: want one for seq %d, id %s, reported by %s", u, lost.Seq, lost.ID, d2.ID)
	}
	if k := len(recsOf(recs, "undelivered", "acker")); k != 0 {
		t.Fatalf("%d undelivered records for an acknowledged message", k)
	}
	if ack := recsOf(recs, "ack", "acker"); len(ack) != 1 || num(ack[0]["seq"]) != a.Seq {
		t.Fatalf("ack records %v: want one with seq %d", ack, a.Seq)
	}
}

package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

// The history's rates come from two heartbeats of a node; a sample
// without a new heartbeat keeps the rate, a restart starts again from 0,
// a stale node is left out and samples older than the window go.
func TestStatsRingRatesAndWindow(t *testing.T) {
	var s statsRing
	t0 := time.UnixMilli(1_700_000_000_000)
	rec := func(id string, hb time.Time, conns int, pub, del int64, started int64) cluster.NodeInfo {
		return cluster.NodeInfo{ID: id, Heartbeat: hb.UnixMilli(), Connections: conns, Published: pub, Delivered: del, StartedAt: started}
	}
	stale := 6 * time.Second
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 2 * time.Second) }
	s.add(at(0), []cluster.NodeInfo{rec("a", at(0), 3, 100, 400, 1)}, "a", stale)
	s.add(at(1), []cluster.NodeInfo{rec("a", at(1), 4, 110, 440, 1), rec("old", t0.Add(-time.Minute), 9, 0, 0, 1)}, "a", stale)
	s.add(at(2), []cluster.NodeInfo{rec("a", at(1), 4, 110, 440, 1)}, "a", stale) // no new heartbeat
	s.add(at(3), []cluster.NodeInfo{rec("a", at(3), 0, 2, 2, 2)}, "a", stale)     // restarted
	got := s.since(0)
	if len(got) != 4 {
		t.Fatalf("%d samples, want 4", len(got))
	}
	want := []NodeSample{{3, 0, 0}, {4, 5, 20}, {4, 5, 20}, {0, 0, 0}}
	for i, w := range want {
		if g := got[i].Nodes["a"]; g != w {
			t.Errorf("sample %d: %+v, want %+v", i, g, w)
		}
	}
	if _, ok := got[1].Nodes["old"]; ok {
		t.Error("a stale node is in the history")
	}
	if n := len(s.since(at(1).UnixMilli())); n != 2 {
		t.Errorf("since the second sample: %d samples, want 2", n)
	}
	// Five minutes later the first samples are gone.
	s.add(at(3).Add(statsWindow).Add(time.Millisecond), []cluster.NodeInfo{rec("a", at(200), 0, 2, 2, 2)}, "a", stale)
	if got := s.since(0); len(got) != 1 {
		t.Errorf("%d samples after the window, want 1", len(got))
	}
}

// A node's history (GET /api/v1/stats) has every node of the cluster,
// with the delivery rate of the node whose clients get messages.
func TestStatsAPIShowsClusterRates(t *testing.T) {
	b := redisBackends(t, 2)
	n1 := startNodeWith(t, b[0], nil)
	n2 := startNodeWith(t, b[1], func(c *config.Gateway) { c.NodeID = "t2" })
	c := n2.connect(t, "gus", "")
	var res struct {
		IntervalMS int64         `json:"interval_ms"`
		WindowMS   int64         `json:"window_ms"`
		Samples    []StatsSample `json:"samples"`
	}
	eventually(t, 20*time.Second, "a delivery rate of t2 in t1's history", func() bool {
		pub(t, n1, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "gus"}, Event: "tick", Data: raw(`1`)})
		c.expect("message")
		status := apiJSON(t, n1, "GET", "/api/v1/stats", &res)
		if status != 200 || len(res.Samples) == 0 {
			return false
		}
		last := res.Samples[len(res.Samples)-1]
		return last.Nodes["t2"].DeliveryRate > 0 && last.Nodes["t2"].Connections == 1 && last.Nodes["t1"].PublishRate > 0
	})
	if res.IntervalMS != 200 || res.WindowMS != statsWindow.Milliseconds() {
		t.Errorf("interval %d ms, window %d ms", res.IntervalMS, res.WindowMS)
	}
	last := res.Samples[len(res.Samples)-1].T
	var more struct{ Samples []StatsSample }
	apiJSON(t, n1, "GET", "/api/v1/stats?since="+strconv.FormatInt(last, 10), &more)
	for _, s := range more.Samples {
		if s.T <= last {
			t.Fatalf("since=%d answered a sample of %d", last, s.T)
		}
	}
	if status, m := apiCall(t, n1, "GET", "/api/v1/stats?since=-1", "k", ""); status != 400 {
		t.Errorf("since=-1: %d %v, want 400", status, m)
	}
}

// apiJSON calls n's API with the test key and decodes the answer into v.
func apiJSON(t *testing.T, n *testNode, method, path string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+n.addr+path, nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode
}

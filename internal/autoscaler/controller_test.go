package autoscaler_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/wsgate/wsgate/internal/autoscaler"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/testutil/proc"
)

// fakeNodes is a NodeSource whose answer the test sets.
type fakeNodes struct {
	mu    sync.Mutex
	nodes []cluster.NodeInfo
	err   error
}

func (f *fakeNodes) Nodes(context.Context) ([]cluster.NodeInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]cluster.NodeInfo(nil), f.nodes...), f.err
}

func (f *fakeNodes) set(err error, nodes ...cluster.NodeInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes, f.err = nodes, err
}

// fakeActuator records the calls and fails while err is set.
type fakeActuator struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (f *fakeActuator) Name() string { return "fake" }
func (f *fakeActuator) ScaleOut(_ context.Context, desired int, _ []cluster.NodeInfo) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "out "+itoa(desired))
	return f.err
}
func (f *fakeActuator) ScaleIn(_ context.Context, n cluster.NodeInfo, desired int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "in "+n.ID+" "+itoa(desired))
	return f.err
}
func (f *fakeActuator) Close(context.Context) error { return nil }

func (f *fakeActuator) took() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestController(t *testing.T) {
	clock := t0
	src := &fakeNodes{}
	act := &fakeActuator{}
	logs := &proc.Buffer{}
	p := basePolicy()
	p.MinNodes, p.MaxNodes = 1, 3
	p.DrainWait = 5 * time.Minute
	ctl, err := autoscaler.NewController(autoscaler.Options{
		Policy: p, Interval: time.Second, Nodes: src, Actuator: act,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Now:    func() time.Time { return clock },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ctl.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	fresh := func(n cluster.NodeInfo) cluster.NodeInfo { n.Heartbeat = clock.UnixMilli(); return n }
	ctx := context.Background()

	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz before the first decision: %d", code)
	}
	if code, _ := get("/v1/status"); code != http.StatusServiceUnavailable {
		t.Fatalf("status before the first decision: %d", code)
	}

	// 1. Load high on one node: scale out to 2.
	src.set(nil, fresh(active("a", 90, 0.1)))
	d := ctl.Step(ctx)
	if d.Action != autoscaler.ActionScaleOut || d.Desired != 2 {
		t.Fatalf("step 1: %+v", d)
	}
	if c := act.took(); len(c) != 1 || c[0] != "out 2" {
		t.Fatalf("step 1 calls %q", c)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("readyz after a read: %d", code)
	}
	m := ctl.Metrics()
	if v := value(t, m.DesiredNodes); v != 2 {
		t.Errorf("desired_nodes %v", v)
	}
	if v := value(t, m.CurrentNodes); v != 1 {
		t.Errorf("current_nodes %v", v)
	}
	if v := value(t, m.LoadRatio); v != 0.9 {
		t.Errorf("load_ratio %v", v)
	}
	if v := value(t, m.Decisions.WithLabelValues("scale_out", autoscaler.ReasonConnsHigh)); v != 1 {
		t.Errorf("decisions_total{scale_out,connections_high} %v", v)
	}
	code, body := get("/v1/status")
	var st struct {
		Decision struct {
			Action  string   `json:"action"`
			Reason  string   `json:"reason"`
			Reasons []string `json:"reasons"`
			Desired int      `json:"desired_nodes"`
			Current int      `json:"current_nodes"`
		} `json:"decision"`
		Actuator     string `json:"actuator"`
		LastScaleOut string `json:"last_scale_out"`
		Policy       struct {
			MaxNodes int    `json:"max_nodes"`
			Cooldown string `json:"cooldown"`
		} `json:"policy"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
		t.Fatalf("status %d %s: %v", code, body, err)
	}
	if st.Decision.Action != "scale_out" || st.Decision.Desired != 2 || st.Decision.Current != 1 || st.Actuator != "fake" ||
		st.LastScaleOut == "" || st.Policy.MaxNodes != 3 || st.Policy.Cooldown != "1m0s" || len(st.Decision.Reasons) < 2 {
		t.Fatalf("status: %s", body)
	}

	// 2. Within the cooldown: no action, reason cooldown.
	clock = clock.Add(10 * time.Second)
	src.set(nil, fresh(active("a", 90, 0.1)))
	if d := ctl.Step(ctx); d.Action != autoscaler.ActionNone || d.Reason != autoscaler.ReasonCooldown {
		t.Fatalf("step 2: %+v", d)
	}
	if c := act.took(); len(c) != 0 {
		t.Fatalf("step 2 calls %q", c)
	}

	// 3. Actuator error: counted, and the next step tries again (no cooldown started).
	clock = clock.Add(time.Minute)
	src.set(nil, fresh(active("a", 60, 0.1)), fresh(active("b", 100, 0.1)))
	act.err = errors.New("boom")
	ctl.Step(ctx)
	if v := value(t, m.ActuatorErrors); v != 1 {
		t.Fatalf("actuator_errors_total %v", v)
	}
	if _, body := get("/v1/status"); !strings.Contains(body, `"action_error":"boom"`) {
		t.Fatalf("status after an error: %s", body)
	}
	act.err = nil
	clock = clock.Add(time.Second)
	if d := ctl.Step(ctx); d.Action != autoscaler.ActionScaleOut || d.Desired != 3 {
		t.Fatalf("step 3 retry: %+v", d)
	}
	if c := act.took(); len(c) != 2 || c[1] != "out 3" {
		t.Fatalf("step 3 calls %q", c)
	}

	// 4. Load gone: after the cooldown, drain the least loaded; then wait
	// for it to leave (first not yet draining, then draining), then the next.
	clock = clock.Add(time.Minute)
	src.set(nil, fresh(active("a", 5, 0.1)), fresh(active("b", 3, 0.1)), fresh(active("c", 4, 0.1)))
	if d := ctl.Step(ctx); d.Action != autoscaler.ActionScaleIn || d.Drain != "b" || d.Desired != 2 {
		t.Fatalf("step 4: %+v", d)
	}
	if c := act.took(); len(c) != 1 || c[0] != "in b 2" {
		t.Fatalf("step 4 calls %q", c)
	}
	clock = clock.Add(2 * time.Minute) // cooldown over: only the drain holds
	src.set(nil, fresh(active("a", 5, 0.1)), fresh(active("b", 3, 0.1)), fresh(active("c", 4, 0.1)))
	if d := ctl.Step(ctx); d.Reason != autoscaler.ReasonDrainInProgress {
		t.Fatalf("step 5 (drain requested): %+v", d)
	}
	clock = clock.Add(time.Second)
	b := fresh(active("b", 3, 0.1))
	b.Status = cluster.StatusDraining
	src.set(nil, fresh(active("a", 5, 0.1)), b, fresh(active("c", 4, 0.1)))
	if d := ctl.Step(ctx); d.Reason != autoscaler.ReasonDrainInProgress {
		t.Fatalf("step 6 (draining): %+v", d)
	}
	if _, body := get("/v1/status"); !strings.Contains(body, `"pending_drain":{"node":"b"`) {
		t.Fatalf("status while draining: %s", body)
	}
	clock = clock.Add(time.Second)
	src.set(nil, fresh(active("a", 6, 0.1)), fresh(active("c", 6, 0.1)))
	if d := ctl.Step(ctx); d.Action != autoscaler.ActionScaleIn || d.Drain != "a" || !d.DrainGone {
		t.Fatalf("step 7: %+v", d)
	}
	if c := act.took(); len(c) != 1 || c[0] != "in a 1" {
		t.Fatalf("step 7 calls %q", c)
	}

	// 5. Backend down: readyz 503, decision backend_unavailable, gauges kept.
	src.set(errors.New("redis down"))
	clock = clock.Add(time.Second)
	if d := ctl.Step(ctx); d.Reason != autoscaler.ReasonBackendDown {
		t.Fatalf("step 8: %+v", d)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with the backend down: %d", code)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
	if v := value(t, m.DesiredNodes); v != 1 {
		t.Errorf("desired_nodes after a failed read %v (want the last value 1)", v)
	}

	// Every decision was logged as one JSON line with its reasons.
	var decisions int
	for _, l := range jsonLines(logs.String()) {
		if l["msg"] != "decision" {
			continue
		}
		decisions++
		rs, ok := l["reasons"].([]any)
		if !ok || len(rs) == 0 || l["action"] == nil || l["reason"] == nil {
			t.Errorf("decision line without reasons: %v", l)
		}
	}
	if decisions != 9 {
		t.Errorf("%d decision lines, want 9", decisions)
	}
	_, metrics := get("/metrics")
	for _, name := range []string{"wsgate_autoscaler_desired_nodes", "wsgate_autoscaler_current_nodes", "wsgate_autoscaler_decisions_total",
		"wsgate_autoscaler_load_ratio", "wsgate_autoscaler_actuator_errors_total", "go_goroutines", "process_open_fds"} {
		if !strings.Contains(metrics, "\n"+name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if !strings.Contains(metrics, `wsgate_autoscaler_decisions_total{action="scale_in",reason="connections_low"} 2`) {
		t.Errorf("/metrics: scale-in decisions not counted:\n%s", grep(metrics, "decisions_total"))
	}
}

func TestControllerRun(t *testing.T) {
	src := &fakeNodes{}
	src.set(nil)
	act := &fakeActuator{}
	ctl, err := autoscaler.NewController(autoscaler.Options{Policy: basePolicy(), Interval: 20 * time.Millisecond, Nodes: src, Actuator: act})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ctl.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for ctl.Status() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s := ctl.Status(); s == nil || s.Decision.Action != autoscaler.ActionScaleOut {
		t.Fatalf("first decision: %+v", s)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestNewControllerChecks(t *testing.T) {
	for _, opt := range []autoscaler.Options{
		{Policy: basePolicy(), Interval: time.Second, Actuator: &fakeActuator{}},
		{Policy: basePolicy(), Interval: time.Second, Nodes: &fakeNodes{}},
		{Policy: basePolicy(), Nodes: &fakeNodes{}, Actuator: &fakeActuator{}},
		{Policy: autoscaler.Policy{MaxConnsPerNode: 10, MinNodes: 3, MaxNodes: 2}, Interval: time.Second, Nodes: &fakeNodes{}, Actuator: &fakeActuator{}},
	} {
		if _, err := autoscaler.NewController(opt); err == nil {
			t.Errorf("NewController(%+v) accepted", opt)
		}
	}
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// value reads a gauge or counter.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	switch {
	case out.Gauge != nil:
		return out.Gauge.GetValue()
	case out.Counter != nil:
		return out.Counter.GetValue()
	}
	t.Fatalf("not a gauge or counter: %v", m.Desc())
	return 0
}

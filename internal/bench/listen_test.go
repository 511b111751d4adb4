package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/proc"
	"github.com/wsgate/wsgate/internal/testutil/wsgatebin"
)

// TestConnectListen: a connect --listen run counts the broadcasts of its
// run id that someone else publishes while it holds (each connection
// once, with its latency), ignores other runs' broadcasts, and ends its
// hold when EndHold closes.
func TestConnectListen(t *testing.T) {
	g := startGateway(t, "dev")
	end := make(chan struct{})
	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	cfg := Config{Scenario: ScenarioConnect, URLs: []string{g.wsURL()}, Conns: 20, Ramp: 1000, Settle: 5 * time.Minute,
		Duration: time.Second, Listen: true, RunID: "shared-run", EndHold: end}
	go func() {
		rep, err := Run(context.Background(), cfg)
		done <- result{rep, err}
	}()
	base := "http://" + g.addr
	waitFor(t, "20 connections on the node", func() bool { return nodeConns(base) == 20 })
	publish := func(run string, idx int) {
		body := fmt.Sprintf(`{"target":{"type":"broadcast"},"event":"bench","data":{"i":%d,"r":%q,"s":0,"t":%d,"x":""}}`, idx, run, time.Now().UnixNano())
		resp, err := http.Post(base+"/api/v1/publish", "application/json", bytes.NewBufferString(body))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("publish: %v %v", err, resp)
		}
		resp.Body.Close()
	}
	publish("shared-run", 0)
	publish("other-run", 0)
	publish("shared-run", 1)
	publish("shared-run", 1) // the same message twice: 20 duplicates
	waitFor(t, "80 deliveries counted by the node", func() bool { return nodeMetric(base, "wsgate_messages_delivered_total") >= 80 })
	close(end)
	var res result
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the hold did not end when EndHold closed")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	l := res.rep.Listen
	if l == nil || l.Received != 40 || l.Duplicated != 20 || l.Latency.Count != 60 || len(l.Latency.Histogram) == 0 {
		t.Fatalf("listened %+v, want 40 received, 20 duplicated, 60 latencies with a histogram", l)
	}
	if c := res.rep.Connections; c.Succeeded != 20 {
		t.Errorf("%d connections opened, want 20", c.Succeeded)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func nodeConns(base string) float64 { return nodeMetric(base, "wsgate_connections") }

// nodeMetric reads one unlabelled metric of the node (0 when absent).
func nodeMetric(base, name string) float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	sum := 0.0 // over the series of every label set (wsgate_connections has one per transport)
	for _, line := range strings.Split(buf.String(), "\n") {
		var v float64
		if f := strings.Fields(line); len(f) == 2 && (f[0] == name || strings.HasPrefix(f[0], name+"{")) {
			fmt.Sscan(f[1], &v)
			sum += v
		}
	}
	return sum
}

// TestConnectRetry: with --retry a first attempt that failed (here: the
// address's listener closes every connection at once) is tried again with
// the client's backoff, and the run ends with every connection open once
// a node listens there, the failures counted.
func TestConnectRetry(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	accepted := make(chan struct{}, 1000)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	end := make(chan struct{})
	close(end) // no hold
	done := make(chan *Report, 1)
	go func() {
		rep, _ := Run(context.Background(), Config{Scenario: ScenarioConnect, URLs: []string{"ws://" + addr + "/ws"},
			Conns: 10, Ramp: 1000, Duration: time.Second, RetryInitial: true, EndHold: end})
		done <- rep
	}()
	for range 11 { // the baseline scrape and the 10 first attempts
		select {
		case <-accepted:
		case <-time.After(30 * time.Second):
			t.Fatal("the bench did not dial")
		}
	}
	l.Close()
	cmd := exec.Command(wsgatebin.Path(t), "dev", "--listen", addr)
	cmd.Env = cleanEnv()
	g := proc.Start(t, "wsgate dev", cmd)
	t.Cleanup(func() {
		if !g.Stop(10 * time.Second) {
			g.Kill()
		}
	})
	var rep *Report
	select {
	case rep = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not end")
	}
	c := rep.Connections
	if c.Succeeded != 10 || c.Attempted != 10 {
		t.Errorf("succeeded %d of %d, want 10 of 10 (failures %v)", c.Succeeded, c.Attempted, c.FailReasons)
	}
	if c.DialFailures < 10 {
		t.Errorf("%d dial failures (%v), want every first attempt counted", c.DialFailures, c.FailReasons)
	}
}

// TestConnectEndRamp: closing EndRamp (SIGUSR2) stops opening
// connections; the run holds the ones opened and ends normally.
func TestConnectEndRamp(t *testing.T) {
	g := startGateway(t, "dev")
	endRamp, endHold := make(chan struct{}), make(chan struct{})
	close(endRamp)
	close(endHold)
	rep, err := Run(context.Background(), Config{Scenario: ScenarioConnect, URLs: []string{g.wsURL()}, Conns: 1000, Ramp: 10,
		Duration: time.Second, EndRamp: endRamp, EndHold: endHold})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Connections
	if c.Attempted == 0 || c.Attempted >= 1000 || c.Succeeded != c.Attempted {
		t.Errorf("attempted %d, succeeded %d; want the few started before the ramp ended, all open", c.Attempted, c.Succeeded)
	}
}

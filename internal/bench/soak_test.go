package bench

import (
	"strings"
	"testing"
)

// TestSoakShort is the soak scenario at small numbers on one node: 100
// connections, 20 of them reopened per second, 200 reliable user
// messages and 2 broadcasts per second for 12 s. It asserts counts: every
// reliable message arrived once, the churn happened, broadcasts were not
// duplicated, and the node series were sampled and plotted. The
// stability band is wide here (a 12 s run on a busy machine says nothing
// about drift); the 10-minute run judges it at 5 %.
func TestSoakShort(t *testing.T) {
	g := startGateway(t, "dev")
	res := runBench(t, "soak", "--url", g.wsURL(), "--conns", "100", "--rate", "200", "--churn-rate", "20",
		"--broadcast-rate", "2", "--duration", "12s", "--warmup", "4s", "--sample-every", "500ms", "--tolerance", "400",
		"--settle", smokeSettle)
	checkCommon(t, res, 100)
	rep := res.rep
	m := rep.Messages
	if m == nil || !m.Reliable || m.Sent != 2400 || m.Lost != 0 || m.Duplicated != 0 || m.OutOfOrder != 0 || m.Received != m.Expected {
		t.Fatalf("reliable messages %+v, want 2400 sent, all received once", m)
	}
	if ch := rep.Churn; ch == nil || ch.Cycles < 200 || ch.Reopened != ch.Cycles || ch.Pending != 0 {
		t.Errorf("churn %+v, want at least 200 cycles, all reopened", ch)
	}
	s := rep.Soak
	if s == nil {
		t.Fatal("no soak figures")
	}
	if s.Broadcasts != 24 || s.BroadcastDups != 0 || s.BroadcastReceived+s.BroadcastMissed != 24*100 || s.BroadcastReceived == 0 {
		t.Errorf("broadcasts sent %d received %d missed %d duplicated %d; want 24 sent, none twice", s.Broadcasts, s.BroadcastReceived, s.BroadcastMissed, s.BroadcastDups)
	}
	if len(s.Samples) < 10 || len(s.Stability) != 3 {
		t.Errorf("%d samples, %d stability verdicts; want at least 10 and 3 (rss, goroutines, fds)", len(s.Samples), len(s.Stability))
	}
	for _, st := range s.Stability {
		if st.Samples < 4 || st.Base <= 0 {
			t.Errorf("%s: %d samples after the warm-up, base %v", st.Metric, st.Samples, st.Base)
		}
	}
	for _, title := range []string{"Node RSS (MiB) during the soak", "Node goroutines during the soak", "Node open descriptors"} {
		if !strings.Contains(res.html, title) {
			t.Errorf("the HTML report has no chart %q", title)
		}
	}
}

// TestSoakStability: the band is a percentage of the baseline (the median
// of the first tenth after the warm-up), with the absolute allowance.
func TestSoakStability(t *testing.T) {
	flat := []float64{100, 101, 99, 100, 102, 98, 100, 104, 100, 100}
	if s := stability("n", "rss", flat, 5, 0); !s.OK || s.Base != 100 || s.Max != 104 {
		t.Errorf("flat series judged %+v", s)
	}
	grows := append(append([]float64{}, flat...), 106)
	if s := stability("n", "rss", grows, 5, 0); s.OK || s.MaxDevPct < 5.9 {
		t.Errorf("a 6 %% rise passed: %+v", s)
	}
	// 30 goroutines +-10 is within the allowance although 33 %.
	if s := stability("n", "goroutines", []float64{30, 30, 30, 40, 20}, 5, 10); !s.OK {
		t.Errorf("goroutines within the allowance failed: %+v", s)
	}
	if s := stability("n", "goroutines", []float64{30, 30, 30, 41}, 5, 10); s.OK {
		t.Errorf("goroutines beyond the allowance passed: %+v", s)
	}
	if s := stability("n", "rss", []float64{1, 1, 1}, 5, 0); s.OK {
		t.Error("three samples are too few to judge, but passed")
	}
}

func TestSoakFlags(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"soak", "--broadcast-rate", "-1"}, "--broadcast-rate must be between"},
		{[]string{"soak", "--duration", "30s", "--warmup", "1m"}, "--warmup must be between 0 and --duration"},
		{[]string{"soak", "--sample-every", "1ms"}, "--sample-every must be at least 100ms"},
		{[]string{"soak", "--tolerance", "-1"}, "--tolerance must be positive"},
	} {
		var stdout, stderr strings.Builder
		code := mainWith(tc.args, noEnv, &stdout, &stderr)
		if msg := stderr.String(); code != 2 || !strings.Contains(msg, tc.want) {
			t.Errorf("%v: status %d, stderr %q; want 2 and %q", tc.args, code, msg, tc.want)
		}
	}
	// The soak's default duration is 10 minutes, the others' 30 s.
	for scenario, want := range map[string]string{"soak": "default 10m\n", "push": "default 30s\n"} {
		var stdout, stderr strings.Builder
		if code := mainWith([]string{scenario, "--help"}, noEnv, &stdout, &stderr); code != 0 {
			t.Fatalf("%s --help: status %d", scenario, code)
		}
		if !strings.Contains(stdout.String(), "--duration duration\n      env WSGATE_DURATION, "+want) {
			t.Errorf("%s --help does not give --duration the %q", scenario, want)
		}
	}
}

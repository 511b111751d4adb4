package bench

import (
	"strings"
	"testing"
)

// TestCPUPerConnectLineWhenTheCounterStands: process_cpu_seconds_total
// moves in 10 ms steps, so a short connect phase may not move it. The
// report still names the connect phase's CPU line, with an upper bound
// instead of a figure, so a small run's report is the same shape whatever
// the scheduler did.
func TestCPUPerConnectLineWhenTheCounterStands(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cpuMoved float64
		want     string
	}{
		{"counter moved", 0.02, "CPU per connect+join\t400µs"},
		{"counter stood", 0, "CPU per connect+join\tunder 200µs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &Report{Scenario: ScenarioConnect, Config: ReportConfig{Join: "room"}}
			d := Derived{ConnectsCounted: 50, CPUPerConnectS: tc.cpuMoved / 50}
			var b strings.Builder
			rep.writeDerived(&b, d)
			if !strings.Contains(b.String(), tc.want) {
				t.Errorf("derived lines:\n%s\nwant a line with %q", b.String(), tc.want)
			}
		})
	}
}

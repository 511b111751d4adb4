package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/proc"
	"github.com/wsgate/wsgate/internal/testutil/wsgatebin"

	"go.uber.org/goleak"
)

// The smoke tests run the bench in-process against a real gateway: the
// wsgate binary, built once per test run, started as `wsgate dev` (or
// `wsgate gateway` with a JWT secret and an API key) on a port the kernel
// picks. They assert counts, never timings.

// TestMain fails the package if a test leaves a goroutine behind, and
// removes the binary.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.Cleanup(func(int) { wsgatebin.Cleanup() }),
		// signal.NotifyContext in mainWith starts the runtime's signal
		// loop, which never ends.
		goleak.IgnoreTopFunction("os/signal.signal_recv"),
	)
}

// gateway is a wsgate process under test.
type gateway struct {
	*proc.Proc
	addr string // host:port it listens on
}

// startGateway runs `wsgate <cmd> --listen 127.0.0.1:0` with env and
// returns once its "gateway listening" log line gave the address. It is
// stopped (SIGTERM, then SIGKILL) when the test ends.
func startGateway(t *testing.T, cmdName string, env ...string) *gateway {
	t.Helper()
	cmd := exec.Command(wsgatebin.Path(t), cmdName, "--listen", "127.0.0.1:0")
	cmd.Env = append(cleanEnv(), env...)
	addr := make(chan string, 1)
	cmd.Stderr = &listenLine{addr: addr} // and to the output
	g := &gateway{Proc: proc.Start(t, "wsgate "+cmdName, cmd)}
	g.OnFailure(func() { t.Logf("---- %s log ----\n%s", cmdName, g.Tail(30)) })
	t.Cleanup(func() {
		if !g.Stop(10 * time.Second) {
			g.Kill()
		}
	})
	select {
	case g.addr = <-addr:
	case <-g.Done():
		t.Fatalf("wsgate %s exited before listening:\n%s", cmdName, g.Output())
	case <-time.After(30 * time.Second):
		t.Fatalf("wsgate %s did not start:\n%s", cmdName, g.Output())
	}
	return g
}

// listenLine sends the address of the first "gateway listening" log line
// written to it.
type listenLine struct {
	addr chan<- string
	line []byte // the start of a line not yet complete
	sent bool
}

func (w *listenLine) Write(b []byte) (int, error) {
	if w.sent {
		return len(b), nil
	}
	w.line = append(w.line, b...)
	for !w.sent {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		var rec struct {
			Msg    string `json:"msg"`
			Listen string `json:"listen"`
		}
		if json.Unmarshal(w.line[:i], &rec) == nil && rec.Msg == "gateway listening" {
			w.addr <- rec.Listen
			w.sent = true
		}
		w.line = w.line[i+1:]
	}
	return len(b), nil
}

// cleanEnv is the test's environment without WSGATE_ settings.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WSGATE_") {
			out = append(out, kv)
		}
	}
	return out
}

func (g *gateway) wsURL() string { return "ws://" + g.addr + "/ws" }

// benchResult is one in-process run of the bench CLI.
type benchResult struct {
	code           int
	stdout, stderr string
	rep            *Report
	html           string
}

// runBench runs `wsgate bench args...` in-process with no WSGATE_
// environment, writing --json and --html into a temporary directory, and
// decodes both.
func runBench(t *testing.T, args ...string) benchResult {
	t.Helper()
	dir := t.TempDir()
	jsonPath, htmlPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "report.html")
	args = append(args, "--json", jsonPath, "--html", htmlPath)
	var stdout, stderr bytes.Buffer
	noEnv := func(string) (string, bool) { return "", false }
	res := benchResult{code: mainWith(args, noEnv, &stdout, &stderr)}
	res.stdout, res.stderr = stdout.String(), stderr.String()
	t.Logf("wsgate bench %s\n%s", strings.Join(args, " "), res.stdout)
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatalf("no JSON report: %v\nstderr:\n%s", err, res.stderr)
	}
	res.rep = new(Report)
	if err := json.Unmarshal(b, res.rep); err != nil {
		t.Fatalf("JSON report does not parse: %v", err)
	}
	h, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatalf("no HTML report: %v", err)
	}
	res.html = string(h)
	return res
}

// checkCommon asserts what every run must show: exit 0, every connection
// opened, every check passed, an HTML report with charts.
func checkCommon(t *testing.T, res benchResult, conns int) {
	t.Helper()
	rep := res.rep
	if res.code != 0 {
		t.Errorf("exit status %d\nstderr:\n%s", res.code, proc.LastLines(res.stderr, 10))
	}
	c := rep.Connections
	if c.Attempted != int64(conns) || c.Succeeded != c.Attempted || c.Failed != 0 {
		t.Errorf("connections attempted %d succeeded %d failed %d (%v), want %d", c.Attempted, c.Succeeded, c.Failed, c.FailSamples, conns)
	}
	for _, ck := range rep.Checks {
		if !ck.OK {
			t.Errorf("check %s failed: %s", ck.Name, ck.Detail)
		}
	}
	if len(rep.Nodes) != 1 || rep.Nodes[0].Baseline == nil || rep.Nodes[0].Final == nil || rep.Nodes[0].Final.Err != "" {
		t.Errorf("node samples missing: %+v", rep.Nodes)
	}
	if !strings.Contains(res.html, "<svg") || strings.Contains(res.html, "<script") || strings.Contains(res.html, "http://cdn") {
		t.Error("the HTML report has no inline SVG chart, or loads something")
	}
	if len(rep.Timeline) == 0 {
		t.Error("empty timeline")
	}
}

// checkMessages asserts exact delivery: sent = what was asked, every
// recipient got each message once.
func checkMessages(t *testing.T, rep *Report, sent, recipients int64) {
	t.Helper()
	m := rep.Messages
	if m == nil {
		t.Fatal("no message figures")
	}
	if m.Sent != sent || m.PublishErrors != 0 {
		t.Errorf("sent %d (publish errors %d %v), want %d", m.Sent, m.PublishErrors, m.PublishErrorWhy, sent)
	}
	if m.Recipients != recipients {
		t.Errorf("recipients %d, want %d", m.Recipients, recipients)
	}
	if m.Received != m.Expected || m.Lost != 0 || m.Duplicated != 0 || m.Misrouted != 0 || m.Expected+0 != m.Received+m.Lost {
		t.Errorf("expected %d received %d lost %d duplicated %d misrouted %d", m.Expected, m.Received, m.Lost, m.Duplicated, m.Misrouted)
	}
	if rep.Latency == nil || rep.Latency.Count < uint64(m.Received) {
		t.Errorf("latency samples %v, want at least %d", rep.Latency, m.Received)
	}
}

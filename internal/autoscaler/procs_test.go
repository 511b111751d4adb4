package autoscaler_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/proc"
	"github.com/wsgate/wsgate/internal/testutil/wsgatebin"
)

// The end-to-end test runs real processes: the wsgate binary (built once
// per test run, without the race detector), redis-server and the nodes the
// autoscaler starts.

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(wsgatebin.Main(m))
}

// freeRange returns the first of n consecutive free loopback ports.
func freeRange(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := wsgatebin.FreePort(t)
		if base+n > 65535 {
			continue
		}
		ok := true
		for p := base + 1; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				continue
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// jsonLines decodes the JSON log lines of a process's output.
func jsonLines(output string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(output, "\n") {
		var m map[string]any
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// startProc starts bin with args and env (added to this process's
// environment); at cleanup it is killed if still running and its output
// is logged when the test failed.
func startProc(t *testing.T, name, bin string, args, env []string) *proc.Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := proc.Start(t, name, cmd)
	p.OnFailure(func() { t.Logf("---- output of %s ----\n%s", name, tail(p.Output(), 30000)) })
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// eventually polls cond until it holds or d has passed.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

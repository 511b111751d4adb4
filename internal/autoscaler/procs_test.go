package autoscaler_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

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

// jsonLines returns the JSON objects among the output's lines.
// jsonLines decodes the JSON log lines of a process's output.
func jsonLines(l *wsgatebin.Buffer) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		var m map[string]any
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// proc is a child process whose output is kept for the test log.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *wsgatebin.Buffer
	done chan struct{}
}

// startProc starts bin with args and env (added to this process's
// environment); at cleanup it is killed if still running and its output
// is logged when the test failed.
func startProc(t *testing.T, name, bin string, args, env []string) *proc {
	t.Helper()
	p := &proc{name: name, out: &wsgatebin.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("---- output of %s ----\n%s", name, tail(p.out.String(), 30000))
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to d; it reports whether the process
// exited in time.
func (p *proc) stop(d time.Duration) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

func (p *proc) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
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

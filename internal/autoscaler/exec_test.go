package autoscaler_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/autoscaler"
	"github.com/wsgate/wsgate/internal/cluster"
)

// script writes an executable shell script into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecActuator(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "calls")
	// The script records its arguments and the environment it was given.
	sh := script(t, dir, "scale it.sh", `echo "args=$* desired=$WSGATE_DESIRED_NODES current=$WSGATE_CURRENT_NODES action=$WSGATE_SCALE_ACTION node=$WSGATE_DRAIN_NODE api=$WSGATE_DRAIN_NODE_API_URL" >> "$CALLS"
echo "some output"
`)
	// The gateway's drain endpoint, which must be called before the script.
	var mu sync.Mutex
	var drained []string
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k3y" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/nodes/n2/drain" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		b, _ := os.ReadFile(out)
		mu.Lock()
		drained = append(drained, r.URL.Path+" calls-before="+itoa(strings.Count(string(b), "\n")))
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer gw.Close()

	// The command line is shell syntax: a quoted path with a space.
	e, err := autoscaler.NewExec(autoscaler.ExecConfig{Command: `"` + sh + `"`, Timeout: 10 * time.Second, APIKey: "k3y",
		Env: append(os.Environ(), "CALLS="+out)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nodes := []cluster.NodeInfo{active("n1", 10, 0.1), active("n2", 10, 0.1), nd("n3", cluster.StatusDraining, 1, 0)}
	if err := e.ScaleOut(ctx, 3, nodes); err != nil {
		t.Fatal(err)
	}
	n2 := active("n2", 0, 0)
	n2.APIURL = gw.URL
	if err := e.ScaleIn(ctx, n2, 1); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "args=3 desired=3 current=2 action=scale_out node= api=\n" +
		"args=drain n2 desired=1 current=2 action=scale_in node=n2 api=" + gw.URL + "\n"
	if string(b) != want {
		t.Fatalf("script calls:\n%s\nwant:\n%s", b, want)
	}
	mu.Lock()
	if len(drained) != 1 || drained[0] != "/api/v1/nodes/n2/drain calls-before=1" {
		t.Fatalf("drain calls %q (want one, before the script's drain run)", drained)
	}
	mu.Unlock()

	// A refused drain stops the scale-in before the command runs.
	n2.APIURL = gw.URL + "/nowhere"
	if err := e.ScaleIn(ctx, n2, 1); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("refused drain: %v", err)
	}
	if b2, _ := os.ReadFile(out); string(b2) != want {
		t.Fatalf("the command ran after a failed drain:\n%s", b2)
	}
}

func TestExecActuatorExitStatus(t *testing.T) {
	dir := t.TempDir()
	sh := script(t, dir, "fail.sh", "echo 'quota exceeded' >&2\nexit 3\n")
	e, err := autoscaler.NewExec(autoscaler.ExecConfig{Command: sh, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = e.ScaleOut(context.Background(), 2, nil)
	if err == nil || !strings.Contains(err.Error(), "exited with status 3") || !strings.Contains(err.Error(), "quota exceeded") {
		t.Fatalf("got %v, want the exit status and the output", err)
	}
	if _, err := autoscaler.NewExec(autoscaler.ExecConfig{Command: "  "}); err == nil {
		t.Fatal("an empty command was accepted")
	}
}

func TestExecActuatorTimeout(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	// The script starts a child that would outlive it; the timeout kills
	// the whole process group.
	sh := script(t, dir, "slow.sh", "sleep 30 &\necho $! > "+pidFile+"\nwait\n")
	e, err := autoscaler.NewExec(autoscaler.ExecConfig{Command: sh, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = e.ScaleOut(context.Background(), 2, nil)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the timeout took %s", took)
	}
	if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Fatalf("got %v, want a timeout", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := atoi(t, strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the script's child %d survived the timeout", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("not a number: %q", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// alive reports whether pid runs (a zombie does not: nobody may reap an
// orphan in a container without an init).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

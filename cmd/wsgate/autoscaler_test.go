package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/proc"
)

// Bad autoscaler settings stop start-up with exit 2 and one line naming
// the setting.
func TestAutoscalerBadSettingsExit2(t *testing.T) {
	redis := "WSGATE_REDIS_URL=redis://127.0.0.1:1/0"
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--exec-command", "true"}, "WSGATE_REDIS_URL must be set"},
		{[]string{redis}, nil, "WSGATE_EXEC_COMMAND must be set"},
		{[]string{redis}, []string{"--actuator", "docker"}, "WSGATE_ACTUATOR"},
		{[]string{redis, "WSGATE_MIN_NODES=0"}, []string{"--actuator", "local"}, "WSGATE_MIN_NODES"},
		{[]string{redis}, []string{"--actuator", "local", "--scale-in-at", "0.9"}, "WSGATE_SCALE_IN_AT"},
		{[]string{redis}, []string{"--actuator", "local", "--interval", "soon"}, "--interval"},
		{[]string{redis}, []string{"--actuator", "kubernetes"}, "WSGATE_K8S_DEPLOYMENT"},
		{[]string{redis}, []string{"--actuator", "kubernetes", "--k8s-deployment", "wsgate", "--k8s-api-url", "http://127.0.0.1:1", "--k8s-namespace", "n"}, "WSGATE_API_KEY must be set"},
		{[]string{redis}, []string{"--actuator", "exec", "--exec-command", "true", "--listen", "nope"}, "WSGATE_LISTEN"},
	} {
		code, out := runBin(t, tc.env, append([]string{"autoscaler"}, tc.args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v %v: exit %d, output %q; want exit 2 naming %s", tc.env, tc.args, code, out, tc.want)
		}
		if len(lines) > 3 {
			t.Errorf("%v %v: a bad setting gets one clear line, got %d lines:\n%s", tc.env, tc.args, len(lines), out)
		}
	}
	if code, out := runBin(t, nil, "autoscaler", "--help"); code != 0 || !strings.Contains(out, "--max-conns-per-node") {
		t.Errorf("--help: exit %d\n%s", code, out)
	}
}

// The autoscaler serves its endpoints while Redis is unreachable (readyz
// 503, no decision acted on), and SIGTERM stops it with exit 0.
func TestAutoscalerServesAndStopsOnSIGTERM(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(binPath, "autoscaler", "--listen", addr, "--redis-url", "redis://127.0.0.1:1/0",
		"--exec-command", "exit 1", "--interval", "200ms")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	p := proc.Start(t, "wsgate autoscaler", cmd)
	p.OnFailure(nil) // the failures show the output
	get := func(path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(15 * time.Second)
	for get("/healthz") != http.StatusOK || !strings.Contains(p.Output(), `"reason":"backend_unavailable"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no health or no decision after 15s:\n%s", p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c := get("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz without Redis: %d, want 503", c)
	}
	if c := get("/metrics"); c != http.StatusOK {
		t.Errorf("/metrics: %d", c)
	}
	if c := get("/v1/status"); c != http.StatusOK {
		t.Errorf("/v1/status after a decision: %d", c)
	}
	if !p.Stop(15 * time.Second) {
		t.Fatalf("no exit 15s after SIGTERM:\n%s", p.Output())
	}
	if err := p.Err(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Output())
	}
	if !strings.Contains(p.Output(), "autoscaler stopped") {
		t.Errorf("no stop line:\n%s", p.Output())
	}
}

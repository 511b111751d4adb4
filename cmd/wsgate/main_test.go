package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/proc"
)

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wsgate-cmd-")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "wsgate")
	if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func runBin(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// Bad settings stop start-up with exit 2 and one line naming the setting.
func TestBadSettingsExit2WithTheSettingNamed(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"WSGATE_PING_INTERVAL=abc", "WSGATE_JWT_SECRET=s"}, nil, "WSGATE_PING_INTERVAL"},
		{[]string{"WSGATE_PONG_TIMEOUT=10s", "WSGATE_JWT_SECRET=s"}, nil, "WSGATE_PONG_TIMEOUT"},
		{[]string{"WSGATE_JWT_SECRET=s"}, []string{"--listen", "nope"}, "WSGATE_LISTEN"},
		{[]string{"WSGATE_JWT_SECRET=s", "WSGATE_REDIS_URL=redis-sentinel://"}, nil, "WSGATE_REDIS_URL"},
		{[]string{"WSGATE_JWT_SECRET=s", "WSGATE_DEVICE_POLICY=some"}, nil, "WSGATE_DEVICE_POLICY"},
		{[]string{"WSGATE_JWT_SECRET=s", "WSGATE_SEND_QUEUE=0"}, nil, "WSGATE_SEND_QUEUE"},
		{nil, nil, "WSGATE_JWT_SECRET"},
		{[]string{"WSGATE_JWT_SECRET=s"}, []string{"--config", "/nonexistent.yaml"}, "nonexistent.yaml"},
		{[]string{"WSGATE_JWT_SECRET=s"}, []string{"--no-such-flag"}, "no-such-flag"},
	} {
		code, out := runBin(t, tc.env, append([]string{"gateway"}, tc.args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v %v: exit %d, output %q; want exit 2 naming %s", tc.env, tc.args, code, out, tc.want)
		}
		if len(lines) > 3 {
			t.Errorf("%v: a bad setting gets one clear line, got %d lines", tc.env, len(lines))
		}
	}
	if code, _ := runBin(t, nil, "no-such-command"); code != 2 {
		t.Errorf("unknown command: exit %d", code)
	}
	if code, out := runBin(t, nil, "version"); code != 0 || !strings.HasPrefix(out, "wsgate ") {
		t.Errorf("version: %d %q", code, out)
	}
	if code, out := runBin(t, nil, "gateway", "--help"); code != 0 || !strings.Contains(out, "WSGATE_REDIS_URL") {
		t.Errorf("help: %d %q", code, out)
	}
}

// `wsgate dev` serves on a fresh machine, and SIGTERM drains it and exits 0.
func TestDevServesAndExitsZeroOnSIGTERM(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(binPath, "dev", "--listen", addr)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	p := proc.Start(t, "wsgate dev", cmd)
	p.OnFailure(nil) // the failures show the output
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev never ready: %v\n%s", err, p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, path := range []string{"/", "/demo", "/client/wsgate.js", "/metrics", "/healthz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("GET %s: %v %v", path, err, resp)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	if !p.Stop(20 * time.Second) {
		t.Fatalf("still running 20s after SIGTERM\n%s", p.Output())
	}
	if err := p.Err(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Output())
	}
	if !strings.Contains(p.Output(), `"msg":"drain finished"`) {
		t.Errorf("no drain on SIGTERM:\n%s", p.Output())
	}
}

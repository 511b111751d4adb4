package main

import (
	"bytes"
	"context"
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
	// A command that should have refused to start is stopped, not waited for.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
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

// okSecret passes the secret checks of wsgate gateway.
const okSecret = "WSGATE_JWT_SECRET=cmd-test-jwt-secret-0123456789abcdef"

// Contract §1 (v1.1): wsgate gateway refuses weak secrets and the
// manifests' placeholders with exit 2 and one line naming the setting;
// wsgate dev does not.
func TestWeakSecretsExit2(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"WSGATE_JWT_SECRET=a"}, "WSGATE_JWT_SECRET is 1 bytes long: at least 32"},
		{[]string{okSecret + ",too-short-for-hs256"}, "WSGATE_JWT_SECRET is 19 bytes long"},
		{[]string{okSecret, "WSGATE_API_KEY=b"}, "WSGATE_API_KEY is 1 bytes long: at least 16"},
		{[]string{okSecret, "WSGATE_API_KEY=CHANGE-ME-long-random-api-key"}, `WSGATE_API_KEY starts with "CHANGE-ME"`},
		{[]string{"WSGATE_JWT_SECRET=CHANGE-ME-long-random-jwt-secret"}, `WSGATE_JWT_SECRET starts with "CHANGE-ME"`},
		{[]string{okSecret, "WSGATE_API_KEY_FILE=" + writeTemp(t, "b\n")}, "WSGATE_API_KEY is 1 bytes long"},
	} {
		code, out := runBin(t, tc.env, "gateway", "--listen", "127.0.0.1:0")
		if code != 2 || !strings.Contains(out, tc.want) || strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Errorf("%v: exit %d, output %q; want exit 2 and one line with %q", tc.env, code, out, tc.want)
		}
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// The secrets come from files (trailing newline trimmed): the API answers
// the key of the file, and /debug/pprof/cmdline is on the admin listener
// only.
func TestSecretFilesAndAdminListener(t *testing.T) {
	const key = "cmd-test-api-key-from-a-file"
	addrs := make([]string, 2)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = l.Addr().String()
		l.Close()
	}
	cmd := exec.Command(binPath, "gateway", "--listen", addrs[0], "--admin-listen", addrs[1])
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "WSGATE_API_KEY_FILE=" + writeTemp(t, key+"\n"),
		"WSGATE_JWT_SECRET_FILE=" + writeTemp(t, "cmd-test-jwt-secret-0123456789abcdef\n")}
	p := proc.Start(t, "wsgate gateway", cmd)
	get := func(url, key string) int {
		req, _ := http.NewRequest("GET", url, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(20 * time.Second)
	for get("http://"+addrs[0]+"/readyz", "") != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("gateway never ready\n%s", p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, tc := range []struct {
		url, key string
		want     int
	}{
		{"http://" + addrs[1] + "/api/v1/nodes", key, 200},
		{"http://" + addrs[1] + "/api/v1/nodes", key[:len(key)-1], 401},
		{"http://" + addrs[0] + "/api/v1/nodes", key, 404},
		{"http://" + addrs[0] + "/debug/pprof/cmdline", "", 404},
		{"http://" + addrs[1] + "/debug/pprof/cmdline", "", 200},
		{"http://" + addrs[0] + "/metrics", "", 404},
		{"http://" + addrs[1] + "/metrics", "", 200},
	} {
		if got := get(tc.url, tc.key); got != tc.want {
			t.Errorf("GET %s: %d, want %d", tc.url, got, tc.want)
		}
	}
	if strings.Contains(p.Output(), key) {
		t.Errorf("the API key shows in the log:\n%s", p.Output())
	}
}

// Bad settings stop start-up with exit 2 and one line naming the setting.
func TestBadSettingsExit2WithTheSettingNamed(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"WSGATE_PING_INTERVAL=abc", okSecret}, nil, "WSGATE_PING_INTERVAL"},
		{[]string{"WSGATE_PONG_TIMEOUT=10s", okSecret}, nil, "WSGATE_PONG_TIMEOUT"},
		{[]string{okSecret}, []string{"--listen", "nope"}, "WSGATE_LISTEN"},
		{[]string{okSecret, "WSGATE_REDIS_URL=redis-sentinel://"}, nil, "WSGATE_REDIS_URL"},
		{[]string{okSecret, "WSGATE_DEVICE_POLICY=some"}, nil, "WSGATE_DEVICE_POLICY"},
		{[]string{okSecret, "WSGATE_SEND_QUEUE=0"}, nil, "WSGATE_SEND_QUEUE"},
		{nil, nil, "WSGATE_JWT_SECRET"},
		{[]string{okSecret}, []string{"--config", "/nonexistent.yaml"}, "nonexistent.yaml"},
		{[]string{okSecret}, []string{"--no-such-flag"}, "no-such-flag"},
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

// `wsgate dev` on a non-loopback address warns that its API is open;
// on loopback, or with an API key, it does not.
func TestDevWarnsWhenItsOpenAPIIsReachableFromOtherMachines(t *testing.T) {
	for _, tc := range []struct {
		host string
		env  []string
		warn bool
	}{
		{"0.0.0.0", nil, true},
		{"127.0.0.1", nil, false},
		{"0.0.0.0", []string{"WSGATE_API_KEY=a-long-enough-dev-api-key-0123456789"}, false},
	} {
		l, err := net.Listen("tcp", tc.host+":0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		cmd := exec.Command(binPath, "dev", "--listen", tc.host+":"+port)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, tc.env...)
		p := proc.Start(t, "wsgate dev", cmd)
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(p.Output(), "wsgate dev is up") {
			if time.Now().After(deadline) || p.Exited() {
				t.Fatalf("%s %v: never up\n%s", tc.host, tc.env, p.Output())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := strings.Contains(p.Output(), "OPEN API"); got != tc.warn {
			t.Errorf("listen %s %v: warning %v, want %v\n%s", tc.host, tc.env, got, tc.warn, p.Output())
		}
		if !p.Stop(20 * time.Second) {
			t.Fatalf("still running 20s after SIGTERM\n%s", p.Output())
		}
	}
}

// `wsgate allocator` answers pages of WSGATE_ALLOWED_ORIGINS (CORS,
// preflight included), and no other origin.
func TestAllocatorCORS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(binPath, "allocator", "--listen", addr)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "WSGATE_ALLOWED_ORIGINS=https://app.example"}
	p := proc.Start(t, "wsgate allocator", cmd)
	call := func(method, origin string) (*http.Response, error) {
		req, _ := http.NewRequest(method, "http://"+addr+"/v1/allocate?user=u", nil)
		req.Header.Set("Origin", origin)
		if method == http.MethodOptions {
			req.Header.Set("Access-Control-Request-Method", "GET")
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := call(http.MethodGet, "https://app.example")
		if err == nil {
			// No Redis: 503, but readable by the page (it tells the client to retry).
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
				t.Errorf("GET from an allowed origin: %d %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
			}
			break
		}
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("allocator never up: %v\n%s", err, p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if resp, err := call(http.MethodOptions, "https://app.example"); err != nil || resp.StatusCode != http.StatusNoContent ||
		resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("preflight from an allowed origin: %v %v", resp, err)
	}
	if resp, err := call(http.MethodOptions, "https://evil.example"); err != nil || resp.StatusCode != http.StatusForbidden ||
		resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another origin: %v %v", resp, err)
	}
	if resp, err := call(http.MethodGet, "https://evil.example"); err != nil || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("GET from another origin: %v %v", resp, err)
	}
}

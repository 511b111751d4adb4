package gateway

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
)

// The open API of wsgate dev answers only its own Host names (DNS
// rebinding, contract section 22): a page on evil.example resolving to
// 127.0.0.1 sends Host and Origin evil.example, which pass the Origin
// check; the API, /metrics and the profiler refuse it with 403, while
// /ws and /healthz answer any Host.
func TestOpenDevAPIAnswersOwnHostsOnly(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.Dev, c.APIKey = true, "" })
	_, port, _ := net.SplitHostPort(n.addr)
	body := `{"target":{"type":"user","id":"nobody"},"event":"e","data":1}`
	do := func(method, path, host, origin, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+n.addr+path, strings.NewReader(body))
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s Host %s: %v", method, path, host, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{"evil.example", "evil.example:" + port, "localhost.evil.example:" + port, "127.0.0.1.nip.io:" + port} {
		for _, tc := range []struct{ method, path, body string }{
			{"POST", "/api/v1/publish", body},
			{"POST", "/api/v1/users/u/disconnect", ""},
			{"POST", "/api/v1/nodes/t1/drain", ""},
			{"GET", "/api/v1/nodes", ""},
			{"GET", "/debug/pprof/cmdline", ""},
			{"GET", "/metrics", ""},
		} {
			if got := do(tc.method, tc.path, host, "http://"+host, tc.body); got != http.StatusForbidden {
				t.Errorf("%s %s with Host %s: status %d, want 403", tc.method, tc.path, host, got)
			}
		}
	}
	for _, host := range []string{"localhost:" + port, "LOCALHOST:" + port, "127.0.0.1:" + port, "[::1]:" + port, "127.0.0.1"} {
		if got := do("POST", "/api/v1/publish", host, "http://"+host, body); got != http.StatusOK {
			t.Errorf("publish with Host %s: status %d, want 200", host, got)
		}
		if got := do("GET", "/debug/pprof/cmdline", host, "", ""); got != http.StatusOK {
			t.Errorf("pprof with Host %s: status %d, want 200", host, got)
		}
	}
	if st := n.status.Load(); st != cluster.StatusActive {
		t.Fatalf("node status %v after a rebound drain request", st)
	}
	// Clients use real names: the WebSocket endpoint and health answer any Host.
	if got := do("GET", "/healthz", "evil.example", "", ""); got != http.StatusOK {
		t.Errorf("/healthz with Host evil.example: %d, want 200", got)
	}
	c, br := rawDial(t, n.addr)
	io.WriteString(c, strings.Replace(upgradeRequest(t, "u", ""), "Host: x", "Host: gateway.example.com", 1))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade with Host gateway.example.com: %v %v, want 101", resp, err)
	}
}

// A node listening on all addresses takes any of this machine's
// addresses as its own Host, never a name; with an API key the Host is
// not checked at all.
func TestDevHostIsOwn(t *testing.T) {
	all := &Node{cfg: config.Gateway{Dev: true, Listen: ":18080"}}
	named := &Node{cfg: config.Gateway{Dev: true, Listen: "devbox.lan:18080"}}
	cases := []struct {
		n    *Node
		host string
		want bool
	}{
		{all, "127.0.0.2:18080", true},
		{all, "[::ffff:127.0.0.1]:1", true},
		{all, "localhost.", true},
		{all, "evil.example:18080", false},
		{all, "", false},
		{named, "devbox.lan:18080", true},
		{named, "DevBox.lan", true},
		{named, "other.lan:18080", false},
	}
	for addr := range localAddrs() {
		cases = append(cases, struct {
			n    *Node
			host string
			want bool
		}{all, net.JoinHostPort(addr.String(), "18080"), true})
	}
	for _, tc := range cases {
		if got := tc.n.hostIsOwn(tc.host); got != tc.want {
			t.Errorf("listen %q, Host %q: %v, want %v", tc.n.cfg.Listen, tc.host, got, tc.want)
		}
	}
	keyed := &Node{cfg: config.Gateway{Dev: true, APIKey: "k", Listen: "127.0.0.1:1"}}
	if ae := keyed.checkDevHost(&http.Request{Host: "evil.example"}); ae != nil {
		t.Errorf("with an API key: %+v, want no Host check", ae)
	}
}

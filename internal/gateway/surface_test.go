package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

// getFrom sends one request to addr from the local address src (any
// 127.0.0.0/8 address: several client IPs on loopback) and returns the
// status and headers.
func getFrom(t *testing.T, src, method, url string, hdr http.Header) (int, http.Header) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

var withKey = http.Header{"Authorization": {"Bearer k"}}

// Contract §1, §2 (v2): with WSGATE_ADMIN_LISTEN the public listener
// serves only the client paths; the admin plane is on its own listener.
func TestAdminListenerSplitsTheSurface(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.AdminListen = "127.0.0.1:0" })
	pub, adm := "http://"+n.addr, "http://"+n.admin
	for _, tc := range []struct {
		base, path string
		hdr        http.Header
		want       int
	}{
		{pub, "/healthz", nil, 200},
		{pub, "/readyz", nil, 200},
		{pub, "/v1/allocate?user=u", nil, 200},
		{pub, "/client/wsgate.js", nil, 200},
		{pub, "/metrics", nil, 404},
		{pub, "/api/v1/nodes", withKey, 404},
		{pub, "/api/v1/users/u/presence", withKey, 404},
		{pub, "/", nil, 404},
		{pub, "/demo", nil, 404}, // dev only
		{pub, "/assets/console.js", nil, 404},
		{pub, "/assets/demo.js", nil, 404},
		{pub, "/debug/pprof/cmdline", nil, 404},
		{pub, "/debug/pprof/", nil, 404},
		{adm, "/metrics", nil, 200},
		{adm, "/api/v1/nodes", withKey, 200},
		{adm, "/api/v1/nodes", nil, 401},
		{adm, "/", nil, 200},
		{adm, "/demo", nil, 200},
		{adm, "/assets/console.js", nil, 200},
		{adm, "/debug/pprof/cmdline", nil, 200},
		{adm, "/healthz", nil, 200},
		{adm, "/ws", nil, 404},
	} {
		if got, _ := getFrom(t, "", "GET", tc.base+tc.path, tc.hdr); got != tc.want {
			which := "public"
			if tc.base == adm {
				which = "admin"
			}
			t.Errorf("%s GET %s: %d, want %d", which, tc.path, got, tc.want)
		}
	}
	// The WebSocket endpoint works on the public listener.
	c := n.connect(t, "alice", "")
	c.send(map[string]any{"type": "ping"})
	c.expect("pong")
}

func TestAdminListenerInDevServesTheDemoPublicly(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.AdminListen = "127.0.0.1:0"; c.Dev = true; c.APIKey = "" })
	for path, want := range map[string]int{"/demo": 200, "/assets/demo.js": 200, "/assets/dom.js": 200, "/assets/base.css": 200,
		"/assets/console.js": 404, "/": 404, "/api/v1/nodes": 404} {
		if got, _ := getFrom(t, "", "GET", "http://"+n.addr+path, nil); got != want {
			t.Errorf("public GET %s in dev: %d, want %d", path, got, want)
		}
	}
}

// Without an admin listener the profiler answers loopback peers only: not
// a client a PROXY header names, not a request a proxy forwarded.
func TestProfilerOnlyForLoopbackPeers(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.TrustedProxies = []string{"127.0.0.0/8"} })
	if got, _ := getFrom(t, "", "GET", "http://"+n.addr+"/debug/pprof/cmdline", nil); got != 200 {
		t.Errorf("loopback peer: %d, want 200", got)
	}
	if got, _ := getFrom(t, "", "GET", "http://"+n.addr+"/debug/pprof/cmdline", http.Header{"X-Forwarded-For": {"203.0.113.7"}}); got != 404 {
		t.Errorf("forwarded by a local proxy: %d, want 404", got)
	}
	c, br := rawDial(t, n.addr)
	io.WriteString(c, "PROXY TCP4 203.0.113.7 10.0.0.1 5000 8080\r\nGET /debug/pprof/cmdline HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("client 203.0.113.7 behind a PROXY header: %d, want 404", resp.StatusCode)
	}
}

// Failed API-key attempts are limited per client IP: after api.KeyFailBurst
// failures the IP gets 429 with Retry-After, also with the right key;
// another IP is not affected.
func TestAPIKeyGuessingIsThrottledPerIP(t *testing.T) {
	n := startNode(t, nil)
	url := "http://" + n.addr + "/api/v1/nodes"
	wrong := http.Header{"Authorization": {"Bearer guess"}}
	for i := range api.KeyFailBurst {
		if got, _ := getFrom(t, "127.0.0.2", "GET", url, wrong); got != 401 {
			t.Fatalf("failure %d: %d, want 401", i+1, got)
		}
	}
	got, h := getFrom(t, "127.0.0.2", "GET", url, wrong)
	if got != 429 || h.Get("Retry-After") == "" || h.Get("Retry-After") == "0" {
		t.Fatalf("failure %d: %d Retry-After %q, want 429 with Retry-After", api.KeyFailBurst+1, got, h.Get("Retry-After"))
	}
	if got, _ := getFrom(t, "127.0.0.2", "GET", url, withKey); got != 429 {
		t.Errorf("right key from the throttled IP: %d, want 429 (a guess must not be told apart)", got)
	}
	if got, _ := getFrom(t, "127.0.0.3", "GET", url, withKey); got != 200 {
		t.Errorf("right key from another IP: %d, want 200", got)
	}
	if got, _ := getFrom(t, "127.0.0.3", "GET", url, wrong); got != 401 {
		t.Errorf("wrong key from another IP: %d, want 401", got)
	}
}

// The console and demo pages send a strict CSP, nosniff and a referrer
// policy; every API answer is nosniff.
func TestSecurityHeaders(t *testing.T) {
	n := startNode(t, nil)
	for _, path := range []string{"/", "/demo"} {
		_, h := getFrom(t, "", "GET", "http://"+n.addr+path, nil)
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"frame-ancestors 'none'", "default-src 'none'", "script-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("GET %s: CSP %q allows inline code", path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") == "" {
			t.Errorf("GET %s: nosniff %q, Referrer-Policy %q", path, h.Get("X-Content-Type-Options"), h.Get("Referrer-Policy"))
		}
	}
	for _, tc := range []struct {
		method, path string
		hdr          http.Header
		want         int
	}{
		{"GET", "/api/v1/nodes", withKey, 200},
		{"GET", "/api/v1/nodes", nil, 401},
		{"GET", "/api/v1/nope", withKey, 404},
		{"POST", "/api/v1/publish", withKey, 400},
		{"GET", "/client/wsgate.js", nil, 200},
	} {
		got, h := getFrom(t, "", tc.method, "http://"+n.addr+tc.path, tc.hdr)
		if got != tc.want || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: %d nosniff %q, want %d nosniff", tc.method, tc.path, got, h.Get("X-Content-Type-Options"), tc.want)
		}
	}
}

// Contract 4.1 (v1.1): a client publish carries the server-set from (the
// sender's user id), whatever the frame or its data claim; an API publish
// has none.
func TestPublishFromIsServerSet(t *testing.T) {
	n := startNode(t, nil)
	bob := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "bob", nil)}}, true)
	bob.expect("welcome")
	bobMP := n.dial(t, "?format=msgpack", http.Header{"Authorization": {"Bearer " + token(t, "bob", nil)}}, true)
	bobMP.expect("welcome")
	mallory := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "mallory", map[string]any{"pub": []string{"user:*"}})}}, true)
	mallory.expect("welcome")
	mallory.send(map[string]any{"type": "publish", "id": "1", "from": "admin", "target": map[string]any{"type": "user", "id": "bob"},
		"event": "chat", "data": map[string]any{"from": "alice", "text": "hi"}})
	if r := mallory.expect("reply"); r["ok"] != true {
		t.Fatalf("publish refused: %v", r)
	}
	for _, c := range []*wsClient{bob, bobMP} {
		m := c.expect("message")
		if m["from"] != "mallory" {
			t.Errorf("from = %v, want mallory (server-set): %v", m["from"], m)
		}
		if d, _ := m["data"].(map[string]any); d["from"] != "alice" {
			t.Errorf("data changed: %v", m["data"])
		}
	}
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: protocol.TargetUser, ID: "bob"}, Event: "notice", Data: raw(`{"from":"ops"}`)})
	if m := bob.expect("message"); m["from"] != nil {
		t.Errorf("API publish carries from %v, want none", m["from"])
	}
}

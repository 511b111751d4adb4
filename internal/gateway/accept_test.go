package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
)

// upgradeRequest is a complete handshake request for user.
func upgradeRequest(t *testing.T, user, query string) string {
	return "GET /ws" + query + " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"Authorization: Bearer " + token(t, user, nil) + "\r\n\r\n"
}

func rawDial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// readWelcome reads the 101 answer and the first frame after it.
func readWelcome(t *testing.T, br *bufio.Reader) map[string]any {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("answer %d %v, want 101 with the RFC 6455 accept value", resp.StatusCode, resp.Header)
	}
	h, err := ws.ReadHeader(br)
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, h.Length)
	if _, err := io.ReadFull(br, payload); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil || m["type"] != "welcome" {
		t.Fatalf("first frame %q (%v), want a welcome", payload, err)
	}
	return m
}

func TestOtherRequestsReachHTTPWithTheBytesReadAlready(t *testing.T) {
	n := startNode(t, nil)
	c, br := rawDial(t, n.addr)
	// Two pipelined requests in one write: the accept path reads both
	// before handing the socket to net/http, which must answer both.
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
}

func TestUpgradeOnAKeptAliveHTTPConnection(t *testing.T) {
	n := startNode(t, nil)
	c, br := rawDial(t, n.addr)
	healthz(t, c, br, "")
	// The same connection now upgrades: net/http serves it and the socket
	// still moves into the event loop.
	io.WriteString(c, upgradeRequest(t, "kept", ""))
	if w := readWelcome(t, br); w["user"] != "kept" {
		t.Fatalf("welcome %v", w)
	}
	if got := n.hub.count(); got != 1 {
		t.Fatalf("connections held %d, want 1", got)
	}
}

func TestHandshakeSplitOverSeveralReads(t *testing.T) {
	n := startNode(t, nil)
	c, br := rawDial(t, n.addr)
	req := upgradeRequest(t, "split", "?format=json")
	io.WriteString(c, req[:40])
	a := acceptorOf(t, n)
	// Wait until the node has read the first part and keeps it.
	eventually(t, 5*time.Second, "first part held", func() bool { return a.pendingBytes() == 40 })
	io.WriteString(c, req[40:])
	if w := readWelcome(t, br); w["user"] != "split" {
		t.Fatalf("welcome %v", w)
	}
	if a.pendingBytes() != 0 {
		t.Fatal("a finished handshake is still pending")
	}
}

func TestHandshakeHeadersTooLarge(t *testing.T) {
	n := startNode(t, nil)
	c, br := rawDial(t, n.addr)
	go func() {
		io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\n")
		for i := 0; i < 400; i++ {
			io.WriteString(c, "X-Filler: "+strings.Repeat("a", 60)+"\r\n")
		}
	}()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", resp.StatusCode)
	}
}

func TestSilentSocketIsClosedAfterTheHandshakeTimeout(t *testing.T) {
	n := startNode(t, nil)
	c, _ := rawDial(t, n.addr)
	io.WriteString(c, "GET /ws HTTP/1.1\r\n")
	a := acceptorOf(t, n)
	eventually(t, 5*time.Second, "partial request held", func() bool { return a.pendingBytes() > 0 })
	// The sweep calls expire every second; call it as if 10 s had passed.
	a.expire(time.Now().Unix() + int64(handshakeTimeout/time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after expiry: %v, want EOF", err)
	}
	if a.pendingBytes() != 0 {
		t.Fatal("the expired handshake is still pending")
	}
}

func TestNotAnUpgradeIsRefusedWithJSON(t *testing.T) {
	n := startNode(t, nil)
	c, br := rawDial(t, n.addr)
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusBadRequest || body.Error.Code != "bad_request" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("answer %d %q %v", resp.StatusCode, body.Error.Code, resp.Header)
	}
}

// failingConnect is the embedded backend with its Connect step failing,
// as when Redis does not answer in time.
type failingConnect struct{ cluster.Backend }

func (failingConnect) Connect(context.Context, cluster.Route, time.Duration, int64, cluster.InboxOptions, cluster.ConnLimit) (cluster.ConnectResult, error) {
	return cluster.ConnectResult{}, errors.New("backend down")
}

func TestBackendFailureRefusesBeforeTheUpgrade(t *testing.T) {
	n := startNodeWith(t, failingConnect{cluster.NewMemory()}, nil)
	c, br := rawDial(t, n.addr)
	io.WriteString(c, upgradeRequest(t, "alice", ""))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("answer %d %v, want 503 with Retry-After", resp.StatusCode, resp.Header)
	}
	eventually(t, 5*time.Second, "connection forgotten", func() bool { return n.hub.count() == 0 })
}

// pendingBytes is what the accept path holds of unfinished requests.
func (a *acceptor) pendingBytes() int {
	a.pendMu.Lock()
	hs := make([]*hsConn, 0, len(a.pending))
	for h := range a.pending {
		hs = append(hs, h)
	}
	a.pendMu.Unlock()
	total := 0
	for _, h := range hs {
		h.mu.Lock()
		total += len(h.buf)
		h.mu.Unlock()
	}
	return total
}

// handshakeFrom opens a connection that announces itself with prefix (a
// PROXY header) and extra request headers, and returns the HTTP status.
func handshakeFrom(t *testing.T, n *testNode, prefix, user, headers string) int {
	t.Helper()
	c, br := rawDial(t, n.addr)
	req := upgradeRequest(t, user, "")
	if headers != "" {
		req = strings.Replace(req, "\r\n\r\n", "\r\n"+headers+"\r\n\r\n", 1)
	}
	io.WriteString(c, prefix+req)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%q: %v", prefix+headers, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Keep it open: it holds its IP's slot.
		eventually(t, 5*time.Second, "connection registered", func() bool { return len(n.hub.userConns(user)) == 1 })
	}
	return resp.StatusCode
}

func TestClientIPFromATrustedProxy(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) {
		c.TrustedProxies = []string{"127.0.0.0/8"}
		c.MaxConnsPerIP = 1
	})
	v2 := func(src [4]byte) string {
		h := "\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c"
		return h + string(src[:]) + "\x0a\x00\x00\x01\x30\x39\x1f\x90"
	}
	steps := []struct {
		what, prefix, headers string
		want                  int
	}{
		{"PROXY v1 from 203.0.113.7", "PROXY TCP4 203.0.113.7 10.0.0.1 5000 8080\r\n", "", 101},
		{"PROXY v1 from 203.0.113.8", "PROXY TCP4 203.0.113.8 10.0.0.1 5001 8080\r\n", "", 101},
		{"PROXY v2 from 203.0.113.7 again", v2([4]byte{203, 0, 113, 7}), "", 429},
		{"PROXY v2 from 203.0.113.9", v2([4]byte{203, 0, 113, 9}), "", 101},
		// Without a PROXY header: X-Forwarded-For, skipping our own proxies.
		{"X-Forwarded-For 198.51.100.1 via a trusted hop", "", "X-Forwarded-For: 198.51.100.1, 127.0.0.5", 101},
		{"X-Forwarded-For 198.51.100.1 again", "", "X-Forwarded-For: 198.51.100.1", 429},
		{"X-Real-IP 198.51.100.2", "", "X-Real-IP: 198.51.100.2", 101},
		{"bad PROXY header", "PROXY TCP4 nonsense\r\n", "", 400},
	}
	for i, s := range steps {
		if got := handshakeFrom(t, n, s.prefix, fmt.Sprintf("u%d", i), s.headers); got != s.want {
			t.Fatalf("%s: status %d, want %d", s.what, got, s.want)
		}
	}
}

func TestForwardedHeadersFromAnUntrustedPeerAreIgnored(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.MaxConnsPerIP = 1 })
	if got := handshakeFrom(t, n, "", "a", "X-Forwarded-For: 198.51.100.1"); got != 101 {
		t.Fatalf("first: %d", got)
	}
	// A different forwarded address does not help: the peer is 127.0.0.1.
	if got := handshakeFrom(t, n, "", "b", "X-Forwarded-For: 198.51.100.2"); got != 429 {
		t.Fatalf("second: %d, want 429", got)
	}
}

// acceptorOf waits for the node's Serve goroutine to have set up its
// accept path.
func acceptorOf(t *testing.T, n *testNode) *acceptor {
	t.Helper()
	eventually(t, 5*time.Second, "accept path ready", func() bool { return n.acceptor.Load() != nil })
	return n.acceptor.Load()
}

// healthz sends prefix and GET /healthz on c and reads the 200 answer.
func healthz(t *testing.T, c net.Conn, br *bufio.Reader, prefix string) {
	t.Helper()
	io.WriteString(c, prefix+"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
}

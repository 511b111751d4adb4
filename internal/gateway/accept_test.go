package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/cluster"
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
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
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
	a := n.acceptor.Load()
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
	a := n.acceptor.Load()
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

func (failingConnect) Connect(context.Context, cluster.Route, time.Duration, int64, cluster.InboxOptions) (cluster.ConnectResult, error) {
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

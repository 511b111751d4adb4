package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
)

// heldUntilClosed sends a request head and never the rest; it returns the
// error that ended the read (io.EOF once the node closed the connection).
func heldUntilClosed(t *testing.T, addr, head string) <-chan error {
	c, _ := rawDial(t, addr)
	c.SetDeadline(time.Now().Add(60 * time.Second))
	io.WriteString(c, head)
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, c)
		if err == nil {
			err = io.EOF
		}
		done <- err
	}()
	return done
}

// Contract §2: a request arrives whole within 10 s of its first byte,
// body included, else the connection is closed.
func TestSlowRequestBodyIsClosed(t *testing.T) {
	n := startNode(t, nil)
	heads := map[string]string{
		"Content-Length without the body": "POST /api/v1/publish HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
		"chunked without a chunk":         "POST /api/v1/publish HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"a chunk never ended":             "POST /api/v1/publish HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n{",
	}
	held := map[string]<-chan error{}
	for what, head := range heads {
		held[what] = heldUntilClosed(t, n.addr, head)
	}
	// Meanwhile the node serves others.
	c := n.connect(t, "bystander", "")
	c.send(map[string]any{"type": "ping"})
	c.expect("pong")
	for what, done := range held {
		if err := <-done; !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s: still open after 60 s", what)
			} else {
				t.Logf("%s: ended with %v", what, err)
			}
		}
	}
	c.send(map[string]any{"type": "ping"})
	c.expect("pong")
}

// Contract §3: the own accept path parses the request strictly.
func TestUpgradeRequestIsParsedStrictly(t *testing.T) {
	n := startNode(t, nil)
	good := upgradeRequest(t, "strict", "")
	with := func(extra string) string { return strings.Replace(good, "\r\n\r\n", "\r\n"+extra+"\r\n\r\n", 1) }
	key := "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
	cases := []struct {
		what, req string
		want      int
	}{
		{"a good request", good, 101},
		{"two Host headers", with("Host: y"), 400},
		{"two Origin headers", with("Origin: http://x\r\nOrigin: http://evil"), 400},
		{"two keys", with(key), 400},
		{"a key of 18 bytes", strings.Replace(good, "dGhlIHNhbXBsZSBub25jZQ==", "AAAAAAAAAAAAAAAAAAAAAAAA", 1), 400},
		{"a key that is not base64", strings.Replace(good, "dGhlIHNhbXBsZSBub25jZQ==", "!!!!!!!!!!!!!!!!!!!!!!!!", 1), 400},
		{"a body", with("Content-Length: 5") + "hello", 400},
		{"Transfer-Encoding", with("Transfer-Encoding: chunked") + "0\r\n\r\n", 400},
		{"60 KiB of headers in one write", with("X-Filler: " + strings.Repeat("a", 60<<10)), 431},
		{"bare LF line ends", strings.ReplaceAll(good, "\r\n", "\n"), 400},
	}
	for _, tc := range cases {
		c, br := rawDial(t, n.addr)
		c.SetDeadline(time.Now().Add(5 * time.Second)) // the handshake deadline is 10 s
		io.WriteString(c, tc.req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s: %v", tc.what, err)
			continue
		}
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.what, resp.StatusCode, tc.want)
		}
		c.Close()
	}
	if got := n.accepted.Load(); got != 1 {
		t.Fatalf("%d connections accepted, want the good one only", got)
	}
}

// Behind a PROXY-protocol balancer the client's address holds for every
// request of a kept-alive connection: a forged X-Forwarded-For on an
// upgrade after a first request is not believed.
func TestProxyAddressHoldsOnAKeptAliveConnection(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) {
		c.TrustedProxies = []string{"127.0.0.0/8"}
		c.MaxConnsPerIP = 1
	})
	c, br := rawDial(t, n.addr)
	healthz(t, c, br, "PROXY TCP4 203.0.113.7 10.0.0.1 5000 8080\r\n")
	req := strings.Replace(upgradeRequest(t, "kept", ""), "\r\n\r\n", "\r\nX-Forwarded-For: 198.51.100.50\r\n\r\n", 1)
	io.WriteString(c, req)
	readWelcome(t, br)
	eventually(t, 5*time.Second, "connection registered", func() bool { return len(n.hub.userConns("kept")) == 1 })
	// 203.0.113.7's one slot is taken by that connection.
	if got := handshakeFrom(t, n, "PROXY TCP4 203.0.113.7 10.0.0.1 5001 8080\r\n", "again", ""); got != 429 {
		t.Fatalf("a second connection from 203.0.113.7: %d, want 429", got)
	}
	if got := handshakeFrom(t, n, "PROXY TCP4 198.51.100.50 10.0.0.1 5002 8080\r\n", "forged", ""); got != 101 {
		t.Fatalf("the forged address's own connection: %d, want 101 (its slot is free)", got)
	}
}

// An X-Forwarded-For entry that does not parse is not replaced by the
// client's X-Real-IP: the connection counts as the trusted hop's.
func TestUnparsableForwardedForIgnoresXRealIP(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) {
		c.TrustedProxies = []string{"127.0.0.0/8"}
		c.MaxConnsPerIP = 1
	})
	if got := handshakeFrom(t, n, "", "a", "X-Forwarded-For: nonsense\r\nX-Real-IP: 198.51.100.60"); got != 101 {
		t.Fatalf("first: %d", got)
	}
	if got := handshakeFrom(t, n, "", "b", "X-Real-IP: 198.51.100.60"); got != 101 {
		t.Fatalf("198.51.100.60 itself: %d, want 101 (the first did not take its slot)", got)
	}
	if got := handshakeFrom(t, n, "", "c", "X-Forwarded-For: garbage\r\nX-Real-IP: 198.51.100.61"); got != 429 {
		t.Fatalf("another unparsable X-Forwarded-For: %d, want 429 (the hop's slot is taken)", got)
	}
}

// The API wsgate dev leaves open (no key) answers its own pages only:
// no foreign Origin, no body that is not JSON (a cross-site form or
// text/plain POST needs no preflight).
func TestOpenDevAPIRefusesOtherOriginsAndNonJSONBodies(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.Dev, c.APIKey = true, "" })
	body := `{"target":{"type":"user","id":"nobody"},"event":"e","data":1}`
	cases := []struct {
		what, method, path, origin, ctype, body string
		want                                    int
	}{
		{"a cross-site text/plain POST", "POST", "/api/v1/publish", "http://evil.example", "text/plain", body, 403},
		{"text/plain without an Origin", "POST", "/api/v1/publish", "", "text/plain", body, 415},
		{"a form POST", "POST", "/api/v1/publish", "", "application/x-www-form-urlencoded", body, 415},
		{"a foreign Origin with JSON", "POST", "/api/v1/publish", "http://evil.example", "application/json", body, 403},
		{"a foreign Origin draining", "POST", "/api/v1/nodes/t1/drain", "http://evil.example", "", "", 403},
		{"the console's own POST", "POST", "/api/v1/publish", "http://" + n.addr, "application/json", body, 200},
		{"the console's GET", "GET", "/api/v1/nodes", "http://" + n.addr, "", "", 200},
		{"a GET without an Origin", "GET", "/api/v1/nodes", "", "", "", 200},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, "http://"+n.addr+tc.path, strings.NewReader(tc.body))
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.what, resp.StatusCode, tc.want)
		}
	}
	if st := n.status.Load(); st != cluster.StatusActive {
		t.Fatalf("node status %v after a foreign drain request", st)
	}
}

// Nesting bombs on MessagePack connections are refused as bad frames,
// and the node keeps answering another client meanwhile.
func TestMsgpackNestingBombsAreRefusedAndOthersServed(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.MaxMessageBytes = 1 << 20 })
	bomb := []byte{0x82, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'p', 'i', 'n', 'g', 0xa4, 'd', 'a', 't', 'a'}
	for range 64 << 10 {
		bomb = append(bomb, 0x91)
	}
	bomb = append(bomb, 0xc0)
	bystander := n.connect(t, "bystander", "")
	for i := range 2 {
		a := n.dial(t, "?format=msgpack", http.Header{"Authorization": {"Bearer " + token(t, fmt.Sprintf("attacker%d", i), nil)}}, false)
		for range 8 {
			a.sendRaw(ws.OpBinary, bomb)
		}
	}
	for range 3 {
		bystander.send(map[string]any{"type": "ping"})
		bystander.expect("pong")
	}
	eventually(t, 30*time.Second, "bombs refused", func() bool {
		return counterValue(t, n, "wsgate_client_frames_total", "invalid") >= 16
	})
}

// A frame, or a fragmented message, trickled and never finished holds
// heap: the connection is closed with 1008 once it is 10 s old.
func TestUnfinishedFramesAreClosedWith1008(t *testing.T) {
	n := startNode(t, nil)
	bystander := n.connect(t, "bystander", "")
	half := n.connect(t, "half", "")
	half.wmu.Lock()
	ws.WriteHeader(half.conn, ws.Header{Fin: true, OpCode: ws.OpText, Length: 100, Masked: true})
	half.conn.Write(make([]byte, 10))
	half.wmu.Unlock()
	frag := n.connect(t, "frag", "")
	frag.wmu.Lock()
	ws.WriteFrame(frag.conn, ws.MaskFrame(ws.NewFrame(ws.OpText, false, []byte(`{"type":`))))
	frag.wmu.Unlock()
	for range 3 {
		bystander.send(map[string]any{"type": "ping"})
		bystander.expect("pong")
	}
	if code := half.waitClosed(60 * time.Second); code != 1008 {
		t.Errorf("half a frame: close %d, want 1008", code)
	}
	if code := frag.waitClosed(60 * time.Second); code != 1008 {
		t.Errorf("a message never finished: close %d, want 1008", code)
	}
	bystander.send(map[string]any{"type": "ping"})
	bystander.expect("pong")
	eventually(t, 10*time.Second, "closed connections forgotten", func() bool {
		left := 0
		n.partial.Range(func(any, any) bool { left++; return true })
		return left == 0
	})
}

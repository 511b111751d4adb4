package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/config"
)

// authService is a real HTTP server playing the business's session check:
// the session cookie decides.
type authService struct {
	*httptest.Server
	calls atomic.Int32
	last  atomic.Value // admission.ConnectProxyRequest
}

func newAuthService(t *testing.T) *authService {
	s := &authService{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		var req admission.ConnectProxyRequest
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		s.last.Store(req)
		switch c := req.Headers["Cookie"]; {
		case strings.Contains(c, "session=good"):
			json.NewEncoder(w).Encode(map[string]any{"user": "carl", "rooms": []string{"team-*"}, "pub": []string{"room:team-*"},
				"info": map[string]any{"plan": "pro"}, "expire_at": time.Now().Add(time.Hour).Unix()})
		case strings.Contains(c, "session=expired"):
			json.NewEncoder(w).Encode(map[string]any{"user": "carl", "expire_at": time.Now().Add(-time.Minute).Unix()})
		case strings.Contains(c, "session=banned"):
			w.WriteHeader(http.StatusForbidden)
		case strings.Contains(c, "session=broken"):
			w.WriteHeader(http.StatusInternalServerError)
		case strings.Contains(c, "session=hang"):
			<-r.Context().Done() // never answers: the node gives up at 5 s
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// cookieHandshake sends an upgrade with the given extra headers and no
// token; it returns the answer and the reader positioned after it.
func cookieHandshake(t *testing.T, n *testNode, query, headers string) (*http.Response, *bufio.Reader) {
	t.Helper()
	c, br := rawDial(t, n.addr)
	io.WriteString(c, "GET /ws"+query+" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"+headers+"\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, br
}

func refusalCode(t *testing.T, resp *http.Response) string {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("refusal body: %v", err)
	}
	return body.Error.Code
}

func TestConnectProxy(t *testing.T) {
	svc := newAuthService(t)
	n := startNode(t, func(c *config.Gateway) { c.JWTSecret = ""; c.ConnectURL = svc.URL })

	// A session cookie admits the client as the proxy's user, with its claims.
	resp, br := cookieHandshake(t, n, "?format=json&room=x", "Cookie: session=good; theme=dark\r\nOrigin: http://x\r\nUser-Agent: test-agent\r\n")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("good session: %d, want 101", resp.StatusCode)
	}
	w := readFrame(t, br)
	if w["type"] != "welcome" || w["user"] != "carl" {
		t.Fatalf("welcome %v, want user carl", w)
	}
	req := svc.last.Load().(admission.ConnectProxyRequest)
	if req.IP != "127.0.0.1" || req.Headers["Cookie"] != "session=good; theme=dark" || req.Headers["Origin"] != "http://x" ||
		req.Headers["User-Agent"] != "test-agent" || req.Query["room"] != "x" || req.Query["format"] != "json" {
		t.Fatalf("proxy request %+v: want the ip, the four headers and the query", req)
	}
	conns := n.hub.userConns("carl")
	if len(conns) != 1 {
		t.Fatalf("carl has %d connections here", len(conns))
	}
	c := conns[0]
	claims := c.claims()
	c.mu.Lock()
	exp := c.exp
	c.mu.Unlock()
	if claims == nil || len(claims.Rooms) != 1 || claims.Rooms[0] != "team-*" || exp < time.Now().Add(59*time.Minute).Unix() {
		t.Fatalf("claims %+v exp %d: want the proxy's rooms and expire_at as exp", claims, exp)
	}

	for _, tc := range []struct {
		cookie string
		status int
		code   string
	}{
		{"session=nope", 401, "unauthorized"},
		{"session=expired", 401, "unauthorized"},
		{"session=banned", 403, "forbidden"},
		{"session=broken", 503, "unavailable"},
		{"session=hang", 503, "unavailable"},
	} {
		start := time.Now()
		resp, _ := cookieHandshake(t, n, "", "Cookie: "+tc.cookie+"\r\n")
		if resp.StatusCode != tc.status || refusalCode(t, resp) != tc.code {
			t.Fatalf("%s: %d, want %d %s", tc.cookie, resp.StatusCode, tc.status, tc.code)
		}
		if tc.cookie == "session=hang" && time.Since(start) < admission.ConnectProxyTimeout {
			t.Fatalf("hanging proxy refused after %v, before the 5 s bound", time.Since(start))
		}
	}
	if k := len(n.hub.userConns("carl")); k != 1 {
		t.Fatalf("refused handshakes registered connections: carl has %d", k)
	}
	// The node kept serving while the proxy hung.
	resp, br = cookieHandshake(t, n, "", "Cookie: session=good\r\n")
	if resp.StatusCode != http.StatusSwitchingProtocols || readFrame(t, br)["user"] != "carl" {
		t.Fatalf("after the refusals: %d", resp.StatusCode)
	}
}

// With a JWT key too: a valid token is used without asking the proxy, an
// invalid one is refused (401) without asking it, and only a handshake
// without a token goes to the proxy.
func TestConnectProxyWithJWT(t *testing.T) {
	svc := newAuthService(t)
	n := startNode(t, func(c *config.Gateway) { c.ConnectURL = svc.URL })
	resp, br := cookieHandshake(t, n, "", "Authorization: Bearer "+token(t, "dora", nil)+"\r\nCookie: session=good\r\n")
	if resp.StatusCode != http.StatusSwitchingProtocols || readFrame(t, br)["user"] != "dora" {
		t.Fatalf("valid token: %d, want 101 as dora", resp.StatusCode)
	}
	resp, _ = cookieHandshake(t, n, "", "Authorization: Bearer not-a-jwt\r\nCookie: session=good\r\n")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("invalid token: %d, want 401", resp.StatusCode)
	}
	if k := svc.calls.Load(); k != 0 {
		t.Fatalf("the proxy was asked %d times for handshakes with a token", k)
	}
	resp, br = cookieHandshake(t, n, "", "Cookie: session=good\r\n")
	if resp.StatusCode != http.StatusSwitchingProtocols || readFrame(t, br)["user"] != "carl" {
		t.Fatalf("no token: %d, want 101 as carl", resp.StatusCode)
	}
	if k := svc.calls.Load(); k != 1 {
		t.Fatalf("the proxy was asked %d times, want once", k)
	}
}

// readFrame reads one server text frame as JSON.
func readFrame(t *testing.T, br *bufio.Reader) map[string]any {
	t.Helper()
	var m map[string]any
	b := make([]byte, 2)
	if _, err := io.ReadFull(br, b); err != nil {
		t.Fatal(err)
	}
	l := int(b[1] & 0x7f)
	switch l {
	case 126:
		ext := make([]byte, 2)
		io.ReadFull(br, ext)
		l = int(ext[0])<<8 | int(ext[1])
	case 127:
		t.Fatal("frame too large for a test")
	}
	payload := make([]byte, l)
	if _, err := io.ReadFull(br, payload); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(payload, &m); err != nil {
		t.Fatalf("frame %q: %v", payload, err)
	}
	return m
}

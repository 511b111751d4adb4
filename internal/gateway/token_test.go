package gateway

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/gobwas/ws"
	"github.com/golang-jwt/jwt/v5"

	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/protocol"
)

// jwksServer is a real JWKS endpoint whose key set a test rotates.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []jose.JSONWebKey
	down    bool
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: s.keys})
	}))
	t.Cleanup(s.Close)
	return s
}

// set publishes the public halves of keys (kid: private key).
func (s *jwksServer) set(keys map[string]crypto.Signer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = nil
	for kid, k := range keys {
		s.keys = append(s.keys, jose.JSONWebKey{Key: k.Public(), KeyID: kid, Use: "sig"})
	}
}

func (s *jwksServer) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// signedBy signs a token for sub with key under kid.
func signedBy(t testing.TB, key crypto.Signer, kid, sub string, exp time.Time) string {
	t.Helper()
	var m jwt.SigningMethod
	switch key.(type) {
	case *rsa.PrivateKey:
		m = jwt.SigningMethodRS256
	case *ecdsa.PrivateKey:
		m = jwt.SigningMethodES256
	case ed25519.PrivateKey:
		m = jwt.SigningMethodEdDSA
	}
	tok := jwt.NewWithClaims(m, jwt.MapClaims{"sub": sub, "exp": exp.Unix()})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// handshakeCode dials with tok and returns the HTTP status of a refusal
// (101 on success, the connection then closed).
func handshakeCode(t *testing.T, n *testNode, query, tok string) int {
	t.Helper()
	hdr := http.Header{}
	if tok != "" {
		hdr.Set("Authorization", "Bearer "+tok)
	}
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(hdr), Timeout: 15 * time.Second}
	conn, _, _, err := d.Dial(t.Context(), "ws://"+n.addr+"/ws"+query)
	if err == nil {
		conn.Close()
		return http.StatusSwitchingProtocols
	}
	se, ok := err.(ws.StatusError)
	if !ok {
		t.Fatalf("dial: %v", err)
	}
	return int(se)
}

// bearer dials with tok and waits for the welcome.
func (n *testNode) bearer(t *testing.T, tok string) *wsClient {
	t.Helper()
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + tok}}, true)
	c.expect("welcome")
	return c
}

// alive sends a ping and awaits its pong: the connection still serves.
func (c *wsClient) alive() {
	c.t.Helper()
	c.send(`{"type":"ping","ts":7}`)
	c.expect("pong")
}

func TestJWKSRotationUnderLiveConnections(t *testing.T) {
	keySetMinInterval = time.Millisecond
	t.Cleanup(func() { keySetMinInterval = 0 })
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	js := newJWKSServer(t)
	js.setDown(true)
	n := startNode(t, func(c *config.Gateway) { c.JWTSecret = ""; c.JWKSURL = js.URL })
	exp := time.Now().Add(time.Hour)

	// Unreachable at start: the node serves, tokens of the set get 503
	// until the first fetch succeeds.
	if code := handshakeCode(t, n, "", signedBy(t, rsaKey, "r1", "alice", exp)); code != http.StatusServiceUnavailable {
		t.Fatalf("before the first fetch: %d, want 503", code)
	}
	js.set(map[string]crypto.Signer{"r1": rsaKey})
	js.setDown(false)
	eventually(t, 10*time.Second, "key set fetched", n.gate.Keys().Loaded)
	alice := n.bearer(t, signedBy(t, rsaKey, "r1", "alice", exp))

	// Rotation: r1 leaves, e1 and d1 come. A token naming e1 makes the
	// node fetch at once, without a restart.
	js.set(map[string]crypto.Signer{"e1": ecKey, "d1": edKey})
	before := js.fetches.Load()
	bob := n.bearer(t, signedBy(t, ecKey, "e1", "bob", exp))
	if js.fetches.Load() == before {
		t.Fatal("the unknown kid e1 caused no fetch")
	}
	carol := n.bearer(t, signedBy(t, edKey, "d1", "carol", exp))
	// The removed key is refused for new connections; the live connection
	// it signed stays until its exp.
	if code := handshakeCode(t, n, "", signedBy(t, rsaKey, "r1", "dave", exp)); code != http.StatusUnauthorized {
		t.Fatalf("token of the removed key r1: %d, want 401", code)
	}
	alice.alive()

	// Endpoint down: the last good set stays in use.
	js.setDown(true)
	// dave's token caused a fetch just now: on a quiet machine the next
	// handshake can come within the 1 ms between two fetches.
	eventually(t, 10*time.Second, "a fetch due", n.gate.Keys().RefreshDue)
	before = js.fetches.Load()
	if code := handshakeCode(t, n, "", signedBy(t, ecKey, "x9", "eve", exp)); code != http.StatusUnauthorized {
		t.Fatalf("unknown kid with the endpoint down: %d, want 401", code)
	}
	if js.fetches.Load() == before {
		t.Fatal("the unknown kid x9 caused no fetch")
	}
	n.bearer(t, signedBy(t, ecKey, "e1", "frank", exp)).alive()
	bob.alive()
	carol.alive()
	if got := counterValue(t, n, "wsgate_jwks_fetch_total", "error"); got < 2 {
		t.Fatalf("wsgate_jwks_fetch_total{result=error} = %v, want >= 2", got)
	}
}

func TestRefreshFrameReplacesExpAndGrants(t *testing.T) {
	n := startNode(t, nil)
	exp := time.Now().Add(31 * time.Second).Unix()
	c := n.bearer(t, token(t, "alice", map[string]any{"exp": exp, "rooms": []string{"a"}}))

	// 30 s before exp: one expiring frame with the token's exp.
	if f := c.expect(protocol.TypeExpiring); int64(f["exp"].(float64)) != exp {
		t.Fatalf("expiring %v, want exp %d", f, exp)
	}
	refused := func(id, tok string) {
		t.Helper()
		c.send(map[string]any{"type": "refresh", "id": id, "token": tok})
		r := c.expect("reply")
		if r["id"] != id || r["ok"] != false || r["error"].(map[string]any)["code"] != "unauthorized" {
			t.Fatalf("refresh %s: %v, want ok:false unauthorized", id, r)
		}
	}
	refused("other", token(t, "mallory", map[string]any{"rooms": []string{"*"}}))
	refused("garbage", "not.a.token")
	refused("expired", token(t, "alice", map[string]any{"exp": time.Now().Add(-time.Minute).Unix(), "rooms": []string{"*"}}))
	join := func(room string) map[string]any {
		c.send(map[string]any{"type": "join", "id": "j-" + room, "room": room})
		return c.expect("reply")
	}
	if r := join("b"); r["ok"] != false {
		t.Fatalf("join b before the refresh: %v, want refused (nothing changed)", r)
	}

	exp2 := time.Now().Add(32 * time.Second).Unix()
	c.send(map[string]any{"type": "refresh", "id": "ok", "token": token(t, "alice", map[string]any{"exp": exp2, "rooms": []string{"b"}})})
	if r := c.expect("reply"); r["id"] != "ok" || r["ok"] != true {
		t.Fatalf("refresh: %v, want ok", r)
	}
	if r := join("b"); r["ok"] != true {
		t.Fatalf("join b after the refresh: %v", r)
	}
	if r := join("a"); r["ok"] != false {
		t.Fatalf("join a after the refresh: %v, want refused (rooms replaced)", r)
	}
	// Again for the new exp.
	if f := c.expect(protocol.TypeExpiring); int64(f["exp"].(float64)) != exp2 {
		t.Fatalf("second expiring %v, want exp %d", f, exp2)
	}
	for result, want := range map[string]float64{metrics.RefreshOK: 1, metrics.RefreshInvalid: 2, metrics.RefreshOtherUser: 1} {
		if got := counterValue(t, n, "wsgate_token_refresh_total", result); got != want {
			t.Errorf("wsgate_token_refresh_total{result=%s} = %v, want %v", result, got, want)
		}
	}
}

func TestRefreshOutlivesTheOldExp(t *testing.T) {
	n := startNode(t, nil)
	exp := time.Now().Add(2 * time.Second).Unix()
	kept := n.bearer(t, token(t, "kept", map[string]any{"exp": exp}))
	witness := n.bearer(t, token(t, "witness", map[string]any{"exp": exp}))
	kept.expect(protocol.TypeExpiring)
	kept.send(map[string]any{"type": "refresh", "id": "r", "token": token(t, "kept", nil)})
	if r := kept.expect("reply"); r["ok"] != true {
		t.Fatalf("refresh: %v", r)
	}
	// The witness, not refreshed, is closed at the old exp: the sweep has
	// passed it; the refreshed connection is still served.
	if code := witness.waitClosed(10 * time.Second); code != protocol.CloseTokenExpired {
		t.Fatalf("witness closed with %d, want 4401", code)
	}
	kept.alive()
}

func TestNamesWithBidiOrSeparatorsRefused(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.JWTMaxLifetime = 2 * time.Hour })
	for _, sub := range []string{"ad\u202emin", "a\u2066b", "a\u2028b", "a\u2029b", "a\u0085b"} {
		if code := handshakeCode(t, n, "", token(t, sub, nil)); code != http.StatusBadRequest {
			t.Errorf("sub %q: %d, want 400", sub, code)
		}
	}
	if code := handshakeCode(t, n, "", token(t, "alice", map[string]any{"exp": time.Now().Add(3 * time.Hour).Unix()})); code != http.StatusUnauthorized {
		t.Errorf("exp beyond WSGATE_JWT_MAX_LIFETIME: %d, want 401", code)
	}
	c := n.connect(t, "alice", "")
	c.send(`{"type":"join","id":"j","room":"ad\u202emin"}`)
	if f := c.expect("error"); f["code"] != protocol.ErrBadFrame {
		t.Fatalf("join with a bidi room: %v, want bad_frame", f)
	}
	c.send(`{"type":"publish","id":"p","target":{"type":"user","id":"a\u2028b"},"data":1}`)
	if f := c.expect("error"); f["code"] != protocol.ErrBadFrame {
		t.Fatalf("publish to a user with a line separator: %v, want bad_frame", f)
	}
	for _, path := range []string{
		"/api/v1/rooms/" + url.PathEscape("ad\u202emin") + "/members",
		"/api/v1/users/" + url.PathEscape("a\u2069b") + "/presence",
	} {
		if code, _ := apiCall(t, n, "GET", path, "k", ""); code != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", path, code)
		}
	}

	insecure := startNode(t, func(c *config.Gateway) { c.JWTSecret = ""; c.AuthInsecure = true })
	if code := handshakeCode(t, insecure, "?user="+url.QueryEscape("ad\u202emin"), ""); code != http.StatusBadRequest {
		t.Errorf("insecure user with a bidi override: %d, want 400", code)
	}
	if code := handshakeCode(t, insecure, "?user=plain", ""); code != http.StatusSwitchingProtocols {
		t.Errorf("insecure plain user: %d, want 101", code)
	}
}

func TestSeveralHS256SecretsAccepted(t *testing.T) {
	const second = "second-secret-0123456789abcdef"
	n := startNode(t, func(c *config.Gateway) { c.JWTSecret = testSecret + ", " + second })
	n.connect(t, "old", "").alive()
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "new", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(second))
	n.bearer(t, tok).alive()
	other, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "x", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("not-listed-0123456789abcdef012"))
	if code := handshakeCode(t, n, "", other); code != http.StatusUnauthorized {
		t.Fatalf("token of an unlisted secret: %d, want 401", code)
	}
}

// A token accepted within the leeway after its exp is not closed at once:
// the connection ends leeway after exp, announced by expiring.
func TestLeewayExtendsTheConnection(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.JWTLeeway = 20 * time.Second })
	exp := time.Now().Add(-time.Second).Unix()
	c := n.bearer(t, token(t, "late", map[string]any{"exp": exp}))
	if f := c.expect(protocol.TypeExpiring); int64(f["exp"].(float64)) != exp+20 {
		t.Fatalf("expiring %v, want exp %d (exp + leeway)", f, exp+20)
	}
	c.alive()
	if code := handshakeCode(t, n, "", token(t, "later", map[string]any{"exp": time.Now().Add(-time.Minute).Unix()})); code != http.StatusUnauthorized {
		t.Fatalf("token expired beyond the leeway: %d, want 401", code)
	}
}

package admission

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

const secret = "admission-test-secret-0123456789abcdef"

func newChecker(t *testing.T, edit func(*config.Gateway), o Options) *Checker {
	t.Helper()
	cfg := config.Gateway{JWTSecret: secret, AllowQueryToken: true, HandshakeRatePerIP: 1000, MaxConnsPerIP: 2}
	if edit != nil {
		edit(&cfg)
	}
	g, err := New(&cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func token(t *testing.T, user string) string {
	t.Helper()
	tok, err := auth.SignHS256([]byte(secret), auth.Grant{Subject: user, ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestClientIPBehindTrustedProxies(t *testing.T) {
	g := newChecker(t, func(c *config.Gateway) { c.TrustedProxies = []string{"10.0.0.0/8"} }, Options{})
	for _, tc := range []struct {
		name, peer, xff, realIP, want string
	}{
		{"untrusted peer: its headers are ignored", "192.0.2.1", "198.51.100.7", "198.51.100.8", "192.0.2.1"},
		{"rightmost entry that is not a proxy", "10.0.0.1", "203.0.113.9, 198.51.100.7, 10.0.0.2", "", "198.51.100.7"},
		{"a bad entry ends the walk at the last trusted hop", "10.0.0.1", "198.51.100.7, junk, 10.0.0.2", "", "10.0.0.1"},
		{"only proxies: the peer", "10.0.0.1", "10.0.0.3", "", "10.0.0.1"},
		{"X-Real-IP without X-Forwarded-For", "10.0.0.1", "", "198.51.100.8", "198.51.100.8"},
		{"IPv4-mapped IPv6 is unmapped", "10.0.0.1", "::ffff:198.51.100.7", "", "198.51.100.7"},
	} {
		req := Request{IP: tc.peer, XFF: tc.xff, RealIP: tc.realIP}
		if got := g.ClientIP(&req); got != tc.want {
			t.Errorf("%s: ClientIP = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestTokenSources(t *testing.T) {
	g := newChecker(t, nil, Options{})
	q := url.Values{"token": {"from-query"}}
	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{"Authorization first", Request{Authz: "Bearer from-header", Protocols: []string{"bearer.from-proto"}, Query: q}, "from-header"},
		{"then a bearer subprotocol", Request{Protocols: []string{"wsgate.v1, bearer.from-proto"}, Query: q}, "from-proto"},
		{"then the query", Request{Query: q}, "from-query"},
		{"none", Request{Query: url.Values{}}, ""},
	} {
		if got := g.Token(&tc.req); got != tc.want {
			t.Errorf("%s: Token = %q, want %q", tc.name, got, tc.want)
		}
	}
	off := newChecker(t, func(c *config.Gateway) { c.AllowQueryToken = false }, Options{})
	if got := off.Token(&Request{Query: q}); got != "" {
		t.Errorf("WSGATE_ALLOW_QUERY_TOKEN=false: Token = %q, want none", got)
	}
}

// TestChecksInTheContractsOrder: a handshake failing several checks is
// refused by the first of section 3's order, and an admitted one holds an
// IP slot until Release.
func TestChecksInTheContractsOrder(t *testing.T) {
	why := "draining"
	g := newChecker(t, func(c *config.Gateway) { c.AllowedOrigins = []string{"https://app.example"} },
		Options{NotAccepting: func() string { return why }})
	bad := Request{IP: "192.0.2.1", Origin: "https://evil.example", Host: "gw.example", Query: url.Values{}}
	if _, f := g.Peer(&bad); f == nil || f.Status != http.StatusServiceUnavailable || !strings.Contains(f.Msg, "draining") || f.RetryAfterSecs() != 5 {
		t.Fatalf("not accepting: %+v, want 503 naming why, Retry-After 5", f)
	}
	why = ""
	if _, f := g.Peer(&bad); f == nil || f.Code != "origin_forbidden" {
		t.Fatalf("bad Origin: %+v, want origin_forbidden", f)
	}
	ok := Request{IP: "192.0.2.1", Origin: "https://app.example", Host: "gw.example", Query: url.Values{"token": {token(t, "alice")}}}
	var held []Params
	for i := range 3 {
		a, f := g.Peer(&ok)
		if f == nil {
			a, f = g.Credentials(context.Background(), &ok, a, false)
		}
		if i < 2 {
			if f != nil || a.Claims == nil || a.Claims.Subject != "alice" {
				t.Fatalf("handshake %d: %+v, %+v; want alice admitted", i, a, f)
			}
			held = append(held, a)
			continue
		}
		if f == nil || f.Status != http.StatusTooManyRequests || f.Reason != "conn_limit" {
			t.Fatalf("third connection from one IP with WSGATE_MAX_CONNS_PER_IP=2: %+v, want 429 conn_limit", f)
		}
	}
	g.Release(&held[0])
	if f := g.AcquireIP("192.0.2.1"); f != nil {
		t.Fatalf("after a Release: %+v, want a slot", f)
	}
}

func TestCredentialsRefusals(t *testing.T) {
	g := newChecker(t, nil, Options{})
	for _, tc := range []struct {
		name   string
		query  url.Values
		status int
	}{
		{"no token", url.Values{}, http.StatusUnauthorized},
		{"a token of another secret", url.Values{"token": {"e30.e30.x"}}, http.StatusUnauthorized},
	} {
		req := Request{IP: "192.0.2.2", Query: tc.query}
		if _, f := g.Credentials(context.Background(), &req, Params{IP: req.IP}, false); f == nil || f.Status != tc.status {
			t.Errorf("%s: %+v, want %d", tc.name, f, tc.status)
		}
	}
	insecure := newChecker(t, func(c *config.Gateway) { c.JWTSecret, c.AuthInsecure = "", true }, Options{})
	req := Request{IP: "192.0.2.3", Query: url.Values{"user": {"bad\x01name"}}}
	if _, f := insecure.Credentials(context.Background(), &req, Params{IP: req.IP}, false); f == nil || f.Status != http.StatusBadRequest {
		t.Errorf("insecure mode, a user id that is no name: %+v, want 400", f)
	}
	req.Query.Set("user", "bob")
	if a, f := insecure.Credentials(context.Background(), &req, Params{IP: req.IP}, false); f != nil || a.Claims.Subject != "bob" {
		t.Errorf("insecure mode: %+v, %+v, want bob", a, f)
	}
	if f := AuthRefusal(auth.ErrKeysUnavailable); f.Status != http.StatusServiceUnavailable || f.RetryAfterSecs() != 5 {
		t.Errorf("key set never fetched: %+v, want 503 with Retry-After 5", f)
	}
	if f := AuthRefusal(errors.New("expired")); f.Status != http.StatusUnauthorized || f.RetryAfterSecs() != 0 {
		t.Errorf("a bad token: %+v, want 401 without Retry-After", f)
	}
}

func TestParseQuery(t *testing.T) {
	var a Params
	q := url.Values{"format": {"msgpack"}, "since": {"7"}, "device": {"phone"}, "room_since": {"lobby:3", "lobby:2"}}
	if f := a.ParseQuery(q, 10); f != nil {
		t.Fatal(f)
	}
	if a.Format != protocol.MsgPack || a.Since != 7 || !a.HasSince || a.Device != "phone" || a.RoomSince["lobby"] != 2 {
		t.Fatalf("parsed %+v", a)
	}
	for _, bad := range []url.Values{
		{"format": {"xml"}}, {"since": {"-1"}}, {"device": {"a", "b"}}, {"device": {"bad device"}},
		{"room_since": {"lobby"}}, {"room_since": {"a:1", "b:1", "c:1"}},
	} {
		var p Params
		if f := p.ParseQuery(bad, 2); f == nil || f.Status != http.StatusBadRequest || f.Code != "bad_request" {
			t.Errorf("%v: %+v, want 400 bad_request", bad, f)
		}
	}
	var d Params
	if f := d.ParseQuery(url.Values{"device": {protocol.DefaultDevice}}, 1); f != nil || d.Device != "" {
		t.Errorf("the default device: %+v %+v, want Device empty", d, f)
	}
}

func TestRefusalResponse(t *testing.T) {
	f := Refuse(http.StatusTooManyRequests, "rate_limited", "too many")
	f.RetryAfter = 1500 * time.Millisecond
	got := string(f.Response())
	for _, want := range []string{"HTTP/1.1 429 Too Many Requests\r\n", "Retry-After: 2\r\n", "Connection: close\r\n", `{"error":{"code":"rate_limited","message":"too many"}}`} {
		if !strings.Contains(got, want) {
			t.Errorf("response lacks %q:\n%s", want, got)
		}
	}
	if r := Refuse(http.StatusForbidden, "origin_forbidden", "no"); strings.Contains(string(r.Response()), "Retry-After") {
		t.Error("a 403 carries Retry-After")
	}
}

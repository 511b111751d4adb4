package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/config"
)

const tokenSecret = "cmd-test-jwt-secret-0123456789abcdef"

// gatewayVerifier is the verifier a node builds from env: the same
// settings, read by the gateway's own Set.
func gatewayVerifier(t *testing.T, env map[string]string) *auth.Verifier {
	t.Helper()
	var cfg config.Gateway
	if err := config.NewGatewaySet(&cfg).Load(nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	vc, err := admission.VerifierConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewVerifier(vc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func envList(env map[string]string) []string {
	var l []string
	for k, v := range env {
		l = append(l, k+"="+v)
	}
	return l
}

// A printed token is accepted by the verifier a gateway builds from the
// same configuration, with the claims asked for; the second secret of a
// rotation list does not sign.
func TestTokenPrintedIsAccepted(t *testing.T) {
	env := map[string]string{
		"WSGATE_JWT_SECRET":   tokenSecret + ",second-secret-0123456789abcdef0123",
		"WSGATE_JWT_ISSUER":   "https://id.example",
		"WSGATE_JWT_AUDIENCE": "wsgate",
	}
	code, out := runBin(t, envList(env), "token", "--sub", "alice", "--rooms", "lobby,team-*", "--pub", "room:lobby", "--ttl", "10m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	tok := strings.TrimSpace(out)
	c, err := gatewayVerifier(t, env).Verify(tok, time.Time{})
	if err != nil {
		t.Fatalf("the gateway's verifier refuses the printed token: %v", err)
	}
	if c.Subject != "alice" || !reflect.DeepEqual(c.Rooms, []string{"lobby", "team-*"}) || !reflect.DeepEqual(c.Pub, []string{"room:lobby"}) || c.Send != nil {
		t.Fatalf("claims %+v", c)
	}
	if left := time.Until(c.ExpiresAt); left <= 9*time.Minute || left > 10*time.Minute {
		t.Fatalf("exp in %s, want 10m", left)
	}
	// Signed with the first secret alone.
	if _, err := gatewayVerifier(t, map[string]string{"WSGATE_JWT_SECRET": "second-secret-0123456789abcdef0123",
		"WSGATE_JWT_ISSUER": "https://id.example", "WSGATE_JWT_AUDIENCE": "wsgate"}).Verify(tok, time.Time{}); err == nil {
		t.Fatal("the second secret of the list verifies the token: it should be signed with the first")
	}
	// --check accepts it and prints its claims.
	code, out = runBin(t, envList(env), "token", "--check", tok)
	var claims struct {
		Sub   string   `json:"sub"`
		Exp   int64    `json:"exp"`
		Rooms []string `json:"rooms"`
		Pub   []string `json:"pub"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &claims) != nil || claims.Sub != "alice" || claims.Exp != c.ExpiresAt.Unix() ||
		len(claims.Rooms) != 2 || len(claims.Pub) != 1 {
		t.Fatalf("--check: exit %d, output %q", code, out)
	}
}

// What wsgate token will not print, exit 2 and one line saying why.
func TestTokenRefusesToSign(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"WSGATE_JWT_SECRET=" + tokenSecret}, nil, "--sub is required"},
		{nil, []string{"--sub", "a"}, "WSGATE_JWT_SECRET is not set"},
		{[]string{"WSGATE_JWT_SECRET=short"}, []string{"--sub", "a"}, "WSGATE_JWT_SECRET is 5 bytes long"},
		{[]string{"WSGATE_JWT_SECRET=" + tokenSecret}, []string{"--sub", "a", "--ttl", "-1m"}, "--ttl (-1m0s) must be positive"},
		{[]string{"WSGATE_JWT_SECRET=" + tokenSecret, "WSGATE_JWT_MAX_LIFETIME=1h"}, []string{"--sub", "a", "--ttl", "2h"}, "beyond WSGATE_JWT_MAX_LIFETIME 1h0m0s (token_lifetime)"},
		{[]string{"WSGATE_JWT_SECRET=" + tokenSecret}, []string{"--sub", "a\u202eb"}, "(bad_subject)"},
	} {
		code, out := runBin(t, tc.env, append([]string{"token"}, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) || strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Errorf("%v %v: exit %d, output %q; want exit 2 and one line with %q", tc.env, tc.args, code, out, tc.want)
		}
	}
}

// --check names each reason of a refusal in one line, exit status 1; a
// token of the JWKS's key is accepted.
func TestTokenCheckNamesTheReason(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &ec.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}}
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(set)
	}))
	defer jwks.Close()
	env := []string{"WSGATE_JWT_SECRET=" + tokenSecret, "WSGATE_JWKS_URL=" + jwks.URL,
		"WSGATE_JWT_ISSUER=https://id.example", "WSGATE_JWT_MAX_LIFETIME=24h"}

	now := time.Now()
	hs := func(key string, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	es := func(kid string, claims jwt.MapClaims) string {
		tk := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
		tk.Header["kid"] = kid
		s, err := tk.SignedString(ec)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ok := func() jwt.MapClaims {
		return jwt.MapClaims{"sub": "alice", "iss": "https://id.example", "exp": now.Add(time.Hour).Unix()}
	}
	with := func(k string, v any) jwt.MapClaims {
		c := ok()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	for _, tc := range []struct {
		name, token, want string
	}{
		{"expired", hs(tokenSecret, with("exp", now.Add(-time.Hour).Unix())), "token expired at " + now.Add(-time.Hour).UTC().Format("2006-01-02T15:04")},
		{"bad signature", hs("another-secret-0123456789abcdef01234", ok()), "token signature invalid: not signed with the secret of WSGATE_JWT_SECRET (1 configured) (token_signature)"},
		{"unknown kid", es("k2", ok()), `token kid "k2" unknown: not in the key set of WSGATE_JWKS_URL (token_kid)`},
		{"missing sub", hs(tokenSecret, with("sub", nil)), "token sub missing or invalid: the user id is required (token_subject)"},
		{"missing exp", hs(tokenSecret, with("exp", nil)), "token exp missing (token_no_exp)"},
		{"not yet valid", hs(tokenSecret, with("nbf", now.Add(time.Hour).Unix())), "token not valid before"},
		{"issuer", hs(tokenSecret, with("iss", "https://other.example")), `token issuer (iss) "https://other.example" is not WSGATE_JWT_ISSUER "https://id.example" (token_issuer)`},
		{"lifetime", hs(tokenSecret, with("exp", now.Add(48*time.Hour).Unix())), "beyond WSGATE_JWT_MAX_LIFETIME 24h0m0s (token_lifetime)"},
		{"algorithm", jwtNone(t, ok()), `token algorithm "none" not allowed by the gateway's keys (token_algorithm)`},
		{"malformed", "not.a.token", "token malformed (token_malformed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runBin(t, env, "token", "--check", tc.token)
			if code != 1 || !strings.HasPrefix(out, "refused: ") || !strings.Contains(out, tc.want) || strings.Count(strings.TrimSpace(out), "\n") > 0 {
				t.Fatalf("exit %d, output %q; want exit 1 and one line with %q", code, out, tc.want)
			}
		})
	}
	// Keys of the JWKS and the secret are both accepted.
	for _, tok := range []string{es("k1", ok()), hs(tokenSecret, ok())} {
		if code, out := runBin(t, env, "token", "--check", tok); code != 0 || !strings.HasPrefix(out, `{"sub":"alice",`) {
			t.Errorf("valid token: exit %d, output %q", code, out)
		}
	}
}

// jwtNone is a token with alg none, which no gateway accepts.
func jwtNone(t *testing.T, c jwt.MapClaims) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, c).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHelpListsToken(t *testing.T) {
	code, out := runBin(t, nil, "--help")
	if code != 0 || !strings.Contains(out, "\n  token ") {
		t.Fatalf("exit %d, wsgate --help does not list token:\n%s", code, out)
	}
}

// --key signs with a private key (RS256, ES256): the token printed is
// accepted by a gateway holding the public key, and a key the gateway
// does not hold is refused before anything is printed.
func TestTokenSignedWithAPrivateKey(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pub := func(name string, k crypto.PublicKey) string {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "PUBLIC KEY", der)
	}
	ecDER, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	otherDER, err := x509.MarshalPKCS8PrivateKey(other)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, pub, alg string
	}{
		{"RS256, PKCS#1", write("rsa.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)), pub("rsa.pub", &rsaKey.PublicKey), "RS256"},
		{"ES256, SEC 1", write("ec.pem", "EC PRIVATE KEY", ecDER), pub("ec.pub", &ecKey.PublicKey), "ES256"},
	} {
		env := map[string]string{"WSGATE_JWT_PUBLIC_KEY_FILE": tc.pub}
		code, out := runBin(t, envList(env), "token", "--key", tc.key, "--kid", "k1", "--sub", "carol", "--rooms", "lobby")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.name, code, out)
		}
		tok := strings.TrimSpace(out)
		c, err := gatewayVerifier(t, env).Verify(tok, time.Time{})
		if err != nil || c.Subject != "carol" || !reflect.DeepEqual(c.Rooms, []string{"lobby"}) {
			t.Fatalf("%s: the gateway's verifier: %+v, %v", tc.name, c, err)
		}
		h, _, _ := strings.Cut(tok, ".")
		hb, _ := base64.RawURLEncoding.DecodeString(h)
		var hdr struct{ Alg, Kid string }
		if json.Unmarshal(hb, &hdr) != nil || hdr.Alg != tc.alg || hdr.Kid != "k1" {
			t.Fatalf("%s: header %s, want alg %s and kid k1", tc.name, hb, tc.alg)
		}
		// A key the gateway does not hold: exit 2, one line, nothing printed.
		code, out = runBin(t, envList(env), "token", "--key", write("other.pem", "PRIVATE KEY", otherDER), "--sub", "carol")
		if code != 2 || !strings.Contains(out, "the gateway would refuse this token") || strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Fatalf("%s: signed with another key: exit %d, output %q", tc.name, code, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--key", filepath.Join(dir, "missing.pem"), "--sub", "a"}, "--key: open"},
		{[]string{"--key", pub("not-private.pem", &ecKey.PublicKey), "--sub", "a"}, "no PEM private key block"},
		{[]string{"--kid", "k1", "--sub", "a"}, "--kid names the key of --key"},
	} {
		code, out := runBin(t, nil, append([]string{"token"}, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit 2 with %q", tc.args, code, out, tc.want)
		}
	}
}

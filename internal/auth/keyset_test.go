package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

func jwksJSON(t *testing.T, keys ...jose.JSONWebKey) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseKeySetSkipsUnusableKeys(t *testing.T) {
	k := keysOnce()
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	body := jwksJSON(t,
		jose.JSONWebKey{Key: &k.rsa.PublicKey, KeyID: "rsa", Use: "sig", Algorithm: "RS256"},
		jose.JSONWebKey{Key: &k.ec.PublicKey, KeyID: "ec"},
		jose.JSONWebKey{Key: edPub, KeyID: "ed"},
		jose.JSONWebKey{Key: &small.PublicKey, KeyID: "small"},
		jose.JSONWebKey{Key: &p384.PublicKey, KeyID: "p384"},
		jose.JSONWebKey{Key: &k.other.PublicKey, KeyID: "enc", Use: "enc"},
		jose.JSONWebKey{Key: &k.other.PublicKey},
		jose.JSONWebKey{Key: k.ec, KeyID: "private"},
	)
	// An entry of a type nobody knows does not spoil the others.
	var doc map[string][]json.RawMessage
	json.Unmarshal(body, &doc)
	doc["keys"] = append(doc["keys"], json.RawMessage(`{"kty":"XYZ","kid":"odd"}`))
	body, _ = json.Marshal(doc)
	keys, skipped, err := parseKeySet(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || skipped != 6 {
		t.Fatalf("kept %d, skipped %d; want 3 and 6", len(keys), skipped)
	}
	for _, kid := range []string{"rsa", "ec", "ed"} {
		if _, ok := keys[kid]; !ok {
			t.Errorf("key %s missing", kid)
		}
	}
	for _, bad := range []string{`{"keys":[]}`, `{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"hs"}]}`, `[]`, `{`} {
		if _, _, err := parseKeySet([]byte(bad)); err == nil {
			t.Errorf("%s: parsed, want an error", bad)
		}
	}
}

func TestKeySetRefreshAtMostEveryMinInterval(t *testing.T) {
	k := keysOnce()
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Write(jwksJSON(t, jose.JSONWebKey{Key: &k.ec.PublicKey, KeyID: "e1"}))
	}))
	defer srv.Close()
	ks, err := NewKeySet(KeySetConfig{URL: srv.URL, MinInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	v := mustVerifier(t, VerifierConfig{KeySet: ks})
	tok := func(kid string) string {
		tk := jwt.NewWithClaims(jwt.SigningMethodES256, claims(nil))
		tk.Header["kid"] = kid
		s, err := tk.SignedString(k.ec)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := v.Verify(tok("e1"), testNow); !errors.Is(err, ErrKeysUnavailable) {
		t.Fatalf("before any fetch: %v, want ErrKeysUnavailable", err)
	}
	if !ks.Refresh(t.Context()) {
		t.Fatal("first Refresh fetched nothing")
	}
	if _, err := v.Verify(tok("e1"), testNow); err != nil {
		t.Fatalf("e1 after the fetch: %v", err)
	}
	for range 5 {
		if _, err := v.Verify(tok("zz"), testNow); !errors.Is(err, ErrTokenKid) {
			t.Fatalf("unknown kid: %v, want ErrTokenKid", err)
		}
		if ks.Refresh(t.Context()) {
			t.Fatal("Refresh fetched again within MinInterval")
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
	// A token without kid has no key when the set is the only source, and
	// a key is used only for the algorithm of its type.
	if _, err := v.Verify(sign(t, jwt.SigningMethodES256, k.ec, claims(nil)), testNow); !errors.Is(err, ErrTokenKid) {
		t.Fatalf("no kid: %v, want ErrTokenKid", err)
	}
	rs := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(nil))
	rs.Header["kid"] = "e1"
	s, _ := rs.SignedString(k.rsa)
	if _, err := v.Verify(s, testNow); !errors.Is(err, ErrTokenAlgorithm) {
		t.Fatalf("RS256 naming an EC key: %v, want ErrTokenAlgorithm", err)
	}
}

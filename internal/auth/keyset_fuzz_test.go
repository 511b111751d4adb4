package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"testing"

	"github.com/go-jose/go-jose/v4"
)

// FuzzParseKeySet: a JWKS document comes from the network (WSGATE_JWKS_URL).
// Any body is refused with an error or gives at least one key, each with
// a kid and a public key of a kind verify takes (RSA of 2048 bits or
// more, P-256, Ed25519); never a panic.
func FuzzParseKeySet(f *testing.F) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ed, _, _ := ed25519.GenerateKey(rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	for _, ks := range [][]jose.JSONWebKey{
		{{Key: &ec.PublicKey, KeyID: "e1", Use: "sig"}},
		{{Key: ed, KeyID: "d1"}, {Key: &rk.PublicKey, KeyID: "r1", Algorithm: "RS256"}},
		{{Key: ec, KeyID: "private"}},
		{{Key: &small.PublicKey, KeyID: "small"}, {Key: &p384.PublicKey, KeyID: "p384"}, {Key: &ec.PublicKey, KeyID: "ok"}},
	} {
		b, _ := json.Marshal(jose.JSONWebKeySet{Keys: ks})
		f.Add(b)
	}
	for _, s := range []string{`{"keys":[]}`, `{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"hs"}]}`, `[]`, `{`, `{"keys":[{"kty":"EC","crv":"P-256","kid":"x","x":"AA","y":"AA"}]}`,
		`{"keys":[{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"}]}`, `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"o","x":""}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		keys, _, err := parseKeySet(body)
		if err != nil {
			if keys != nil {
				t.Fatalf("an error with keys: %v", err)
			}
			return
		}
		if len(keys) == 0 {
			t.Fatal("no error and no key")
		}
		for kid, k := range keys {
			ok := kid != ""
			switch pk := k.key.(type) {
			case *rsa.PublicKey:
				ok = ok && pk.N.BitLen() >= minRSABits
			case *ecdsa.PublicKey:
				ok = ok && pk.Curve == elliptic.P256()
			case ed25519.PublicKey:
				ok = ok && len(pk) == ed25519.PublicKeySize
			default:
				ok = false
			}
			if !ok {
				t.Fatalf("kept kid %q with key %T", kid, k.key)
			}
		}
	})
}

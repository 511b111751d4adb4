package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Grant is what a client token signed by SignHS256 grants: the claims a
// Verifier reads back as Claims.
type Grant struct {
	Subject   string    // sub, required
	ExpiresAt time.Time // exp, required
	IssuedAt  time.Time // iat; zero = none
	Rooms     []string  // rooms; empty = none
	Pub       []string  // pub; empty = none
	Send      []string  // send; nil = no claim (any event)
	Issuer    string    // iss; empty = none
	Audience  string    // aud; empty = none
}

// SignHS256 returns a client token for g signed with secret, as
// `wsgate token` and the load generator mint them.
func SignHS256(secret []byte, g Grant) (string, error) {
	if len(secret) == 0 {
		return "", errors.New("jwt: no HS256 secret to sign with")
	}
	claims, err := g.claims()
	if err != nil {
		return "", err
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// SignWithKey returns a client token for g signed with a private key:
// RS256 for an RSA key (at least 2048 bits, as the verifier wants), ES256
// for an ECDSA P-256 key, EdDSA for an Ed25519 key (JWKS only). kid, when
// set, names the key in the header (a JWKS chooses by it).
func SignWithKey(key crypto.Signer, kid string, g Grant) (string, error) {
	var m jwt.SigningMethod
	switch k := key.(type) {
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return "", fmt.Errorf("jwt: an RSA key of %d bits: the gateway accepts 2048 or more", k.N.BitLen())
		}
		m = jwt.SigningMethodRS256
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return "", fmt.Errorf("jwt: an ECDSA key on %s: ES256 needs P-256", k.Curve.Params().Name)
		}
		m = jwt.SigningMethodES256
	case ed25519.PrivateKey:
		m = jwt.SigningMethodEdDSA
	default:
		return "", fmt.Errorf("jwt: a %T cannot sign client tokens (RSA, ECDSA P-256 or Ed25519)", key)
	}
	claims, err := g.claims()
	if err != nil {
		return "", err
	}
	t := jwt.NewWithClaims(m, claims)
	if kid != "" {
		t.Header["kid"] = kid
	}
	return t.SignedString(key)
}

// ParsePrivateKeyPEM reads the first private key of a PEM file: PKCS#8
// ("PRIVATE KEY": RSA, ECDSA or Ed25519), PKCS#1 ("RSA PRIVATE KEY") or
// SEC 1 ("EC PRIVATE KEY").
func ParsePrivateKeyPEM(b []byte) (crypto.Signer, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no PEM private key block (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)")
		}
		var key any
		var err error
		switch blk.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(blk.Bytes)
		default:
			continue // EC PARAMETERS, certificates: skipped
		}
		if err != nil {
			return nil, fmt.Errorf("%s block: %v", blk.Type, err)
		}
		s, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s block: a %T cannot sign", blk.Type, key)
		}
		return s, nil
	}
}

// claims are g's JWT claims.
func (g Grant) claims() (jwt.MapClaims, error) {
	if g.Subject == "" || g.ExpiresAt.IsZero() {
		return nil, errors.New("jwt: a token needs a sub and an exp")
	}
	claims := jwt.MapClaims{"sub": g.Subject, "exp": g.ExpiresAt.Unix()}
	if !g.IssuedAt.IsZero() {
		claims["iat"] = g.IssuedAt.Unix()
	}
	if len(g.Rooms) > 0 {
		claims["rooms"] = g.Rooms
	}
	if len(g.Pub) > 0 {
		claims["pub"] = g.Pub
	}
	if g.Send != nil {
		claims["send"] = g.Send
	}
	if g.Issuer != "" {
		claims["iss"] = g.Issuer
	}
	if g.Audience != "" {
		claims["aud"] = g.Audience
	}
	return claims, nil
}

package auth

import (
	"errors"
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
	if g.Subject == "" || g.ExpiresAt.IsZero() {
		return "", errors.New("jwt: a token needs a sub and an exp")
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
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

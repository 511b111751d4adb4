package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/config"
)

// runToken prints a client token signed with the gateway's HS256 secret,
// or with --check says whether the gateway's keys accept one: exit 0 when
// printed or accepted, 1 when refused, 2 for a bad setting.
func runToken(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg := new(config.Token)
	set := config.NewTokenSet(cfg)
	set.SetOutput(stdout)
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "wsgate token: "+format+"\n", a...)
		return 2
	}
	if err := set.Load(args, os.LookupEnv); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return 0
		}
		return fail("%v", err)
	}
	vc, err := admission.VerifierConfig(&cfg.Gateway)
	if err != nil {
		return fail("%v", err)
	}
	if cfg.Check != "" {
		return checkToken(cfg, vc, stdin, stdout, stderr)
	}
	switch {
	case cfg.Sub == "":
		return fail("--sub is required: the user id of the token (or --check TOKEN to verify one)")
	case cfg.KID != "" && cfg.Key == "":
		return fail("--kid names the key of --key: give --key too")
	case len(vc.HMACSecrets) == 0 && cfg.Key == "":
		return fail("WSGATE_JWT_SECRET is not set: tokens are signed with the gateway's HS256 secret, " +
			"or with --key PRIVATE.pem (a public key file or a JWKS URL can only check them)")
	case cfg.TTL <= 0:
		return fail("--ttl (%s) must be positive", cfg.TTL)
	}
	if err := cfg.CheckSecrets(); err != nil {
		return fail("%v", err)
	}
	if err := set.CheckPlaceholders(); err != nil {
		return fail("%v", err)
	}
	now := time.Now()
	g := auth.Grant{
		Subject: cfg.Sub, IssuedAt: now, ExpiresAt: now.Add(cfg.TTL),
		Rooms: cfg.Rooms, Pub: cfg.Pub, Send: nilIfEmpty(cfg.Send),
		Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience,
	}
	var tok string
	if cfg.Key != "" {
		b, err := os.ReadFile(cfg.Key)
		if err != nil {
			return fail("--key: %v", err)
		}
		key, err := auth.ParsePrivateKeyPEM(b)
		if err != nil {
			return fail("--key %s: %v", cfg.Key, err)
		}
		if tok, err = auth.SignWithKey(key, cfg.KID, g); err != nil {
			return fail("--key %s: %v", cfg.Key, err)
		}
		if len(vc.PublicKeyPEM) == 0 && vc.KeySet == nil {
			// Nothing here can check it against the gateway's keys.
			fmt.Fprintln(stderr, "wsgate token: neither WSGATE_JWT_PUBLIC_KEY_FILE nor WSGATE_JWKS_URL is set: the signature is not checked against the gateway's keys")
			fmt.Fprintln(stdout, tok)
			return 0
		}
		vc.HMACSecrets = nil
	} else {
		if tok, err = auth.SignHS256(vc.HMACSecrets[0], g); err != nil {
			return fail("%v", err)
		}
		vc.PublicKeyPEM = nil
	}
	// Only what the gateway accepts is printed: a sub it refuses, a ttl
	// beyond WSGATE_JWT_MAX_LIFETIME or a key it does not know is said
	// here, not at the handshake.
	v, err := auth.NewVerifier(vc)
	if err != nil {
		return fail("%v", err)
	}
	if _, err := v.Verify(tok, now); err != nil {
		return fail("the gateway would refuse this token: %s", explain(tok, err, vc, now))
	}
	fmt.Fprintln(stdout, tok)
	return 0
}

func nilIfEmpty(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	return l
}

// checkToken verifies cfg.Check ("-": read from stdin) with every key the
// gateway would use, the JWKS fetched once.
func checkToken(cfg *config.Token, vc auth.VerifierConfig, stdin io.Reader, stdout, stderr io.Writer) int {
	tok := cfg.Check
	if tok == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, auth.MaxTokenBytes+1))
		if err != nil {
			fmt.Fprintf(stderr, "wsgate token: reading the token from stdin: %v\n", err)
			return 2
		}
		tok = string(b)
	}
	tok = strings.TrimSpace(tok)
	if cfg.JWKSURL != "" {
		ks, err := auth.NewKeySet(auth.KeySetConfig{URL: cfg.JWKSURL})
		if err != nil {
			fmt.Fprintf(stderr, "wsgate token: WSGATE_JWKS_URL: %v\n", err)
			return 2
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		ks.Refresh(ctx)
		cancel()
		vc.KeySet = ks
	}
	v, err := auth.NewVerifier(vc)
	if err != nil {
		fmt.Fprintf(stderr, "wsgate token: %v (set WSGATE_JWT_SECRET, WSGATE_JWT_PUBLIC_KEY_FILE or WSGATE_JWKS_URL as the gateway has them)\n", err)
		return 2
	}
	now := time.Now()
	c, err := v.Verify(tok, now)
	if err != nil {
		fmt.Fprintf(stderr, "refused: %s\n", explain(tok, err, vc, now))
		return 1
	}
	out := struct {
		Sub       string          `json:"sub"`
		Exp       int64           `json:"exp"`
		ExpiresIn string          `json:"expires_in"`
		Rooms     []string        `json:"rooms,omitempty"`
		Pub       []string        `json:"pub,omitempty"`
		Send      []string        `json:"send,omitempty"`
		Info      json.RawMessage `json:"info,omitempty"`
	}{c.Subject, c.ExpiresAt.Unix(), c.ExpiresAt.Sub(now).Round(time.Second).String(), c.Rooms, c.Pub, c.Send, c.Info}
	b, _ := json.Marshal(out)
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}

// explain is the one line saying why err refused tok, with the token's
// own values (read without trusting them) and the setting it failed,
// ending in the stable reason word the gateway logs.
func explain(tok string, err error, vc auth.VerifierConfig, now time.Time) string {
	var ae *auth.Error
	if !errors.As(err, &ae) {
		return err.Error()
	}
	var mc jwt.MapClaims
	t, _, _ := jwt.NewParser().ParseUnverified(tok, &mc)
	header := func(k string) string {
		if t == nil {
			return ""
		}
		s, _ := t.Header[k].(string)
		return s
	}
	date := func(k string) time.Time {
		if f, ok := mc[k].(float64); ok {
			return time.Unix(int64(f), 0)
		}
		return time.Time{}
	}
	ago := func(d time.Duration) string { return d.Round(time.Second).String() }
	msg := ae.Error()
	switch {
	case errors.Is(err, auth.ErrTokenExpired):
		exp := date("exp")
		msg = fmt.Sprintf("token expired at %s, %s ago", exp.UTC().Format(time.RFC3339), ago(now.Sub(exp)))
	case errors.Is(err, auth.ErrTokenNotYetValid):
		msg = fmt.Sprintf("token not valid before %s (nbf)", date("nbf").UTC().Format(time.RFC3339))
	case errors.Is(err, auth.ErrTokenSignature):
		msg = fmt.Sprintf("token signature invalid: not signed with a key of the gateway (alg %s)", header("alg"))
		if header("alg") == "HS256" {
			msg = fmt.Sprintf("token signature invalid: not signed with the secret of WSGATE_JWT_SECRET (%d configured)", len(vc.HMACSecrets))
		}
	case errors.Is(err, auth.ErrTokenAlgorithm):
		msg = fmt.Sprintf("token algorithm %q not allowed by the gateway's keys", header("alg"))
	case errors.Is(err, auth.ErrTokenKid):
		msg = fmt.Sprintf("token kid %q unknown: not in the key set of WSGATE_JWKS_URL", header("kid"))
	case errors.Is(err, auth.ErrTokenSubject):
		msg = "token sub missing or invalid: the user id is required"
	case errors.Is(err, auth.ErrTokenIssuer):
		msg = fmt.Sprintf("token issuer (iss) %s is not WSGATE_JWT_ISSUER %q", claimText(mc["iss"]), vc.Issuer)
	case errors.Is(err, auth.ErrTokenAudience):
		msg = fmt.Sprintf("token audience (aud) %s does not name WSGATE_JWT_AUDIENCE %q", claimText(mc["aud"]), vc.Audience)
	case errors.Is(err, auth.ErrTokenLifetime):
		msg = fmt.Sprintf("token expires in %s, beyond WSGATE_JWT_MAX_LIFETIME %s", ago(date("exp").Sub(now)), vc.MaxLifetime)
	}
	return msg + " (" + ae.Reason() + ")"
}

// claimText shows a claim's JSON value, or says it is absent.
func claimText(v any) string {
	if v == nil {
		return "absent"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

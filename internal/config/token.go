package config

import "time"

// Token is the configuration of wsgate token: the claims of the token to
// print, or the token to check, and the gateway's own settings, read from
// the same flags, environment and file as wsgate gateway reads them, so
// that the token is signed and checked with the keys the nodes use.
type Token struct {
	Gateway
	Sub   string        // the user id (sub claim)
	Rooms []string      // room-name patterns the client may join (rooms claim)
	Pub   []string      // publish-target patterns (pub claim)
	Send  []string      // upstream event patterns (send claim); empty = no claim
	TTL   time.Duration // exp = now + TTL
	Check string        // a token to verify instead of printing one
	Key   string        // PEM private key file to sign with (RS256, ES256, EdDSA) instead of the HS256 secret
	KID   string        // kid header of a token signed with Key
}

// tokenSettings are the gateway settings wsgate token uses; its --help
// lists only these, though it reads every gateway setting (a gateway's
// config file or environment works as it is).
var tokenSettings = map[string]bool{
	"jwt-secret": true, "jwt-secret-file": true, "jwt-public-key-file": true, "jwks-url": true,
	"jwt-issuer": true, "jwt-audience": true, "jwt-leeway": true, "jwt-max-lifetime": true,
}

// NewTokenSet registers the settings of wsgate token with cfg's fields and
// writes the defaults into cfg.
func NewTokenSet(cfg *Token) *Set {
	s := NewSet("token")
	s.Summary = "Prints a client token signed with the gateway's HS256 secret (the first of WSGATE_JWT_SECRET)\n" +
		"or with a private key (--key),\n" +
		"or, with --check, says whether the gateway's keys accept a token and why not (exit status 0 or 1).\n" +
		"It reads the gateway's configuration (flags, environment, --config file); the settings\n" +
		"listed last are the ones it uses."
	s.String(&cfg.Sub, "sub", "", "the user id of the token (sub claim); required unless --check")
	s.List(&cfg.Rooms, "rooms", nil, "room-name patterns the client may join itself (rooms claim)")
	s.List(&cfg.Pub, "pub", nil, "publish-target patterns the client may publish to, e.g. room:lobby (pub claim)")
	s.List(&cfg.Send, "send", nil, "event patterns the client may send upstream (send claim); empty = no claim (any event)")
	s.Duration(&cfg.TTL, "ttl", time.Hour, "lifetime of the token: exp = now + ttl")
	s.String(&cfg.Check, "check", "", "a token to verify with the gateway's keys instead of printing one")
	s.String(&cfg.Key, "key", "", "PEM private key file to sign with instead of the HS256 secret: RS256 (RSA), ES256 (P-256) or EdDSA (Ed25519; JWKS only)")
	s.String(&cfg.KID, "kid", "", "the kid header of a token signed with --key (a JWKS chooses its key by it)")
	own := len(s.settings)
	registerGateway(s, &cfg.Gateway)
	for _, st := range s.settings[own:] {
		st.quiet = !tokenSettings[st.name]
	}
	return s
}

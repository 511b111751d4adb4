package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/wsgate/wsgate/protocol"
)

// MaxTokenBytes is the longest token Verify reads. Longer input is refused
// before any decoding, which bounds the work an unauthenticated client can
// ask for.
const MaxTokenBytes = 8 << 10

// MaxSubjectBytes is the longest user id (sub claim) accepted.
const MaxSubjectBytes = protocol.MaxNameBytes

// maxNumericDate is the last second of the year 9999: a NumericDate claim
// beyond it (1e300, say) is refused as invalid, so no token is ever
// accepted as one that does not expire.
const maxNumericDate = 253402300799

// VerifierConfig says which tokens a Verifier accepts. At least one of
// HMACSecrets, PublicKeyPEM and KeySet is required.
type VerifierConfig struct {
	// HMACSecrets enable HS256 (WSGATE_JWT_SECRET, a comma list): a token
	// signed with any of them is accepted, which lets a secret rotate.
	HMACSecrets [][]byte
	// PublicKeyPEM enables RS256 (RSA key, at least 2048 bits) or ES256
	// (ECDSA P-256 key): a PKIX "PUBLIC KEY", PKCS#1 "RSA PUBLIC KEY" or a
	// "CERTIFICATE" block (WSGATE_JWT_PUBLIC_KEY_FILE's content). It checks
	// tokens that name no kid the KeySet holds.
	PublicKeyPEM []byte
	// KeySet enables RS256, ES256 and EdDSA keys chosen by the token's kid
	// (WSGATE_JWKS_URL).
	KeySet *KeySet
	// Issuer, when set, must equal the iss claim.
	Issuer string
	// Audience, when set, must be the aud claim or one of its entries.
	Audience string
	// Leeway tolerates clock skew on exp and nbf. Zero means none.
	Leeway time.Duration
	// MaxLifetime, when positive, refuses tokens whose exp lies further
	// than this in the future (WSGATE_JWT_MAX_LIFETIME).
	MaxLifetime time.Duration
}

// Claims is what a verified token grants.
type Claims struct {
	// Subject is the user id (sub claim): a valid protocol name (see
	// protocol.ValidName).
	Subject string
	// ExpiresAt is the exp claim; the connection ends with 4401 then.
	ExpiresAt time.Time
	// Rooms are the room-name patterns the client may join itself.
	Rooms []string
	// Pub are the publish-target patterns ("room:lobby", "user:*").
	Pub []string
	// Send are the event patterns the client may send upstream; nil when
	// the token has no send claim (any event).
	Send []string
	// Info is the info claim as raw JSON, nil when absent or null.
	Info json.RawMessage
	// Room is the room claim of a room token (v3, contract 19): a token
	// with it allows a join of that room by its sub.
	Room string
}

// Verifier checks client tokens. It is immutable after NewVerifier and safe
// for concurrent use; its KeySet changes underneath it as it refreshes.
type Verifier struct {
	parser      *jwt.Parser
	opts        []jwt.ParserOption
	methods     []string
	issuer      string
	keyFunc     jwt.Keyfunc
	hmac        any // the secret, or a jwt.VerificationKeySet of them, boxed once
	rsaKey      *rsa.PublicKey
	ecKey       *ecdsa.PublicKey
	keys        *KeySet
	maxLifetime time.Duration
}

// NewVerifier builds a Verifier; the error names the setting at fault.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	var secrets [][]byte
	for _, s := range cfg.HMACSecrets {
		if len(s) > 0 {
			secrets = append(secrets, append([]byte(nil), s...))
		}
	}
	pemSet := len(trimSpace(cfg.PublicKeyPEM)) > 0
	switch {
	case len(secrets) == 0 && !pemSet && cfg.KeySet == nil:
		return nil, errors.New("jwt: a secret, a public key or a JWKS URL is required")
	case cfg.Leeway < 0:
		return nil, errors.New("jwt leeway: must not be negative")
	case cfg.MaxLifetime < 0:
		return nil, errors.New("jwt max lifetime: must not be negative")
	}
	v := &Verifier{keys: cfg.KeySet, maxLifetime: cfg.MaxLifetime, issuer: cfg.Issuer}
	var methods []string
	if len(secrets) > 0 {
		if len(secrets) == 1 {
			v.hmac = secrets[0]
		} else {
			set := jwt.VerificationKeySet{}
			for _, s := range secrets {
				set.Keys = append(set.Keys, s)
			}
			v.hmac = set
		}
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if pemSet {
		for _, s := range secrets {
			if string(trimSpace(s)) == string(trimSpace(cfg.PublicKeyPEM)) {
				// HS256 signed with the public key: the classic algorithm confusion.
				return nil, errors.New("jwt secret: must not be the public key")
			}
		}
		key, err := parsePublicKey(cfg.PublicKeyPEM)
		if err != nil {
			return nil, err
		}
		switch k := key.(type) {
		case *rsa.PublicKey:
			v.rsaKey = k
			methods = append(methods, jwt.SigningMethodRS256.Alg())
		case *ecdsa.PublicKey:
			v.ecKey = k
			methods = append(methods, jwt.SigningMethodES256.Alg())
		}
	}
	if cfg.KeySet != nil {
		methods = append(methods, jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg(), jwt.SigningMethodEdDSA.Alg())
	}
	// The claims are checked by the library's validator: exp required,
	// nbf, iss and aud, each with the leeway.
	v.opts = []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired(), jwt.WithLeeway(cfg.Leeway)}
	if cfg.Issuer != "" {
		v.opts = append(v.opts, jwt.WithIssuer(cfg.Issuer))
	}
	if cfg.Audience != "" {
		v.opts = append(v.opts, jwt.WithAudience(cfg.Audience))
	}
	v.methods = methods
	v.parser = jwt.NewParser(v.opts...)
	v.keyFunc = v.key
	return v, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// key hands the parser the key(s) of the token's algorithm. The parser has
// already refused algorithms outside the configured set; the exact-method
// comparison below is a second lock against algorithm switching, and a key
// from the key set is used only for the algorithm of its type.
func (v *Verifier) key(t *jwt.Token) (any, error) {
	if _, ok := t.Header["crit"]; ok {
		// RFC 7515 4.1.11: no extension is understood here, so every
		// critical one is refused.
		return nil, ErrTokenCrit
	}
	if t.Method == jwt.SigningMethodHS256 {
		if v.hmac != nil {
			return v.hmac, nil
		}
		return nil, ErrTokenAlgorithm
	}
	if kid, ok := t.Header["kid"].(string); ok && v.keys != nil {
		key, err := v.keys.lookup(kid)
		switch {
		case err == nil:
			if !keyFits(t.Method, key) {
				return nil, ErrTokenAlgorithm
			}
			return key.key, nil
		case v.rsaKey == nil && v.ecKey == nil:
			return nil, err
		}
	}
	switch {
	case t.Method == jwt.SigningMethodRS256 && v.rsaKey != nil:
		return v.rsaKey, nil
	case t.Method == jwt.SigningMethodES256 && v.ecKey != nil:
		return v.ecKey, nil
	case v.keys != nil && v.rsaKey == nil && v.ecKey == nil:
		return nil, ErrTokenKid // a key set only: the kid is required
	}
	return nil, ErrTokenAlgorithm
}

// keyFits: RS256 needs an RSA key, ES256 a P-256 key, EdDSA an Ed25519
// key, and a key whose JWK names an alg is used for that one only.
func keyFits(m jwt.SigningMethod, k setKey) bool {
	if k.alg != "" && k.alg != m.Alg() {
		return false
	}
	switch k.key.(type) {
	case *rsa.PublicKey:
		return m == jwt.SigningMethodRS256
	case *ecdsa.PublicKey:
		return m == jwt.SigningMethodES256
	case ed25519.PublicKey:
		return m == jwt.SigningMethodEdDSA
	}
	return false
}

// tokenClaims is the JSON shape of a client token's payload. It decodes
// only what wsgate uses, with plain types; a claim of the wrong JSON type
// fails the decoding with an error naming it. Unlike golang-jwt's
// NumericDate, exp, nbf and iat refuse numbers given as strings.
type tokenClaims struct {
	Sub   string          `json:"sub"`
	Iss   string          `json:"iss"`
	Aud   audience        `json:"aud"`
	Exp   *expClaim       `json:"exp"`
	Nbf   *nbfClaim       `json:"nbf"`
	Iat   *iatClaim       `json:"iat"`
	Rooms []string        `json:"rooms"`
	Pub   []string        `json:"pub"`
	Send  []string        `json:"send"`
	Info  json.RawMessage `json:"info"`
	Room  string          `json:"room"`
}

// The jwt.Claims interface, read by the library's validator.
func (c *tokenClaims) GetExpirationTime() (*jwt.NumericDate, error) { return c.Exp.date(), nil }
func (c *tokenClaims) GetIssuedAt() (*jwt.NumericDate, error)       { return c.Iat.date(), nil }
func (c *tokenClaims) GetNotBefore() (*jwt.NumericDate, error)      { return c.Nbf.date(), nil }
func (c *tokenClaims) GetIssuer() (string, error)                   { return c.Iss, nil }
func (c *tokenClaims) GetSubject() (string, error)                  { return c.Sub, nil }
func (c *tokenClaims) GetAudience() (jwt.ClaimStrings, error)       { return jwt.ClaimStrings(c.Aud), nil }

// audience is the aud claim: one string or a list of strings (RFC 7519 4.1.3).
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return claimErrors["aud"]
		}
		*a = audience{s}
		return nil
	case len(b) > 0 && b[0] == '[':
		var l []string
		if err := json.Unmarshal(b, &l); err != nil {
			return claimErrors["aud"]
		}
		*a = l
		return nil
	}
	return claimErrors["aud"]
}

// numericDate is a NumericDate claim (RFC 7519 2): a JSON number of
// seconds since the epoch, maybe fractional, at most the year 9999. A
// string, even of digits, is refused.
type numericDate struct{ jwt.NumericDate }

func (d *numericDate) parse(b []byte, refusal *Error) error {
	if len(b) == 0 || (b[0] < '0' || b[0] > '9') && b[0] != '-' {
		return refusal
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil || math.IsNaN(f) || math.Abs(f) > maxNumericDate {
		return refusal
	}
	sec, frac := math.Modf(f)
	d.Time = time.Unix(int64(sec), int64(frac*1e9))
	return nil
}

// One type per date claim, so that a refusal names its claim. A null
// claim leaves the pointer nil: absent.
type (
	expClaim struct{ numericDate }
	nbfClaim struct{ numericDate }
	iatClaim struct{ numericDate }
)

func (d *expClaim) UnmarshalJSON(b []byte) error { return d.parse(b, claimErrors["exp"]) }
func (d *nbfClaim) UnmarshalJSON(b []byte) error { return d.parse(b, claimErrors["nbf"]) }
func (d *iatClaim) UnmarshalJSON(b []byte) error { return d.parse(b, claimErrors["iat"]) }

func (d *expClaim) date() *jwt.NumericDate {
	if d == nil {
		return nil
	}
	return &d.NumericDate
}

func (d *nbfClaim) date() *jwt.NumericDate {
	if d == nil {
		return nil
	}
	return &d.NumericDate
}

func (d *iatClaim) date() *jwt.NumericDate {
	if d == nil {
		return nil
	}
	return &d.NumericDate
}

// Verify checks token at time now (the zero time means time.Now()) and
// returns its claims. Every error is an *Error. It never waits: a token
// naming a kid that the key set lacks is refused with ErrTokenKid (and
// KeySet.Refresh may then be worth a retry).
func (v *Verifier) Verify(token string, now time.Time) (*Claims, error) {
	switch {
	case token == "":
		return nil, ErrTokenMissing
	case len(token) > MaxTokenBytes:
		return nil, ErrTokenTooLarge
	}
	p := v.parser
	if !now.IsZero() {
		p = jwt.NewParser(append(v.opts[:len(v.opts):len(v.opts)], jwt.WithTimeFunc(func() time.Time { return now }))...)
	} else {
		now = time.Now()
	}
	var tc tokenClaims
	if t, err := p.ParseWithClaims(token, &tc, v.keyFunc); err != nil {
		return nil, v.parseError(t, &tc, err)
	}
	exp := tc.Exp.Time
	if v.maxLifetime > 0 && exp.Sub(now) > v.maxLifetime {
		return nil, ErrTokenLifetime
	}
	if tc.Sub == "" || len(tc.Sub) > MaxSubjectBytes {
		return nil, ErrTokenSubject
	}
	if protocol.ValidName("sub", tc.Sub) != nil {
		return nil, ErrTokenSubjectName
	}
	info := tc.Info
	if len(info) == 0 || string(info) == "null" {
		info = nil
	}
	return &Claims{Subject: tc.Sub, ExpiresAt: exp, Rooms: tc.Rooms, Pub: tc.Pub, Send: tc.Send, Info: info, Room: tc.Room}, nil
}

// parseError turns the library's error into one of ours. The library
// checks the algorithm and the signature before the claims, so a claim is
// judged only on a token whose signature holds.
func (v *Verifier) parseError(t *jwt.Token, tc *tokenClaims, err error) *Error {
	var (
		typeErr *json.UnmarshalTypeError
		ours    *Error
	)
	if errors.As(err, &typeErr) {
		if e, ok := claimErrors[typeErr.Field]; ok {
			return e
		}
	}
	switch {
	case errors.As(err, &ours): // from the key function or a claim's decoding
		return ours
	case errors.Is(err, jwt.ErrTokenMalformed):
		return ErrTokenMalformed
	case errors.Is(err, jwt.ErrTokenUnverifiable): // alg unknown or missing
		return ErrTokenAlgorithm
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if t == nil || t.Method == nil || !slices.Contains(v.methods, t.Method.Alg()) {
			return ErrTokenAlgorithm
		}
		return ErrTokenSignature
	case !errors.Is(err, jwt.ErrTokenInvalidClaims):
		return ErrTokenMalformed
	// The validator reports every failed check at once: answer the first
	// in the contract's order.
	case tc.Exp == nil:
		return ErrTokenNoExpiry
	case errors.Is(err, jwt.ErrTokenExpired):
		return ErrTokenExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return ErrTokenNotYetValid
	case v.issuer != "" && tc.Iss != v.issuer:
		return ErrTokenIssuer
	}
	return ErrTokenAudience
}

package auth

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MaxTokenBytes is the longest token Verify reads. Longer input is refused
// before any decoding, which bounds the work an unauthenticated client can
// ask for.
const MaxTokenBytes = 8 << 10

// MaxSubjectBytes is the longest user id (sub claim) accepted.
const MaxSubjectBytes = 256

// VerifierConfig says which tokens a Verifier accepts. At least one of
// HMACSecret and PublicKeyPEM is required; with both, HS256 tokens are
// checked against the secret and RS256/ES256 tokens against the key.
type VerifierConfig struct {
	// HMACSecret enables HS256 (WSGATE_JWT_SECRET).
	HMACSecret []byte
	// PublicKeyPEM enables RS256 (RSA key, at least 2048 bits) or ES256
	// (ECDSA P-256 key): a PKIX "PUBLIC KEY", PKCS#1 "RSA PUBLIC KEY" or a
	// "CERTIFICATE" block (WSGATE_JWT_PUBLIC_KEY_FILE's content).
	PublicKeyPEM []byte
	// Issuer, when set, must equal the iss claim.
	Issuer string
	// Audience, when set, must be the aud claim or one of its entries.
	Audience string
	// Leeway tolerates clock skew on exp and nbf. Zero means none.
	Leeway time.Duration
}

// Claims is what a verified token grants.
type Claims struct {
	// Subject is the user id (sub claim): non-empty, at most
	// MaxSubjectBytes, no control characters.
	Subject string
	// ExpiresAt is the exp claim; the connection ends with 4401 then.
	ExpiresAt time.Time
	// Rooms are the room-name patterns the client may join itself.
	Rooms []string
	// Pub are the publish-target patterns ("room:lobby", "user:*").
	Pub []string
	// Send are the event patterns the client may send upstream (v2);
	// nil when the token has no send claim (any event may be sent).
	Send []string
	// Info is the info claim as raw JSON, nil when absent or null.
	Info json.RawMessage
}

// Verifier checks client tokens. It is immutable after NewVerifier and safe
// for concurrent use.
type Verifier struct {
	parser   *jwt.Parser
	keyFunc  jwt.Keyfunc
	hmacKey  any // []byte boxed once, so Verify does not allocate for it
	rsaKey   *rsa.PublicKey
	ecKey    *ecdsa.PublicKey
	issuer   string
	audience string
	leeway   time.Duration
}

// NewVerifier builds a Verifier; the error names the setting at fault.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	if len(cfg.HMACSecret) == 0 && len(bytes.TrimSpace(cfg.PublicKeyPEM)) == 0 {
		return nil, errors.New("jwt: a secret or a public key is required")
	}
	if cfg.Leeway < 0 {
		return nil, errors.New("jwt leeway: must not be negative")
	}
	v := &Verifier{issuer: cfg.Issuer, audience: cfg.Audience, leeway: cfg.Leeway}
	var methods []string
	if len(cfg.HMACSecret) > 0 {
		secret := bytes.Clone(cfg.HMACSecret)
		v.hmacKey = secret
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	if len(bytes.TrimSpace(cfg.PublicKeyPEM)) > 0 {
		if bytes.Equal(bytes.TrimSpace(cfg.HMACSecret), bytes.TrimSpace(cfg.PublicKeyPEM)) {
			// HS256 signed with the public key: the classic algorithm confusion.
			return nil, errors.New("jwt secret: must not be the public key")
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
	// Claims are checked here rather than by the library: Verify takes the
	// time as an argument and answers with its own short errors.
	v.parser = jwt.NewParser(jwt.WithValidMethods(methods), jwt.WithoutClaimsValidation())
	v.keyFunc = v.key
	return v, nil
}

// key hands the parser the key of the token's algorithm. The parser has
// already refused algorithms outside the configured set; the exact-method
// comparison below is a second lock against algorithm switching.
func (v *Verifier) key(t *jwt.Token) (any, error) {
	switch t.Method {
	case jwt.SigningMethodHS256:
		if v.hmacKey != nil {
			return v.hmacKey, nil
		}
	case jwt.SigningMethodRS256:
		if v.rsaKey != nil {
			return v.rsaKey, nil
		}
	case jwt.SigningMethodES256:
		if v.ecKey != nil {
			return v.ecKey, nil
		}
	}
	return nil, ErrTokenAlgorithm
}

// tokenClaims is the JSON shape of a client token's payload. It decodes
// only what wsgate uses, with plain types: json.Number and string decode
// without the extra allocations and nested decoding of jwt.RegisteredClaims.
// A claim of the wrong JSON type fails the decoding with an error naming it.
// Like golang-jwt's NumericDate, exp and nbf also accept a numeric string.
type tokenClaims struct {
	Sub   string          `json:"sub"`
	Iss   string          `json:"iss"`
	Aud   audience        `json:"aud"`
	Exp   json.Number     `json:"exp"`
	Nbf   json.Number     `json:"nbf"`
	Rooms []string        `json:"rooms"`
	Pub   []string        `json:"pub"`
	Send  []string        `json:"send"`
	Info  json.RawMessage `json:"info"`
}

// The jwt.Claims interface; the parser does not call it (claims
// validation is off), Verify reads the fields directly.
func (*tokenClaims) GetExpirationTime() (*jwt.NumericDate, error) { return nil, nil }
func (*tokenClaims) GetIssuedAt() (*jwt.NumericDate, error)       { return nil, nil }
func (*tokenClaims) GetNotBefore() (*jwt.NumericDate, error)      { return nil, nil }
func (*tokenClaims) GetIssuer() (string, error)                   { return "", nil }
func (*tokenClaims) GetSubject() (string, error)                  { return "", nil }
func (*tokenClaims) GetAudience() (jwt.ClaimStrings, error)       { return nil, nil }

// audience is the aud claim: one string or a list of strings (RFC 7519 4.1.3).
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) == 0:
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return claimErrors["aud"]
		}
		*a = audience{s}
		return nil
	case b[0] == '[':
		var l []string
		if err := json.Unmarshal(b, &l); err != nil {
			return claimErrors["aud"]
		}
		*a = l
		return nil
	case string(b) == "null":
		return nil
	}
	return claimErrors["aud"]
}

// numericDate converts a NumericDate claim (seconds since the epoch, maybe
// fractional) to a time. present is false for an absent (or null) claim;
// ok is false for a value that is not a finite number.
func numericDate(n json.Number) (t time.Time, present bool, ok bool) {
	if n == "" {
		return time.Time{}, false, true
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return time.Time{}, true, false
	}
	// Clamp far beyond any real date so the integer conversion is defined.
	const limit = 1e15
	f = max(-limit, min(limit, f))
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true, true
}

// Verify checks token at time now (the zero time means time.Now()) and
// returns its claims. Every error is an *Error.
func (v *Verifier) Verify(token string, now time.Time) (*Claims, error) {
	switch {
	case token == "":
		return nil, ErrTokenMissing
	case len(token) > MaxTokenBytes:
		return nil, ErrTokenTooLarge
	}
	if now.IsZero() {
		now = time.Now()
	}
	var tc tokenClaims
	t, err := v.parser.ParseWithClaims(token, &tc, v.keyFunc)
	if err != nil {
		return nil, v.parseError(t, err)
	}
	return v.checkClaims(&tc, now)
}

// parseError turns the library's error into one of ours.
func (v *Verifier) parseError(t *jwt.Token, err error) *Error {
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
	case errors.As(err, &ours): // from audience.UnmarshalJSON
		return ours
	case errors.Is(err, jwt.ErrTokenMalformed):
		return ErrTokenMalformed
	case errors.Is(err, jwt.ErrTokenUnverifiable): // alg unknown or missing
		return ErrTokenAlgorithm
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if t != nil && t.Method != nil {
			if _, kerr := v.key(t); kerr != nil {
				return ErrTokenAlgorithm
			}
		}
		return ErrTokenSignature
	default:
		return ErrTokenMalformed
	}
}

// checkClaims applies the contract's claim rules to a token whose signature
// is valid.
func (v *Verifier) checkClaims(tc *tokenClaims, now time.Time) (*Claims, error) {
	exp, present, ok := numericDate(tc.Exp)
	switch {
	case !ok:
		return nil, claimErrors["exp"]
	case !present:
		return nil, ErrTokenNoExpiry
	case !now.Before(exp.Add(v.leeway)):
		return nil, ErrTokenExpired
	}
	nbf, present, ok := numericDate(tc.Nbf)
	switch {
	case !ok:
		return nil, claimErrors["nbf"]
	case present && now.Before(nbf.Add(-v.leeway)):
		return nil, ErrTokenNotYetValid
	}
	if v.issuer != "" && tc.Iss != v.issuer {
		return nil, ErrTokenIssuer
	}
	if v.audience != "" && !slices.Contains(tc.Aud, v.audience) {
		return nil, ErrTokenAudience
	}
	if !validSubject(tc.Sub) {
		return nil, ErrTokenSubject
	}
	info := tc.Info
	if len(info) == 0 || string(info) == "null" {
		info = nil
	}
	return &Claims{
		Subject:   tc.Sub,
		ExpiresAt: exp,
		Rooms:     tc.Rooms,
		Pub:       tc.Pub,
		Send:      tc.Send,
		Info:      info,
	}, nil
}

// validSubject: a user id is used in routes, logs and frames, so it must be
// non-empty, short and free of control characters.
func validSubject(s string) bool {
	if s == "" || len(s) > MaxSubjectBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

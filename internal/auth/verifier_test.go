package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testNow is the verification time of every table test.
var testNow = time.Unix(1_800_000_000, 0)

var testSecret = []byte("test-secret-0123456789abcdef")

// testKeys are generated once per test binary (RSA generation is slow).
type testKeyset struct {
	rsa       *rsa.PrivateKey
	rsaPEM    []byte // PKIX
	rsaPKCS1  []byte
	ec        *ecdsa.PrivateKey
	ecPEM     []byte
	ecCertPEM []byte
	other     *ecdsa.PrivateKey // signs "bad signature" tokens
}

var keysOnce = sync.OnceValue(func() *testKeyset {
	k := &testKeyset{}
	var err error
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	if k.other, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	k.rsaPEM = pkixPEM(&k.rsa.PublicKey)
	k.rsaPKCS1 = pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)})
	k.ecPEM = pkixPEM(&k.ec.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "wsgate test"},
		NotBefore:    testNow.Add(-time.Hour),
		NotAfter:     testNow.Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.ec.PublicKey, k.ec)
	if err != nil {
		panic(err)
	}
	k.ecCertPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return k
})

func pkixPEM(pub any) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func sign(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claims returns a valid claim set with overrides applied; a nil value
// deletes the claim.
func claims(over jwt.MapClaims) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "alice", "exp": testNow.Add(time.Hour).Unix()}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// rawToken builds header.payload.signature from JSON texts, unsigned.
func rawToken(header, payload, sig string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload)) + "." + sig
}

func mustVerifier(t testing.TB, cfg VerifierConfig) *Verifier {
	t.Helper()
	v, err := NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerify(t *testing.T) {
	k := keysOnce()
	hs := mustVerifier(t, VerifierConfig{HMACSecrets: [][]byte{testSecret}})
	rs := mustVerifier(t, VerifierConfig{PublicKeyPEM: k.rsaPEM})
	es := mustVerifier(t, VerifierConfig{PublicKeyPEM: k.ecPEM})
	both := mustVerifier(t, VerifierConfig{HMACSecrets: [][]byte{testSecret}, PublicKeyPEM: k.ecPEM})
	strict := mustVerifier(t, VerifierConfig{HMACSecrets: [][]byte{testSecret}, Issuer: "auth.example", Audience: "wsgate"})
	lenient := mustVerifier(t, VerifierConfig{HMACSecrets: [][]byte{testSecret}, Leeway: 30 * time.Second})
	capped := mustVerifier(t, VerifierConfig{HMACSecrets: [][]byte{testSecret}, MaxLifetime: time.Hour})
	rotated := mustVerifier(t, VerifierConfig{HMACSecrets: [][]byte{testSecret, []byte("second-secret-0123456789abcdef01")}})

	hsTok := func(over jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, testSecret, claims(over)) }
	noneTok := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(nil))
	valid := hsTok(nil)
	dot := strings.LastIndexByte(valid, '.')

	tests := []struct {
		name  string
		v     *Verifier
		token string
		want  error // nil: accepted
	}{
		{"hs256 ok", hs, valid, nil},
		{"rs256 ok", rs, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil)), nil},
		{"es256 ok", es, sign(t, jwt.SigningMethodES256, k.ec, claims(nil)), nil},
		{"both: hs256 ok", both, valid, nil},
		{"both: es256 ok", both, sign(t, jwt.SigningMethodES256, k.ec, claims(nil)), nil},
		{"iss and aud string ok", strict, hsTok(jwt.MapClaims{"iss": "auth.example", "aud": "wsgate"}), nil},
		{"aud list ok", strict, hsTok(jwt.MapClaims{"iss": "auth.example", "aud": []string{"other", "wsgate"}}), nil},
		{"fractional exp ok", hs, hsTok(jwt.MapClaims{"exp": float64(testNow.Unix()) + 0.5}), nil},
		{"expired within leeway ok", lenient, hsTok(jwt.MapClaims{"exp": testNow.Add(-10 * time.Second).Unix()}), nil},
		{"nbf within leeway ok", lenient, hsTok(jwt.MapClaims{"nbf": testNow.Add(10 * time.Second).Unix()}), nil},
		{"nbf past ok", hs, hsTok(jwt.MapClaims{"nbf": testNow.Add(-time.Minute).Unix()}), nil},
		{"sub 256 bytes ok", hs, hsTok(jwt.MapClaims{"sub": strings.Repeat("u", 256)}), nil},
		{"null optional claims ok", hs, hsTok(jwt.MapClaims{"rooms": []any{}, "aud": "x", "iss": "y"}), nil},

		{"empty", hs, "", ErrTokenMissing},
		{"huge", hs, strings.Repeat("a", MaxTokenBytes+1), ErrTokenTooLarge},
		{"huge but signed", hs, hsTok(jwt.MapClaims{"info": strings.Repeat("x", MaxTokenBytes)}), ErrTokenTooLarge},
		{"garbage", hs, "not a token", ErrTokenMalformed},
		{"two segments", hs, valid[:dot], ErrTokenMalformed},
		{"four segments", hs, valid + ".x", ErrTokenMalformed},
		{"bad base64 header", hs, "!!!." + valid[strings.IndexByte(valid, '.')+1:], ErrTokenMalformed},
		{"bad base64 signature", hs, valid[:dot+1] + "%%%", ErrTokenMalformed},
		{"header not json", hs, rawToken(`{"alg":`, `{"sub":"a","exp":9999999999}`, "x"), ErrTokenMalformed},
		{"header array", hs, rawToken(`["HS256"]`, `{"sub":"a","exp":9999999999}`, "x"), ErrTokenMalformed},
		{"payload array", hs, rawToken(`{"alg":"HS256"}`, `[1,2]`, "x"), ErrTokenMalformed},
		{"payload not json", hs, rawToken(`{"alg":"HS256"}`, `{"sub":`, "x"), ErrTokenMalformed},

		{"bad signature", hs, valid[:dot+1] + base64.RawURLEncoding.EncodeToString(make([]byte, 32)), ErrTokenSignature},
		{"wrong secret", hs, sign(t, jwt.SigningMethodHS256, []byte("another secret"), claims(nil)), ErrTokenSignature},
		{"es256 other key", es, sign(t, jwt.SigningMethodES256, k.other, claims(nil)), ErrTokenSignature},
		{"tampered payload", hs, rawToken(`{"alg":"HS256","typ":"JWT"}`, `{"sub":"mallory","exp":9999999999}`, valid[dot+1:]), ErrTokenSignature},

		{"alg none", hs, noneTok, ErrTokenAlgorithm},
		{"alg none to rsa", rs, noneTok, ErrTokenAlgorithm},
		{"alg none handmade", hs, rawToken(`{"alg":"none"}`, `{"sub":"a","exp":9999999999}`, ""), ErrTokenAlgorithm},
		{"alg NONE", hs, rawToken(`{"alg":"NONE"}`, `{"sub":"a","exp":9999999999}`, ""), ErrTokenAlgorithm},
		{"alg missing", hs, rawToken(`{"typ":"JWT"}`, `{"sub":"a","exp":9999999999}`, "x"), ErrTokenAlgorithm},
		{"alg not a string", hs, rawToken(`{"alg":256}`, `{"sub":"a","exp":9999999999}`, "x"), ErrTokenAlgorithm},
		{"alg unknown", hs, rawToken(`{"alg":"XX999"}`, `{"sub":"a","exp":9999999999}`, "x"), ErrTokenAlgorithm},
		{"hs512 refused", hs, sign(t, jwt.SigningMethodHS512, testSecret, claims(nil)), ErrTokenAlgorithm},
		{"rs256 to hs-only", hs, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil)), ErrTokenAlgorithm},
		{"es256 to hs-only", hs, sign(t, jwt.SigningMethodES256, k.ec, claims(nil)), ErrTokenAlgorithm},
		{"es256 to rsa", rs, sign(t, jwt.SigningMethodES256, k.ec, claims(nil)), ErrTokenAlgorithm},
		{"rs256 to ecdsa", es, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil)), ErrTokenAlgorithm},
		{"ps256 to rsa", rs, sign(t, jwt.SigningMethodPS256, k.rsa, claims(nil)), ErrTokenAlgorithm},
		{"hs256 with rsa pem as secret", rs, sign(t, jwt.SigningMethodHS256, k.rsaPEM, claims(nil)), ErrTokenAlgorithm},
		{"hs256 with ec pem as secret", es, sign(t, jwt.SigningMethodHS256, k.ecPEM, claims(nil)), ErrTokenAlgorithm},
		{"hs256 with ec pem as secret, both", both, sign(t, jwt.SigningMethodHS256, k.ecPEM, claims(nil)), ErrTokenSignature},
		{"hs256 with ec der as secret, both", both, sign(t, jwt.SigningMethodHS256, pemDER(k.ecPEM), claims(nil)), ErrTokenSignature},

		{"exp missing", hs, hsTok(jwt.MapClaims{"exp": nil}), ErrTokenNoExpiry},
		{"exp null", hs, rawSigned(t, `{"sub":"a","exp":null}`), ErrTokenNoExpiry},
		{"expired", hs, hsTok(jwt.MapClaims{"exp": testNow.Add(-time.Second).Unix()}), ErrTokenExpired},
		{"expires now", hs, hsTok(jwt.MapClaims{"exp": testNow.Unix()}), ErrTokenExpired},
		{"expired beyond leeway", lenient, hsTok(jwt.MapClaims{"exp": testNow.Add(-31 * time.Second).Unix()}), ErrTokenExpired},
		{"exp negative", hs, hsTok(jwt.MapClaims{"exp": -1}), ErrTokenExpired},
		{"exp huge", hs, rawSigned(t, `{"sub":"a","exp":1e400}`), ErrTokenClaims},
		{"exp string", hs, hsTok(jwt.MapClaims{"exp": "tomorrow"}), ErrTokenClaims},
		{"exp bool", hs, hsTok(jwt.MapClaims{"exp": true}), ErrTokenClaims},
		{"nbf future", hs, hsTok(jwt.MapClaims{"nbf": testNow.Add(time.Minute).Unix()}), ErrTokenNotYetValid},
		{"nbf beyond leeway", lenient, hsTok(jwt.MapClaims{"nbf": testNow.Add(31 * time.Second).Unix()}), ErrTokenNotYetValid},
		{"nbf object", hs, hsTok(jwt.MapClaims{"nbf": map[string]any{}}), ErrTokenClaims},

		{"iss missing", strict, hsTok(jwt.MapClaims{"aud": "wsgate"}), ErrTokenIssuer},
		{"iss wrong", strict, hsTok(jwt.MapClaims{"iss": "evil", "aud": "wsgate"}), ErrTokenIssuer},
		{"iss case", strict, hsTok(jwt.MapClaims{"iss": "AUTH.example", "aud": "wsgate"}), ErrTokenIssuer},
		{"iss number", strict, hsTok(jwt.MapClaims{"iss": 1, "aud": "wsgate"}), ErrTokenClaims},
		{"aud missing", strict, hsTok(jwt.MapClaims{"iss": "auth.example"}), ErrTokenAudience},
		{"aud wrong string", strict, hsTok(jwt.MapClaims{"iss": "auth.example", "aud": "other"}), ErrTokenAudience},
		{"aud wrong list", strict, hsTok(jwt.MapClaims{"iss": "auth.example", "aud": []string{"a", "b"}}), ErrTokenAudience},
		{"aud empty list", strict, hsTok(jwt.MapClaims{"iss": "auth.example", "aud": []string{}}), ErrTokenAudience},
		{"aud number", strict, hsTok(jwt.MapClaims{"iss": "auth.example", "aud": 7}), ErrTokenClaims},
		{"aud list of numbers", strict, hsTok(jwt.MapClaims{"iss": "auth.example", "aud": []int{7}}), ErrTokenClaims},

		{"sub missing", hs, hsTok(jwt.MapClaims{"sub": nil}), ErrTokenSubject},
		{"sub empty", hs, hsTok(jwt.MapClaims{"sub": ""}), ErrTokenSubject},
		{"sub too long", hs, hsTok(jwt.MapClaims{"sub": strings.Repeat("u", 257)}), ErrTokenSubject},
		{"sub control char", hs, hsTok(jwt.MapClaims{"sub": "al\nice"}), ErrTokenSubjectName},
		{"sub number", hs, hsTok(jwt.MapClaims{"sub": 42}), ErrTokenClaims},
		{"sub bidi override", hs, hsTok(jwt.MapClaims{"sub": "ad\u202emin"}), ErrTokenSubjectName},
		{"sub isolate", hs, hsTok(jwt.MapClaims{"sub": "ad\u2067min"}), ErrTokenSubjectName},
		{"sub line separator", hs, hsTok(jwt.MapClaims{"sub": "ad\u2028min"}), ErrTokenSubjectName},
		{"sub C1 control", hs, hsTok(jwt.MapClaims{"sub": "ad\u0085min"}), ErrTokenSubjectName},
		{"sub other script", hs, hsTok(jwt.MapClaims{"sub": "Zoë-李"}), nil},

		// Contract section 15.
		{"crit header", hs, rawTokenSigned(t, `{"alg":"HS256","crit":["exp"]}`, `{"sub":"a","exp":1900000000}`, testSecret), ErrTokenCrit},
		{"crit empty", hs, rawTokenSigned(t, `{"alg":"HS256","crit":[]}`, `{"sub":"a","exp":1900000000}`, testSecret), ErrTokenCrit},
		{"exp numeric string", hs, rawSigned(t, `{"sub":"a","exp":"1900000000"}`), ErrTokenClaims},
		{"exp 1e300 string", hs, rawSigned(t, `{"sub":"a","exp":"1e300"}`), ErrTokenClaims},
		{"exp 1e300", hs, rawSigned(t, `{"sub":"a","exp":1e300}`), ErrTokenClaims},
		{"exp after 9999", hs, rawSigned(t, `{"sub":"a","exp":253402300800}`), ErrTokenClaims},
		{"nbf numeric string", hs, rawSigned(t, `{"sub":"a","exp":1900000000,"nbf":"5"}`), ErrTokenClaims},
		{"iat numeric string", hs, rawSigned(t, `{"sub":"a","exp":1900000000,"iat":"5"}`), ErrTokenClaims},
		{"nbf number", hs, rawSigned(t, `{"sub":"a","exp":1900000000,"nbf":5}`), nil},
		{"within max lifetime", capped, hsTok(jwt.MapClaims{"exp": testNow.Add(time.Hour).Unix()}), nil},
		{"beyond max lifetime", capped, hsTok(jwt.MapClaims{"exp": testNow.Add(time.Hour + time.Second).Unix()}), ErrTokenLifetime},
		{"year 9999 beyond max lifetime", capped, rawSigned(t, `{"sub":"a","exp":253402300799}`), ErrTokenLifetime},
		{"second secret", rotated, sign(t, jwt.SigningMethodHS256, []byte("second-secret-0123456789abcdef01"), claims(nil)), nil},
		{"first secret", rotated, hsTok(nil), nil},
		{"no listed secret", rotated, sign(t, jwt.SigningMethodHS256, []byte("third-secret-0123456789abcdef012"), claims(nil)), ErrTokenSignature},

		{"rooms string", hs, hsTok(jwt.MapClaims{"rooms": "lobby"}), ErrTokenClaims},
		{"rooms numbers", hs, hsTok(jwt.MapClaims{"rooms": []int{1, 2}}), ErrTokenClaims},
		{"rooms object", hs, hsTok(jwt.MapClaims{"rooms": map[string]any{"a": 1}}), ErrTokenClaims},
		{"rooms nested", hs, hsTok(jwt.MapClaims{"rooms": []any{[]string{"a"}}}), ErrTokenClaims},
		{"pub bool", hs, hsTok(jwt.MapClaims{"pub": true}), ErrTokenClaims},
		{"pub mixed", hs, hsTok(jwt.MapClaims{"pub": []any{"room:a", 1}}), ErrTokenClaims},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.v.Verify(tc.token, testNow)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if c.Subject == "" || c.ExpiresAt.IsZero() {
					t.Fatalf("claims incomplete: %+v", c)
				}
				return
			}
			if c != nil {
				t.Fatalf("claims %+v, want refusal", c)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var ae *Error
			if !errors.As(err, &ae) || ae.Reason() == "" {
				t.Fatalf("err %T is not an *auth.Error", err)
			}
			if msg := err.Error(); len(msg) > 40 || strings.Contains(msg, string(testSecret)) || !strings.HasPrefix(msg, "token") {
				t.Fatalf("message %q is not short and safe", msg)
			}
		})
	}
}

// rawSigned signs an arbitrary JSON payload with HS256 and testSecret.
func rawSigned(t testing.TB, payload string) string {
	t.Helper()
	enc := base64.RawURLEncoding
	unsigned := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(payload))
	sig, err := jwt.SigningMethodHS256.Sign(unsigned, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return unsigned + "." + enc.EncodeToString(sig)
}

func pemDER(p []byte) []byte {
	b, _ := pem.Decode(p)
	return b.Bytes
}

func TestVerifyClaims(t *testing.T) {
	v := mustVerifier(t, VerifierConfig{HMACSecrets: [][]byte{testSecret}})
	exp := testNow.Add(time.Hour)
	tok := rawSigned(t, `{"sub":"alice","exp":`+itoa(exp.Unix())+`,"rooms":["lobby","team-*"],"pub":["room:lobby","user:*"],"info":{"name":"Alice","tags":[1,2]},"extra":{"ignored":true}}`)
	c, err := v.Verify(tok, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "alice" || !c.ExpiresAt.Equal(exp) {
		t.Errorf("sub/exp = %q %v", c.Subject, c.ExpiresAt)
	}
	if !slices.Equal(c.Rooms, []string{"lobby", "team-*"}) || !slices.Equal(c.Pub, []string{"room:lobby", "user:*"}) {
		t.Errorf("rooms/pub = %q %q", c.Rooms, c.Pub)
	}
	if string(c.Info) != `{"name":"Alice","tags":[1,2]}` {
		t.Errorf("info = %s", c.Info)
	}

	for _, payload := range []string{
		`{"sub":"bob","exp":` + itoa(exp.Unix()) + `}`,
		`{"sub":"bob","exp":` + itoa(exp.Unix()) + `,"info":null,"rooms":null,"pub":null}`,
	} {
		c, err := v.Verify(rawSigned(t, payload), testNow)
		if err != nil {
			t.Fatal(err)
		}
		if c.Info != nil || c.Rooms != nil || c.Pub != nil {
			t.Errorf("%s: absent claims not nil: %+v", payload, c)
		}
	}

	// The zero time means now.
	live := rawSigned(t, `{"sub":"bob","exp":`+itoa(time.Now().Add(time.Minute).Unix())+`}`)
	if _, err := v.Verify(live, time.Time{}); err != nil {
		t.Errorf("zero now: %v", err)
	}
	if _, err := v.Verify(tok, time.Time{}.Add(1)); err != nil {
		t.Errorf("early now: %v", err)
	}
}

func itoa(n int64) string { return big.NewInt(n).String() }

func TestNewVerifier(t *testing.T) {
	k := keysOnce()
	rsaSmall, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPriv, err := x509.MarshalECPrivateKey(k.ec)
	if err != nil {
		t.Fatal(err)
	}
	privPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecPriv})
	comment := []byte("# issued by auth team\n" + string(pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{1}})) + string(k.ecPEM))

	tests := []struct {
		name    string
		cfg     VerifierConfig
		wantErr string // substring; empty: success
		algs    []string
	}{
		{"secret", VerifierConfig{HMACSecrets: [][]byte{testSecret}}, "", []string{"HS256"}},
		{"rsa pkix", VerifierConfig{PublicKeyPEM: k.rsaPEM}, "", []string{"RS256"}},
		{"rsa pkcs1", VerifierConfig{PublicKeyPEM: k.rsaPKCS1}, "", []string{"RS256"}},
		{"ec pkix", VerifierConfig{PublicKeyPEM: k.ecPEM}, "", []string{"ES256"}},
		{"ec certificate", VerifierConfig{PublicKeyPEM: k.ecCertPEM}, "", []string{"ES256"}},
		{"ec after other blocks", VerifierConfig{PublicKeyPEM: comment}, "", []string{"ES256"}},
		{"secret and key", VerifierConfig{HMACSecrets: [][]byte{testSecret}, PublicKeyPEM: k.rsaPEM}, "", []string{"HS256", "RS256"}},

		{"nothing", VerifierConfig{}, "jwt: a secret, a public key or a JWKS URL is required", nil},
		{"blank pem", VerifierConfig{PublicKeyPEM: []byte(" \n")}, "jwt: a secret, a public key or a JWKS URL is required", nil},
		{"not pem", VerifierConfig{PublicKeyPEM: []byte("hello")}, "jwt public key: no PEM block", nil},
		{"no key block", VerifierConfig{PublicKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{1}})}, "jwt public key: no PUBLIC KEY", nil},
		{"broken key", VerifierConfig{PublicKeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1, 2, 3}})}, "jwt public key: cannot parse PUBLIC KEY block", nil},
		{"private key", VerifierConfig{PublicKeyPEM: privPEM}, "jwt public key: the PEM holds a private key", nil},
		{"rsa 1024", VerifierConfig{PublicKeyPEM: pkixPEM(&rsaSmall.PublicKey)}, "jwt public key: RSA key of 1024 bits is too small", nil},
		{"p-384", VerifierConfig{PublicKeyPEM: pkixPEM(&p384.PublicKey)}, "jwt public key: ECDSA curve P-384 not supported", nil},
		{"ed25519", VerifierConfig{PublicKeyPEM: pkixPEM(edPub)}, "jwt public key: unsupported key type", nil},
		{"secret is the key", VerifierConfig{HMACSecrets: [][]byte{k.rsaPEM}, PublicKeyPEM: k.rsaPEM}, "jwt secret: must not be the public key", nil},
		{"negative leeway", VerifierConfig{HMACSecrets: [][]byte{testSecret}, Leeway: -time.Second}, "jwt leeway: must not be negative", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(tc.cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := v.parserMethods(); !slices.Equal(got, tc.algs) {
				t.Fatalf("algorithms = %v, want %v", got, tc.algs)
			}
		})
	}
}

// parserMethods lists the algorithms v accepts, from its keys.
func (v *Verifier) parserMethods() []string {
	var m []string
	for _, s := range []jwt.SigningMethod{jwt.SigningMethodHS256, jwt.SigningMethodRS256, jwt.SigningMethodES256} {
		if _, err := v.key(&jwt.Token{Method: s}); err == nil {
			m = append(m, s.Alg())
		}
	}
	return m
}

// The secret is copied: changing the caller's slice later changes nothing.
func TestVerifierCopiesSecret(t *testing.T) {
	secret := []byte("abcdefgh")
	v := mustVerifier(t, VerifierConfig{HMACSecrets: [][]byte{secret}})
	tok := sign(t, jwt.SigningMethodHS256, []byte("abcdefgh"), claims(nil))
	secret[0] = 'X'
	if _, err := v.Verify(tok, testNow); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyConcurrent(t *testing.T) {
	k := keysOnce()
	v := mustVerifier(t, VerifierConfig{HMACSecrets: [][]byte{testSecret}, PublicKeyPEM: k.ecPEM})
	toks := []string{
		sign(t, jwt.SigningMethodHS256, testSecret, claims(nil)),
		sign(t, jwt.SigningMethodES256, k.ec, claims(nil)),
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := v.Verify(toks[i%2], testNow); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkVerifyHS256(b *testing.B) {
	v := mustVerifier(b, VerifierConfig{HMACSecrets: [][]byte{testSecret}, Issuer: "auth.example", Audience: "wsgate"})
	tok := sign(b, jwt.SigningMethodHS256, testSecret, benchClaims())
	benchVerify(b, v, tok)
}

func BenchmarkVerifyES256(b *testing.B) {
	k := keysOnce()
	v := mustVerifier(b, VerifierConfig{PublicKeyPEM: k.ecPEM, Issuer: "auth.example", Audience: "wsgate"})
	tok := sign(b, jwt.SigningMethodES256, k.ec, benchClaims())
	benchVerify(b, v, tok)
}

func BenchmarkVerifyRS256(b *testing.B) {
	k := keysOnce()
	v := mustVerifier(b, VerifierConfig{PublicKeyPEM: k.rsaPEM, Issuer: "auth.example", Audience: "wsgate"})
	tok := sign(b, jwt.SigningMethodRS256, k.rsa, benchClaims())
	benchVerify(b, v, tok)
}

// benchClaims is a typical client token: a user, a few patterns, some info.
func benchClaims() jwt.MapClaims {
	return jwt.MapClaims{
		"sub":   "user-123456",
		"iss":   "auth.example",
		"aud":   "wsgate",
		"exp":   testNow.Add(time.Hour).Unix(),
		"iat":   testNow.Unix(),
		"rooms": []string{"lobby", "team-*"},
		"pub":   []string{"room:lobby", "user:*"},
		"info":  map[string]any{"name": "Alice", "avatar": "https://example.com/a.png"},
	}
}

func benchVerify(b *testing.B, v *Verifier, tok string) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(tok, testNow); err != nil {
			b.Fatal(err)
		}
	}
}

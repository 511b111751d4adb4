package auth

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/wsgate/wsgate/protocol"
)

// The fuzz keys are fixed so the committed seed corpus (testdata/fuzz/
// FuzzJWT) holds tokens that really verify. They protect nothing.
const fuzzECKeyPEM = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg2p9h3m2gc5khcDId
yFFH6n5FfmLV/FQX2kCrmjU6MDShRANCAATiPymHLbsBhathr87ZnHzn1WDeOi8q
fQs9JTrWVSCN/i/5v7cC/B1Idq/K29E9OLA3CPs58awKK/OYW5KB0wKA
-----END PRIVATE KEY-----
`

var (
	fuzzSecret = []byte("fuzz-secret")
	fuzzNow    = time.Unix(1_800_000_000, 0)
	fuzzExp    = int64(1_900_000_000)
)

func fuzzECKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	block, _ := pem.Decode([]byte(fuzzECKeyPEM))
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		tb.Fatal(err)
	}
	return k.(*ecdsa.PrivateKey)
}

// fuzzVerifiers: the permissive one accepts the corpus' valid tokens; the
// strict one exercises the iss, aud and leeway paths.
// The third has a key set (kid k1: the EC key) and a maximum lifetime.
func fuzzVerifiers(tb testing.TB) []*Verifier {
	ec := fuzzECKey(tb)
	pub := pkixPEM(&ec.PublicKey)
	ks := &KeySet{}
	ks.keys.Store(&map[string]setKey{"k1": {key: &ec.PublicKey}})
	return []*Verifier{
		mustVerifier(tb, VerifierConfig{HMACSecrets: [][]byte{fuzzSecret}, PublicKeyPEM: pub}),
		mustVerifier(tb, VerifierConfig{HMACSecrets: [][]byte{fuzzSecret}, PublicKeyPEM: pub, Issuer: "auth.example", Audience: "wsgate", Leeway: time.Minute}),
		mustVerifier(tb, VerifierConfig{HMACSecrets: [][]byte{[]byte("other"), fuzzSecret}, KeySet: ks, MaxLifetime: 2000 * 24 * time.Hour}),
	}
}

// fuzzSeeds are the interesting shapes of input, named for the corpus.
func fuzzSeeds(tb testing.TB) map[string]string {
	ec := fuzzECKey(tb)
	hs := func(c jwt.MapClaims) string { return sign(tb, jwt.SigningMethodHS256, fuzzSecret, c) }
	base := func(over jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "alice", "exp": fuzzExp}
		for k, v := range over {
			c[k] = v
		}
		return c
	}
	valid := hs(base(jwt.MapClaims{"rooms": []string{"lobby", "team-*"}, "pub": []string{"room:lobby", "user:*"}, "info": map[string]any{"name": "Alice"}}))
	deep := strings.Repeat("[", 1000) + strings.Repeat("]", 1000)
	rawHS := func(header, payload string) string {
		return rawTokenSigned(tb, header, payload, fuzzSecret)
	}
	withKid := func(kid string, c jwt.MapClaims) string {
		tk := jwt.NewWithClaims(jwt.SigningMethodES256, c)
		tk.Header["kid"] = kid
		out, err := tk.SignedString(ec)
		if err != nil {
			tb.Fatal(err)
		}
		return out
	}
	return map[string]string{
		"valid-kid":             withKid("k1", base(nil)),
		"unknown-kid":           withKid("k2", base(nil)),
		"crit":                  rawHS(`{"alg":"HS256","crit":["b64"],"b64":false}`, `{"sub":"a","exp":1900000000}`),
		"exp-1e300-string":      rawHS(`{"alg":"HS256"}`, `{"sub":"a","exp":"1e300"}`),
		"exp-1e300":             rawHS(`{"alg":"HS256"}`, `{"sub":"a","exp":1e300}`),
		"nbf-string":            rawHS(`{"alg":"HS256"}`, `{"sub":"a","exp":1900000000,"nbf":"5"}`),
		"sub-bidi":              rawHS(`{"alg":"HS256"}`, `{"sub":"ad\u202emin","exp":1900000000}`),
		"valid-hs256":           valid,
		"valid-es256":           sign(tb, jwt.SigningMethodES256, ec, base(jwt.MapClaims{"rooms": []string{"*"}})),
		"valid-strict":          hs(base(jwt.MapClaims{"iss": "auth.example", "aud": []string{"x", "wsgate"}, "nbf": fuzzNow.Unix() - 10})),
		"alg-none":              sign(tb, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, base(nil)),
		"alg-confusion":         sign(tb, jwt.SigningMethodHS256, pkixPEM(&ec.PublicKey), base(nil)),
		"truncated":             valid[:len(valid)-7],
		"truncated-header":      valid[:10],
		"bad-base64":            "eyJhbGciOiJIUzI1NiJ9!.e30*.@@@",
		"four-segments":         valid + ".e30",
		"empty-segments":        "..",
		"huge-claims":           hs(base(jwt.MapClaims{"info": strings.Repeat("x", 5000), "rooms": strings.Split(strings.Repeat("r,", 200), ",")})),
		"over-limit":            hs(base(jwt.MapClaims{"info": strings.Repeat("x", MaxTokenBytes)})),
		"nested-info":           rawHS(`{"alg":"HS256"}`, `{"sub":"a","exp":1900000000,"info":`+deep+`}`),
		"nested-rooms":          rawHS(`{"alg":"HS256"}`, `{"sub":"a","exp":1900000000,"rooms":[["a"],{"b":1}]}`),
		"rooms-wrong-type":      hs(base(jwt.MapClaims{"rooms": "lobby"})),
		"exp-huge":              rawHS(`{"alg":"HS256"}`, `{"sub":"a","exp":1e400}`),
		"exp-string":            rawHS(`{"alg":"HS256"}`, `{"sub":"a","exp":"1900000000"}`),
		"exp-fraction":          rawHS(`{"alg":"HS256"}`, `{"sub":"a","exp":1800000000.000000001}`),
		"escaped-header":        rawHS(`{"alg":"HS\u0032\u0035\u0036","typ":"JWT","crit":["x"]}`, `{"sub":"\u0061lice","exp":1900000000,"SUB":"dup"}`),
		"duplicate-keys":        rawHS(`{"alg":"none","alg":"HS256"}`, `{"sub":"a","sub":"b","exp":1,"exp":1900000000}`),
		"aud-object":            rawHS(`{"alg":"HS256"}`, `{"sub":"a","exp":1900000000,"aud":{"x":1},"iss":"auth.example"}`),
		"sub-control":           rawHS(`{"alg":"HS256"}`, `{"sub":"a\u0000b","exp":1900000000}`),
		"invalid-utf8":          rawHS(`{"alg":"HS256"}`, "{\"sub\":\"\xff\xfe\",\"exp\":1900000000}"),
		"header-not-object":     rawHS(`"HS256"`, `{"sub":"a","exp":1900000000}`),
		"payload-not-object":    rawHS(`{"alg":"HS256"}`, `null`),
		"es256-short-signature": strings.TrimRight(sign(tb, jwt.SigningMethodES256, ec, base(nil)), "A")[:len(valid)/2],
	}
}

// rawTokenSigned signs arbitrary header and payload JSON with HS256.
func rawTokenSigned(tb testing.TB, header, payload string, secret []byte) string {
	tb.Helper()
	unsigned := strings.TrimSuffix(rawToken(header, payload, ""), ".")
	sig, err := jwt.SigningMethodHS256.Sign(unsigned, secret)
	if err != nil {
		tb.Fatal(err)
	}
	return unsigned + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func FuzzJWT(f *testing.F) {
	vs := fuzzVerifiers(f)
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		for i, v := range vs {
			c, err := v.Verify(token, fuzzNow)
			c2, err2 := v.Verify(token, fuzzNow)
			if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
				t.Fatalf("verifier %d not deterministic: %v then %v", i, err, err2)
			}
			if err != nil {
				var ae *Error
				if c != nil || !errors.As(err, &ae) || ae.Reason() == "" || len(err.Error()) > 80 {
					t.Fatalf("verifier %d: bad refusal %v (%T), claims %v", i, err, err, c)
				}
				continue
			}
			if c2.Subject != c.Subject || !c2.ExpiresAt.Equal(c.ExpiresAt) {
				t.Fatalf("verifier %d not deterministic: %+v then %+v", i, c, c2)
			}
			if len(token) > MaxTokenBytes || protocol.ValidName("sub", c.Subject) != nil {
				t.Fatalf("verifier %d accepted token %q with sub %q", i, token, c.Subject)
			}
			if !fuzzNow.Before(c.ExpiresAt.Add(time.Minute)) {
				t.Fatalf("verifier %d accepted an expired token (exp %v)", i, c.ExpiresAt)
			}
			if c.Info != nil && !json.Valid(c.Info) {
				t.Fatalf("verifier %d returned invalid info JSON %q", i, c.Info)
			}
			if i == 2 && c.ExpiresAt.Sub(fuzzNow) > 2000*24*time.Hour {
				t.Fatalf("verifier 2 accepted exp %v beyond its max lifetime", c.ExpiresAt)
			}
			// Only the allowed algorithms can produce an accepted token.
			if alg := headerAlg(token); alg != "HS256" && alg != "ES256" {
				t.Fatalf("verifier %d accepted alg %q", i, alg)
			}
		}
	})
}

// headerAlg reads the alg of an accepted token's header, for the check above.
func headerAlg(token string) string {
	h, _, _ := strings.Cut(token, ".")
	b, err := jwt.NewParser().DecodeSegment(h)
	if err != nil {
		return "undecodable"
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(b, &hdr) != nil {
		return "unparsable"
	}
	return hdr.Alg
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzJWT from fuzzSeeds
// when WSGATE_WRITE_FUZZ_CORPUS=1; otherwise it checks that every seed is in
// the committed corpus.
func TestWriteFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzJWT")
	write := os.Getenv("WSGATE_WRITE_FUZZ_CORPUS") == "1"
	for name, seed := range fuzzSeeds(t) {
		path := filepath.Join(dir, name)
		want := fmt.Sprintf("go test fuzz v1\nstring(%q)\n", seed)
		if write {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("seed %s missing from the corpus (run with WSGATE_WRITE_FUZZ_CORPUS=1): %v", name, err)
		}
	}
}

// The committed corpus is meaningful: its valid tokens verify (so the fuzzer
// starts from inputs that reach the claims checks) and its attacks fail.
func TestFuzzCorpusOutcomes(t *testing.T) {
	vs := fuzzVerifiers(t)
	want := map[string][3]error{ // name: outcome with vs[0], vs[1], vs[2]; nil = accepted
		"valid-hs256":      {nil, ErrTokenIssuer, nil},
		"valid-es256":      {nil, ErrTokenIssuer, ErrTokenKid},
		"valid-kid":        {nil, ErrTokenIssuer, nil},
		"unknown-kid":      {nil, ErrTokenIssuer, ErrTokenKid},
		"valid-strict":     {nil, nil, nil},
		"alg-none":         {ErrTokenAlgorithm, ErrTokenAlgorithm, ErrTokenAlgorithm},
		"alg-confusion":    {ErrTokenSignature, ErrTokenSignature, ErrTokenSignature},
		"truncated":        {ErrTokenSignature, ErrTokenSignature, ErrTokenSignature},
		"bad-base64":       {ErrTokenMalformed, ErrTokenMalformed, ErrTokenMalformed},
		"over-limit":       {ErrTokenTooLarge, ErrTokenTooLarge, ErrTokenTooLarge},
		"huge-claims":      {nil, ErrTokenIssuer, nil},
		"nested-info":      {nil, ErrTokenIssuer, nil},
		"rooms-wrong-type": {ErrTokenClaims, ErrTokenClaims, ErrTokenClaims},
		"exp-huge":         {ErrTokenClaims, ErrTokenClaims, ErrTokenClaims},
		"exp-1e300":        {ErrTokenClaims, ErrTokenClaims, ErrTokenClaims},
		"exp-1e300-string": {ErrTokenClaims, ErrTokenClaims, ErrTokenClaims},
		"exp-string":       {ErrTokenClaims, ErrTokenClaims, ErrTokenClaims},
		"nbf-string":       {ErrTokenClaims, ErrTokenClaims, ErrTokenClaims},
		"crit":             {ErrTokenCrit, ErrTokenCrit, ErrTokenCrit},
		"sub-control":      {ErrTokenSubjectName, ErrTokenIssuer, ErrTokenSubjectName},
		"sub-bidi":         {ErrTokenSubjectName, ErrTokenIssuer, ErrTokenSubjectName},
	}
	for name, outcomes := range want {
		b, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzJWT", name))
		if err != nil {
			t.Fatal(err)
		}
		lit, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "go test fuzz v1\nstring(")
		if !ok {
			t.Fatalf("%s: not a go test fuzz v1 string file", name)
		}
		token, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, w := range outcomes {
			_, err := vs[i].Verify(token, fuzzNow)
			if (w == nil) != (err == nil) || (w != nil && !errors.Is(err, w)) {
				t.Errorf("%s with verifier %d: err = %v, want %v", name, i, err, w)
			}
		}
	}
}

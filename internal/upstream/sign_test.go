package upstream

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// signedAttempt is what a receiver saw of one request.
type signedAttempt struct {
	id, ts string
	err    error // VerifySignatureV2's verdict
	v1     bool  // X-Wsgate-Signature (body only) still right
}

// signedReceiver is a real HTTP server that verifies every request as
// docs/upstream.md tells receivers to, and fails the first failFirst
// attempts with 500.
type signedReceiver struct {
	*httptest.Server
	mu        sync.Mutex
	attempts  []signedAttempt
	failFirst int
}

func newSignedReceiver(t *testing.T, secret string, failFirst int) *signedReceiver {
	s := &signedReceiver{failFirst: failFirst}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, err := VerifySignatureV2(secret, r.Header, body, time.Now(), 5*time.Minute)
		s.mu.Lock()
		s.attempts = append(s.attempts, signedAttempt{id: r.Header.Get(RequestIDHeader), ts: r.Header.Get(TimestampHeader),
			err: err, v1: r.Header.Get(SignatureHeader) == Sign(secret, body)})
		fail := len(s.attempts) <= s.failFirst
		s.mu.Unlock()
		if err != nil || fail {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *signedReceiver) seen() []signedAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]signedAttempt(nil), s.attempts...)
}

// A webhook batch carries a valid X-Wsgate-Signature-V2, a timestamp and
// a request id; its retry keeps the id, another batch gets another.
func TestWebhookSignatureV2IdKeptAcrossRetries(t *testing.T) {
	rcv := newSignedReceiver(t, testSecret, 1)
	s := openSink(t, &sinkHarness{url: rcv.URL, opt: Options{Secret: testSecret}})
	writeOK(t, s, testRecords("a", 1, 1)) // first attempt refused, the retry accepted
	writeOK(t, s, testRecords("b", 1, 1))
	got := rcv.seen()
	if len(got) != 3 {
		t.Fatalf("%d attempts, want 3 (a refused, a retried, b)", len(got))
	}
	for i, a := range got {
		if a.err != nil || !a.v1 {
			t.Errorf("attempt %d: V2 check %v, body-only signature right %v", i, a.err, a.v1)
		}
		if _, err := strconv.ParseInt(a.ts, 10, 64); err != nil || len(a.id) != 32 {
			t.Errorf("attempt %d: timestamp %q, request id %q", i, a.ts, a.id)
		}
	}
	if got[0].id != got[1].id {
		t.Errorf("retry of one batch changed its request id: %q then %q", got[0].id, got[1].id)
	}
	if got[2].id == got[0].id {
		t.Errorf("two batches share request id %q", got[0].id)
	}
}

// Without a secret the timestamp and id still come, no signature.
func TestWebhookWithoutSecretSendsNoSignature(t *testing.T) {
	var mu sync.Mutex
	var hdr http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hdr = r.Header.Clone()
		mu.Unlock()
	}))
	defer srv.Close()
	s := openSink(t, &sinkHarness{url: srv.URL})
	writeOK(t, s, testRecords("a", 1, 1))
	mu.Lock()
	defer mu.Unlock()
	if hdr.Get(SignatureHeader) != "" || hdr.Get(SignatureV2Header) != "" || hdr.Get(TimestampHeader) == "" || hdr.Get(RequestIDHeader) == "" {
		t.Fatalf("headers %v", hdr)
	}
}

func TestVerifySignatureV2(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"records":[]}`)
	signed := func(secret string, at time.Time, id string, body []byte) http.Header {
		ts := strconv.FormatInt(at.Unix(), 10)
		return http.Header{TimestampHeader: {ts}, RequestIDHeader: {id}, SignatureV2Header: {SignV2(secret, ts, id, body)}}
	}
	if id, err := VerifySignatureV2("k", signed("k", now, "r1", body), body, now, 5*time.Minute); err != nil || id != "r1" {
		t.Fatalf("a good request: %q %v", id, err)
	}
	bad := map[string]http.Header{
		"wrong secret":       signed("other", now, "r1", body),
		"six minutes old":    signed("k", now.Add(-6*time.Minute), "r1", body),
		"six minutes ahead":  signed("k", now.Add(6*time.Minute), "r1", body),
		"no request id":      signed("k", now, "", body),
		"another body":       signed("k", now, "r1", []byte(`{"records":[1]}`)),
		"no signature":       {TimestampHeader: {strconv.FormatInt(now.Unix(), 10)}, RequestIDHeader: {"r1"}},
		"a non-numeric time": {TimestampHeader: {"soon"}, RequestIDHeader: {"r1"}, SignatureV2Header: {SignV2("k", "soon", "r1", body)}},
	}
	for what, h := range bad {
		if _, err := VerifySignatureV2("k", h, body, now, 5*time.Minute); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	// The id and timestamp are signed: moving them breaks the signature.
	h := signed("k", now, "r1", body)
	h.Set(RequestIDHeader, "r2")
	if _, err := VerifySignatureV2("k", h, body, now, 5*time.Minute); err == nil {
		t.Error("a changed request id: accepted")
	}

	seen := NewSeenIDs(5 * time.Minute)
	if !seen.Add("r1", now) || seen.Add("r1", now.Add(time.Minute)) || !seen.Add("r2", now) {
		t.Fatal("SeenIDs: a repeat within the window must be refused, a new id taken")
	}
	if !seen.Seen("r1", now.Add(4*time.Minute)) || seen.Seen("r3", now) || seen.Seen("r2", now.Add(6*time.Minute)) {
		t.Fatal("SeenIDs.Seen: want true for an id added within the window only")
	}
	if !seen.Add("r1", now.Add(6*time.Minute)) {
		t.Fatal("SeenIDs: an id past the window is forgotten")
	}
}

// docs/upstream.md shows VerifySignatureV2 as it is (the receiver's
// check the tests run), not a copy that could drift.
func TestDocsShowVerifySignatureV2(t *testing.T) {
	src, err := os.ReadFile("sign.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/upstream.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start := strings.Index(s, "func VerifySignatureV2(")
	end := start + strings.Index(s[start:], "\n}\n") + 3
	if start < 0 || !strings.Contains(string(doc), s[start:end]) {
		t.Fatalf("docs/upstream.md does not show VerifySignatureV2 as sign.go has it:\n%s", s[start:end])
	}
}

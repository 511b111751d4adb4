package upstream

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Signed requests (contract sections 13 and 22): every webhook, rpc and
// connect-proxy request of a node goes through PostSigned, the one place
// that signs. A request carries
//
//	X-Wsgate-Timestamp: <Unix seconds of this attempt>
//	X-Wsgate-Request-Id: <unique per request, the same on every retry of one batch>
//	X-Wsgate-Signature-V2: sha256=<hex HMAC-SHA256(secret, timestamp + "." + id + "." + body)>
//	X-Wsgate-Signature: sha256=<hex HMAC-SHA256(secret, body)>   (v2 receivers)
//
// so that a receiver can refuse an old or repeated request
// (VerifySignatureV2, SeenIDs; docs/upstream.md shows a handler).

// Header names of a signed request.
const (
	SignatureHeader   = "X-Wsgate-Signature"    // body only (v2)
	SignatureV2Header = "X-Wsgate-Signature-V2" // timestamp, request id and body
	TimestampHeader   = "X-Wsgate-Timestamp"
	RequestIDHeader   = "X-Wsgate-Request-Id"
)

// Sign returns the X-Wsgate-Signature value of body: "sha256=<hex>".
func Sign(secret string, body []byte) string {
	return "sha256=" + hmacHex(secret, body)
}

// hmacHex is the hex HMAC-SHA256 of body with secret.
func hmacHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// SignV2 returns the X-Wsgate-Signature-V2 value: "sha256=<hex>" of the
// HMAC-SHA256 of timestamp + "." + id + "." + body.
func SignV2(secret, timestamp, id string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	io.WriteString(m, timestamp+"."+id+".")
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// NewRequestID returns a fresh X-Wsgate-Request-Id: 128 random bits, hex.
func NewRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// PostSigned POSTs a JSON body with its timestamp (now), request id and,
// unless secret is empty, both signature headers; it returns the answer's
// status and body (at most 1 MiB). Retries of one request pass the same
// id. An error with a status other than 0 is one reading the answer.
func PostSigned(ctx context.Context, hc *http.Client, url, secret, id string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set(TimestampHeader, ts)
	req.Header.Set(RequestIDHeader, id)
	if secret != "" {
		req.Header.Set(SignatureHeader, Sign(secret, body))
		req.Header.Set(SignatureV2Header, SignV2(secret, ts, id, body))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// VerifySignatureV2 is a receiver's check of a signed request: the
// X-Wsgate-Signature-V2 header must be the HMAC of its timestamp, request
// id and body with secret (compared in constant time), and the timestamp
// within maxAge of now, either way. It returns the request id, for the
// receiver to refuse (or answer without acting on) a repeat within
// maxAge: see SeenIDs. docs/upstream.md shows this function.
func VerifySignatureV2(secret string, h http.Header, body []byte, now time.Time, maxAge time.Duration) (string, error) {
	ts, id := h.Get("X-Wsgate-Timestamp"), h.Get("X-Wsgate-Request-Id")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || id == "" {
		return "", errors.New("missing X-Wsgate-Timestamp or X-Wsgate-Request-Id")
	}
	if age := now.Sub(time.Unix(sec, 0)); age > maxAge || age < -maxAge {
		return "", errors.New("X-Wsgate-Timestamp too old or in the future")
	}
	m := hmac.New(sha256.New, []byte(secret))
	io.WriteString(m, ts+"."+id+".")
	m.Write(body)
	want := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if !hmac.Equal([]byte(h.Get("X-Wsgate-Signature-V2")), []byte(want)) {
		return "", errors.New("bad X-Wsgate-Signature-V2")
	}
	return id, nil
}

// SeenIDs remembers request ids for a window (a receiver's replay check:
// the window should be at least VerifySignatureV2's maxAge, so that a
// request is either too old or remembered). Safe for concurrent use.
type SeenIDs struct {
	window time.Duration
	mu     sync.Mutex
	ids    map[string]time.Time
}

// NewSeenIDs returns an empty set remembering ids for window.
func NewSeenIDs(window time.Duration) *SeenIDs {
	return &SeenIDs{window: window, ids: make(map[string]time.Time)}
}

// Seen reports whether id was added within the window before now.
func (s *SeenIDs) Seen(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.ids[id]
	return ok && now.Sub(t) <= s.window
}

// Add records id at now; false when it was already recorded within the
// window (a retry whose answer was lost, or a replay). Ids older than the
// window are forgotten.
func (s *SeenIDs) Add(id string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.ids {
		if now.Sub(t) > s.window {
			delete(s.ids, k)
		}
	}
	if _, dup := s.ids[id]; dup {
		return false
	}
	s.ids[id] = now
	return true
}

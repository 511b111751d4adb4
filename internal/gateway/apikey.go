package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/auth"
)

// Failed API-key attempts per client IP: keyFailBurst at once, then one
// more every keyFailRefill. Past that, every API request from the IP
// (with a right key or not) is answered 429 until a failure has been
// forgiven, so that guessing costs time and a right guess is not told
// apart from a wrong one meanwhile. Other IPs are not affected.
const (
	keyFailBurst  = 10
	keyFailRefill = 6 * time.Second
)

func newKeyFailLimiter() *auth.RateLimiter {
	return auth.NewBurstLimiter(float64(time.Second)/float64(keyFailRefill), keyFailBurst)
}

// apiHandler checks the API key, bounds the request to 5 s and turns
// errors into the contract's error bodies.
func (n *Node) apiHandler(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !n.admitKey(w, r) {
			return
		}
		if ae := n.checkOpenAPI(r); ae != nil {
			writeError(w, ae.Status, ae.Code, ae.Message)
			return
		}
		// 4.5 s of work, so that the answer (503 at worst) leaves within
		// the contract's 5 s.
		ctx, cancel := context.WithTimeout(r.Context(), 4500*time.Millisecond)
		defer cancel()
		err := h(w, r.WithContext(ctx))
		if err == nil {
			return
		}
		var ae *APIError
		if !errors.As(err, &ae) {
			ae = unavailable("request", err)
		}
		if ae.Status >= 500 {
			n.log.Warn("API request failed", "method", r.Method, "path", r.URL.Path, "err", ae.Message)
		}
		if ae.Status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, ae.Status, ae.Code, ae.Message)
	}
}

// admitKey answers 429 for a client IP with too many failed key attempts
// and 401 for a missing or wrong key (counting the failure); true lets
// the request through.
func (n *Node) admitKey(w http.ResponseWriter, r *http.Request) bool {
	ae, wait := n.keyRefusal(r)
	if ae == nil {
		return true
	}
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(admission.RetrySecs(wait)))
	}
	writeError(w, ae.Status, ae.Code, ae.Message)
	return false
}

// keyRefusal is the key check of both API transports (JSON and gRPC):
// nil lets the request through; a 429 comes with the time to wait.
func (n *Node) keyRefusal(r *http.Request) (*APIError, time.Duration) {
	if n.cfg.APIKey == "" && n.cfg.Dev {
		return nil, 0
	}
	req := admission.FromHTTP(r)
	ip := n.gate.ClientIP(&req)
	now := time.Now()
	if refused, wait := n.keyFails.Refused(ip, now); refused {
		n.metrics.APIKeyFailures.WithLabelValues("throttled").Inc()
		return &APIError{Status: http.StatusTooManyRequests, Code: "rate_limited", Message: "too many failed API key attempts from this address"}, wait
	}
	if err := n.checkKey(r); err != nil {
		if n.cfg.APIKey != "" {
			n.keyFails.Allow(ip, now)
			n.metrics.APIKeyFailures.WithLabelValues("refused").Inc()
		}
		return &APIError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: err.Error()}, 0
	}
	return nil, 0
}

func (n *Node) checkKey(r *http.Request) error {
	if n.cfg.APIKey == "" {
		if n.cfg.Dev {
			return nil
		}
		return errors.New("the server API is disabled: WSGATE_API_KEY is not set")
	}
	a := r.Header.Get("Authorization")
	if len(a) < 7 || !strings.EqualFold(a[:7], "bearer ") {
		return errors.New("missing Authorization: Bearer <api key>")
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(a[7:])), []byte(n.cfg.APIKey)) != 1 {
		return errors.New("invalid API key")
	}
	return nil
}

// checkOpenAPI guards the API that wsgate dev leaves open (no key): a
// web page the developer visits must not drive it. A request from a
// foreign Origin is refused, and so is a body that is not JSON (a
// cross-site form or text/plain POST, which needs no preflight).
func (n *Node) checkOpenAPI(r *http.Request) *APIError {
	if ae := n.checkOrigin(r); ae != nil || n.cfg.APIKey != "" || !n.cfg.Dev {
		return ae
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			return &APIError{Status: http.StatusUnsupportedMediaType, Code: "bad_request", Message: "the dev API takes Content-Type: application/json bodies only"}
		}
	}
	return nil
}

// checkOrigin refuses a request of the open dev API whose Host is not
// the node's own (devhost.go) or that comes from a foreign Origin.
func (n *Node) checkOrigin(r *http.Request) *APIError {
	if n.cfg.APIKey != "" || !n.cfg.Dev {
		return nil
	}
	if ae := n.checkDevHost(r); ae != nil {
		return ae
	}
	if o := r.Header.Values("Origin"); len(o) > 1 || !sameHostOnly.AllowOrigin(r.Header.Get("Origin"), r.Host) {
		return &APIError{Status: http.StatusForbidden, Code: "origin_forbidden", Message: "the dev API answers its own pages only"}
	}
	return nil
}

// sameHostOnly is the Origin policy of the open dev API.
var sameHostOnly = auth.NewOriginPolicy(nil)

package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/auth"
)

// Failed API-key attempts per client IP: KeyFailBurst at once, then one
// more every keyFailRefill. Past that, every API request from the IP
// (with a right key or not) is answered 429 until a failure has been
// forgiven, so that guessing costs time and a right guess is not told
// apart from a wrong one meanwhile. Other IPs are not affected.
const (
	KeyFailBurst  = 10
	keyFailRefill = 6 * time.Second
)

// Guard decides which requests reach the API: the API key (contract §5),
// the throttle of failed keys per client IP, and the open dev API's
// checks (wsgate dev without WSGATE_API_KEY: the node's own pages only).
type Guard struct {
	key      string
	dev      bool
	clientIP func(*http.Request) string
	ownHost  func(*http.Request) *Error
	failures *prometheus.CounterVec
	fails    *auth.RateLimiter
}

// GuardOptions configure a Guard.
type GuardOptions struct {
	// Key is WSGATE_API_KEY; empty with Dev leaves the API open (dev
	// mode), empty without Dev disables it.
	Key string
	Dev bool
	// ClientIP is the request's client (behind trusted proxies).
	ClientIP func(*http.Request) string
	// OwnHost refuses a request of the open dev API whose Host is not
	// the node's own (nil: no such check).
	OwnHost func(*http.Request) *Error
	// Failures counts refused keys by result ("refused", "throttled").
	Failures *prometheus.CounterVec
}

// NewGuard is a Guard with o.
func NewGuard(o GuardOptions) *Guard {
	return &Guard{key: o.Key, dev: o.Dev, clientIP: o.ClientIP, ownHost: o.OwnHost, failures: o.Failures,
		fails: auth.NewBurstLimiter(float64(time.Second)/float64(keyFailRefill), KeyFailBurst)}
}

// guarded checks the API key, bounds the request to 5 s and turns errors
// into the contract's error bodies.
func (h *Handler) guarded(f func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	g := h.guard
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !g.admitKey(w, r) {
			return
		}
		if ae := g.checkOpenAPI(r); ae != nil {
			WriteError(w, ae.Status, ae.Code, ae.Message)
			return
		}
		// 4.5 s of work, so that the answer (503 at worst) leaves within
		// the contract's 5 s.
		ctx, cancel := context.WithTimeout(r.Context(), 4500*time.Millisecond)
		defer cancel()
		err := f(w, r.WithContext(ctx))
		if err == nil {
			return
		}
		var ae *Error
		if !errors.As(err, &ae) {
			ae = Unavailable("request", err)
		}
		if ae.Status >= 500 {
			h.log.Warn("API request failed", "method", r.Method, "path", r.URL.Path, "err", ae.Message)
		}
		if ae.Status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		WriteError(w, ae.Status, ae.Code, ae.Message)
	}
}

// admitKey answers 429 for a client IP with too many failed key attempts
// and 401 for a missing or wrong key (counting the failure); true lets
// the request through.
func (g *Guard) admitKey(w http.ResponseWriter, r *http.Request) bool {
	ae, wait := g.keyRefusal(r)
	if ae == nil {
		return true
	}
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(admission.RetrySecs(wait)))
	}
	WriteError(w, ae.Status, ae.Code, ae.Message)
	return false
}

// keyRefusal is the key check of both API transports (JSON and gRPC):
// nil lets the request through; a 429 comes with the time to wait.
func (g *Guard) keyRefusal(r *http.Request) (*Error, time.Duration) {
	if g.key == "" && g.dev {
		return nil, 0
	}
	ip := g.clientIP(r)
	now := time.Now()
	if refused, wait := g.fails.Refused(ip, now); refused {
		g.failures.WithLabelValues("throttled").Inc()
		return &Error{Status: http.StatusTooManyRequests, Code: "rate_limited", Message: "too many failed API key attempts from this address"}, wait
	}
	if err := g.checkKey(r); err != nil {
		if g.key != "" {
			g.fails.Allow(ip, now)
			g.failures.WithLabelValues("refused").Inc()
		}
		return &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: err.Error()}, 0
	}
	return nil, 0
}

func (g *Guard) checkKey(r *http.Request) error {
	if g.key == "" {
		if g.dev {
			return nil
		}
		return errors.New("the server API is disabled: WSGATE_API_KEY is not set")
	}
	a := r.Header.Get("Authorization")
	if len(a) < 7 || !strings.EqualFold(a[:7], "bearer ") {
		return errors.New("missing Authorization: Bearer <api key>")
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(a[7:])), []byte(g.key)) != 1 {
		return errors.New("invalid API key")
	}
	return nil
}

// checkOpenAPI guards the API that wsgate dev leaves open (no key): a
// web page the developer visits must not drive it. A request from a
// foreign Origin is refused, and so is a body that is not JSON (a
// cross-site form or text/plain POST, which needs no preflight).
func (g *Guard) checkOpenAPI(r *http.Request) *Error {
	if ae := g.checkOrigin(r); ae != nil || g.key != "" || !g.dev {
		return ae
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			return &Error{Status: http.StatusUnsupportedMediaType, Code: "bad_request", Message: "the dev API takes Content-Type: application/json bodies only"}
		}
	}
	return nil
}

// checkOrigin refuses a request of the open dev API whose Host is not
// the node's own or that comes from a foreign Origin.
func (g *Guard) checkOrigin(r *http.Request) *Error {
	if g.key != "" || !g.dev {
		return nil
	}
	if g.ownHost != nil {
		if ae := g.ownHost(r); ae != nil {
			return ae
		}
	}
	if o := r.Header.Values("Origin"); len(o) > 1 || !sameHostOnly.AllowOrigin(r.Header.Get("Origin"), r.Host) {
		return &Error{Status: http.StatusForbidden, Code: "origin_forbidden", Message: "the dev API answers its own pages only"}
	}
	return nil
}

// sameHostOnly is the Origin policy of the open dev API.
var sameHostOnly = auth.NewOriginPolicy(nil)

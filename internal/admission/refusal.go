package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/protocol"
)

// Refusal is a handshake answered before the upgrade (contract §3).
type Refusal struct {
	Status     int
	Code       string // the error code in the body
	Reason     string // the metric label
	Msg        string
	RetryAfter time.Duration
	AwaitKeys  bool // the token names a kid the key set lacks: run Credentials again with wait
}

// Refuse is a refusal whose metric label is its error code.
func Refuse(status int, code, msg string) *Refusal {
	return &Refusal{Status: status, Code: code, Reason: code, Msg: msg}
}

// RetryAfterSecs is the Retry-After value of a 429 or 503 refusal (0: none).
func (f *Refusal) RetryAfterSecs() int {
	if f.Status != http.StatusTooManyRequests && f.Status != http.StatusServiceUnavailable {
		return 0
	}
	return RetrySecs(f.RetryAfter)
}

// RetrySecs is a wait as a Retry-After value: whole seconds, rounded up,
// at least 1.
func RetrySecs(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// Body is the refusal's JSON error body.
func (f *Refusal) Body() []byte { return ErrorJSON(f.Code, f.Msg) }

// ErrorJSON is the body of every refused request (contract §3, §5).
func ErrorJSON(code, msg string) []byte {
	b, _ := json.Marshal(map[string]protocol.ErrorBody{"error": {Code: code, Message: msg}})
	return append(b, '\n')
}

// ShuttingDown refuses a handshake that comes once Shutdown has started.
func ShuttingDown() *Refusal {
	f := Refuse(http.StatusServiceUnavailable, "unavailable", "node shutting down")
	f.RetryAfter = time.Second
	return f
}

// AuthRefusal answers a failed authentication: 400 for a user id with
// characters no name may hold (the request is bad, not the credentials),
// 503 while the key set has never been fetched, else 401.
func AuthRefusal(err error) *Refusal {
	var bad errBadName
	switch {
	case errors.As(err, &bad) || errors.Is(err, auth.ErrTokenSubjectName):
		return Refuse(http.StatusBadRequest, "bad_request", err.Error())
	case errors.Is(err, auth.ErrKeysUnavailable):
		f := Refuse(http.StatusServiceUnavailable, "unavailable", err.Error())
		f.RetryAfter = 5 * time.Second
		return f
	}
	return Refuse(http.StatusUnauthorized, "unauthorized", err.Error())
}

// errBadName is a user id (?user= in insecure mode) that is not a valid
// name.
type errBadName string

func (e errBadName) Error() string { return string(e) }

// errUnauthorized is a handshake without acceptable credentials.
type errUnauthorized string

func (e errUnauthorized) Error() string { return string(e) }

// TooLarge refuses a request whose headers exceed 16 KiB.
func TooLarge() *Refusal {
	return Refuse(http.StatusRequestHeaderFieldsTooLarge, "bad_request", "request headers larger than 16 KiB")
}

// Response is the whole HTTP answer of a refusal.
func (f *Refusal) Response() []byte {
	body := f.Body()
	b := make([]byte, 0, 160+len(body))
	b = fmt.Appendf(b, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n",
		f.Status, http.StatusText(f.Status), len(body))
	if s := f.RetryAfterSecs(); s > 0 {
		b = fmt.Appendf(b, "Retry-After: %d\r\n", s)
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}

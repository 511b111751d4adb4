package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

var (
	// ErrClosed is returned by calls on a client after Close.
	ErrClosed = errors.New("client: closed")
	// ErrRunning is returned by Run while another Run is active.
	ErrRunning = errors.New("client: Run is already running")
	// ErrConnectionLost fails a request whose connection ended before its
	// answer came; the request may or may not have taken effect.
	ErrConnectionLost = errors.New("client: connection lost before the reply")
)

// CloseError is a connection closed by the server with a close frame. Run
// returns it for the codes whose action is "stop" (1000, 1008, 1009, 4003,
// 4009).
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string {
	s := "wsgate: connection closed with " + strconv.Itoa(e.Code)
	if t := protocol.CloseReason(e.Code); t != "" {
		s += " (" + t + ")"
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// HandshakeError is a handshake refused with an HTTP status (contract §3):
// 400, 401 and 403 stop Run; 429, 503 and other 5xx are retried after
// RetryAfter plus the backoff.
type HandshakeError struct {
	Status     int
	Code       string        // the JSON body's error.code, if any
	Message    string        // the JSON body's error.message, or the start of a non-JSON body
	RetryAfter time.Duration // the Retry-After header, 0 if absent
}

func (e *HandshakeError) Error() string { return "wsgate: handshake refused: " + e.detail() }

func (e *HandshakeError) detail() string {
	s := fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		s += ": " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Retryable says whether dialing again may succeed: 408, 429 and 5xx.
func (e *HandshakeError) Retryable() bool {
	return e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// AllocatorError is a refusal of the allocator (503 when no node is
// available); retried like a HandshakeError.
type AllocatorError struct {
	HandshakeError
}

func (e *AllocatorError) Error() string {
	return "wsgate: allocator refused: " + e.detail()
}

// ReplyError is a request refused by the server: a reply with ok=false, or
// an error frame answering it.
type ReplyError struct {
	Code    string
	Message string
}

func (e *ReplyError) Error() string {
	return "wsgate: refused: " + e.Code + ": " + e.Message
}

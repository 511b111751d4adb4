package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/protocol"
)

// Error is an error with its HTTP status and contract code.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

func BadRequest(format string, a ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "bad_request", Message: fmt.Sprintf(format, a...)}
}

// Unavailable converts a backend failure into the API's 503.
func Unavailable(op string, err error) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: fmt.Sprintf("cluster backend unavailable (%s): %v", op, err)}
}

func ErrorBody(err error) protocol.ErrorBody {
	var ae *Error
	if errors.As(err, &ae) {
		return protocol.ErrorBody{Code: ae.Code, Message: ae.Message}
	}
	return protocol.ErrorBody{Code: "unavailable", Message: err.Error()}
}

func WriteError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(admission.ErrorJSON(code, msg))
}

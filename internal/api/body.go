package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

const MaxBodyBytes = 1 << 20

func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// ReadBody reads a JSON body of at most 1 MiB.
func ReadBody(r *http.Request) ([]byte, error) {
	b, err := ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1), r.ContentLength)
	if err != nil {
		return nil, BadRequest("cannot read the body: %v", err)
	}
	if len(b) > MaxBodyBytes {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: "body larger than 1 MiB"}
	}
	return b, nil
}

// ReadAll is io.ReadAll with a first buffer sized for the announced
// length (plus one byte, to see the end without growing).
func ReadAll(rd io.Reader, length int64) ([]byte, error) {
	size := 512
	if length > 0 {
		size = int(min(length, MaxBodyBytes)) + 1
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// QueryInt reads an integer query parameter in lo..hi, def when absent.
func QueryInt(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, BadRequest("%s must be an integer from %d to %d, got %s", name, lo, hi, strconv.Quote(s))
	}
	return v, nil
}

package gateway

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
)

// The strict checks of an upgrade request (contract §3) that gobwas'
// upgrader and net/http leave out: both paths judge an upgradeHead.

// upgradeHead is what the checks need of an upgrade request's headers.
type upgradeHead struct {
	hosts, origins, keys int
	key                  string
	body                 bool // a Content-Length other than 0, or a Transfer-Encoding
}

var (
	errBareLF     = errors.New("a line of the request ends without CR")
	errHeaderLine = errors.New("malformed header line")
)

// problem returns what makes the request bad, or "".
func (u upgradeHead) problem() string {
	switch {
	case u.hosts > 1:
		return "more than one Host header"
	case u.origins > 1:
		return "more than one Origin header"
	case u.keys > 1:
		return "more than one Sec-WebSocket-Key header"
	case u.body:
		return "an upgrade request has no body (Content-Length or Transfer-Encoding)"
	}
	if k, err := base64.StdEncoding.DecodeString(u.key); u.keys == 1 && (err != nil || len(k) != 16) {
		return "Sec-WebSocket-Key does not decode to 16 bytes"
	}
	return ""
}

// headOf reads an upgradeHead from a request parsed by net/http (which
// has refused a second Host itself).
func headOf(r *http.Request) upgradeHead {
	keys := r.Header.Values("Sec-WebSocket-Key")
	u := upgradeHead{
		hosts: 1, origins: len(r.Header.Values("Origin")), keys: len(keys),
		body: r.ContentLength != 0 || len(r.TransferEncoding) > 0,
	}
	if len(keys) > 0 {
		u.key = keys[0]
	}
	return u
}

// scanHead reads an upgradeHead from a raw request head (request line,
// headers, the blank line).
func scanHead(req []byte) (upgradeHead, error) {
	var u upgradeHead
	if bareLF(req) >= 0 {
		return u, errBareLF
	}
	_, rest, _ := bytes.Cut(req, []byte("\r\n")) // the request line
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok || len(k) == 0 || bytes.ContainsAny(k, " \t") {
			return u, errHeaderLine
		}
		v = bytes.TrimSpace(v)
		switch {
		case strings.EqualFold(string(k), "Host"):
			u.hosts++
		case strings.EqualFold(string(k), "Origin"):
			u.origins++
		case strings.EqualFold(string(k), "Sec-WebSocket-Key"):
			u.keys++
			u.key = string(v)
		case strings.EqualFold(string(k), "Content-Length"):
			u.body = u.body || string(v) != "0"
		case strings.EqualFold(string(k), "Transfer-Encoding"):
			u.body = true
		}
	}
	return u, nil
}

// bareLF returns the index of the first LF not preceded by CR, or -1.
func bareLF(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		if i+j == 0 || b[i+j-1] != '\r' {
			return i + j
		}
		i += j + 1
	}
}

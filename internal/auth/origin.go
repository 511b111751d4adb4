package auth

import (
	"net/http"
	"strconv"
	"strings"
)

// OriginPolicy decides whether a handshake's Origin header is acceptable
// (WSGATE_ALLOWED_ORIGINS). It is immutable and safe for concurrent use.
//
//   - A request without an Origin header (a non-browser client) is allowed.
//   - "*" in the list allows any Origin.
//   - An empty list allows only same-host requests: the Origin's host and
//     port must equal those of the request's Host header, compared without
//     regard to case, the port defaulting to 80 for http/ws and 443 for
//     https/wss. A Host without a port takes the Origin scheme's default,
//     because behind a TLS-terminating proxy the gateway cannot know the
//     scheme the browser used. Forwarded headers are not trusted.
//   - Otherwise the Origin must equal one listed value (scheme://host[:port])
//     without regard to case; a trailing slash on either side is ignored.
//     Ports are compared as written, as browsers omit default ports.
type OriginPolicy struct {
	any     bool
	allowed []string
}

// NewOriginPolicy builds the policy from the list of allowed origins.
// Entries are trimmed of spaces and of a trailing slash; empty entries are
// ignored, so a list of only empty entries means same-host.
func NewOriginPolicy(allowed []string) *OriginPolicy {
	p := &OriginPolicy{}
	for _, a := range allowed {
		a = strings.TrimSuffix(strings.TrimSpace(a), "/")
		switch a {
		case "":
		case "*":
			p.any = true
		default:
			p.allowed = append(p.allowed, strings.ToLower(a))
		}
	}
	return p
}

// Allow reports whether the request's Origin header is acceptable.
func (p *OriginPolicy) Allow(r *http.Request) bool {
	return p.AllowOrigin(r.Header.Get("Origin"), r.Host)
}

// AllowOrigin is Allow for a handshake read without net/http: origin is
// the Origin header's value ("" when absent) and host the Host header's.
func (p *OriginPolicy) AllowOrigin(origin, host string) bool {
	switch {
	case origin == "" || p.any:
		return true
	case len(p.allowed) == 0:
		return sameHost(origin, host)
	}
	origin = strings.TrimSuffix(origin, "/")
	for _, a := range p.allowed {
		if strings.EqualFold(origin, a) {
			return true
		}
	}
	return false
}

// sameHost reports whether origin (scheme://host[:port]) names the same
// host and port as the Host header value host.
func sameHost(origin, host string) bool {
	scheme, rest, ok := strings.Cut(origin, "://")
	if !ok {
		return false // includes the opaque origin "null"
	}
	var defPort int
	switch {
	case strings.EqualFold(scheme, "http"), strings.EqualFold(scheme, "ws"):
		defPort = 80
	case strings.EqualFold(scheme, "https"), strings.EqualFold(scheme, "wss"):
		defPort = 443
	default:
		return false
	}
	rest = strings.TrimSuffix(rest, "/")
	if strings.ContainsAny(rest, "/?#@\\") {
		return false // an Origin has no path, query or user info
	}
	oh, op, ok := splitHostPort(rest, defPort)
	if !ok {
		return false
	}
	hh, hp, ok := splitHostPort(host, defPort)
	return ok && op == hp && strings.EqualFold(oh, hh)
}

// splitHostPort splits "host", "host:port", "[v6]" or "[v6]:port"; a
// missing port is defPort. A trailing dot of a fully qualified name is
// dropped so "example.com." and "example.com" compare equal.
func splitHostPort(hp string, defPort int) (host string, port int, ok bool) {
	var portStr string
	if strings.HasPrefix(hp, "[") {
		end := strings.IndexByte(hp, ']')
		if end < 0 {
			return "", 0, false
		}
		inner, rest := hp[1:end], hp[end+1:]
		switch {
		case rest == "":
		case rest[0] == ':':
			portStr = rest[1:]
			if portStr == "" {
				return "", 0, false
			}
		default:
			return "", 0, false
		}
		hp = inner
	} else if i := strings.LastIndexByte(hp, ':'); i >= 0 {
		if strings.IndexByte(hp[:i], ':') >= 0 {
			return "", 0, false // a bare IPv6 address needs brackets
		}
		hp, portStr = hp[:i], hp[i+1:]
		if portStr == "" {
			return "", 0, false
		}
	}
	host = strings.TrimSuffix(hp, ".")
	if host == "" {
		return "", 0, false
	}
	port = defPort
	if portStr != "" {
		n, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || n == 0 {
			return "", 0, false
		}
		port = int(n)
	}
	return host, port, true
}

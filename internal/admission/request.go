package admission

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// IsUpgrade reports whether r is a WebSocket upgrade request (RFC 6455
// section 4.2.1).
func IsUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet &&
		HeaderHasToken(r.Header, "Connection", "upgrade") &&
		HeaderHasToken(r.Header, "Upgrade", "websocket") &&
		r.Header.Get("Sec-WebSocket-Version") == "13" &&
		r.Header.Get("Sec-WebSocket-Key") != ""
}

// HeaderHasToken reports whether a comma-separated header lists token
// (case-insensitive).
func HeaderHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// Request is what a handshake is judged on, read by net/http (FromHTTP)
// or by the node's own accept path from the raw request.
type Request struct {
	IP        string
	Query     url.Values
	Origin    string
	Host      string
	Authz     string   // the Authorization header
	Protocols []string // the Sec-WebSocket-Protocol headers
	XFF       string   // X-Forwarded-For (all of them, comma-joined)
	RealIP    string   // X-Real-IP
	Cookie    string   // Cookie (all of them, "; "-joined), for WSGATE_CONNECT_URL
	UserAgent string   // User-Agent, for WSGATE_CONNECT_URL
	Exts      [][]byte // the Sec-WebSocket-Extensions headers (permessage-deflate)
	Path      string   // the request's path (own accept path only)
}

// FromHTTP reads a request net/http parsed.
func FromHTTP(r *http.Request) Request {
	return Request{
		IP: PeerIP(r), Query: r.URL.Query(), Origin: r.Header.Get("Origin"), Host: r.Host,
		Authz: r.Header.Get("Authorization"), Protocols: r.Header.Values("Sec-WebSocket-Protocol"),
		XFF: strings.Join(r.Header.Values("X-Forwarded-For"), ","), RealIP: r.Header.Get("X-Real-Ip"),
		Cookie: strings.Join(r.Header.Values("Cookie"), "; "), UserAgent: r.Header.Get("User-Agent"),
		Exts: HeaderBytes(r.Header.Values("Sec-Websocket-Extensions")),
	}
}

// PeerIP is the address of r's peer, without its port.
func PeerIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// HeaderBytes are a request's header values as the negotiation reads them.
func HeaderBytes(vs []string) [][]byte {
	var out [][]byte
	for _, v := range vs {
		out = append(out, []byte(v))
	}
	return out
}

package gateway

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"github.com/wsgate/wsgate/internal/api"
)

// The open API of wsgate dev (no API key) and against DNS rebinding
// (contract section 22): a page on a name the attacker resolves to
// 127.0.0.1 is same-origin with itself, so its Origin passes the Origin
// check; only the Host header tells it apart. The open API, /metrics and
// the profiler answer a request only when its Host is localhost, a
// loopback address or the node's listen address (any address of this
// machine when it listens on all of them); others get 403. /ws, /healthz,
// /readyz, /v1/allocate and the static pages answer any Host: clients
// reach a node by its real names.

// openAPI reports whether the server API is open (wsgate dev, no key).
func (n *Node) openAPI() bool { return n.cfg.Dev && n.cfg.APIKey == "" }

// checkDevHost refuses a request of the open dev API whose Host is not
// one of the node's own names; nil when the API is not open.
func (n *Node) checkDevHost(r *http.Request) *api.Error {
	if !n.openAPI() || n.hostIsOwn(r.Host) {
		return nil
	}
	return &api.Error{Status: http.StatusForbidden, Code: "host_forbidden",
		Message: "the dev API answers Host localhost, a loopback address or its listen address only (DNS rebinding)"}
}

// devHostOnly guards a non-API handler of the open dev API (metrics, the
// profiler) with checkDevHost.
func (n *Node) devHostOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ae := n.checkDevHost(r); ae != nil {
			api.WriteError(w, ae.Status, ae.Code, ae.Message)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// hostIsOwn reports whether a Host header names this node: localhost, a
// loopback address, or the host of WSGATE_LISTEN / WSGATE_ADMIN_LISTEN;
// a listen address without a host or with an unspecified one (":8080",
// "0.0.0.0:8080") stands for every address of this machine.
func (n *Node) hostIsOwn(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, ipErr := netip.ParseAddr(host)
	if ipErr == nil && ip.Unmap().IsLoopback() {
		return true
	}
	for _, listen := range []string{n.cfg.Listen, n.cfg.AdminListen} {
		if listen == "" {
			continue
		}
		lh, _, err := net.SplitHostPort(listen)
		if err != nil {
			continue
		}
		lh = strings.ToLower(lh)
		if lh == host {
			return true
		}
		if la, err := netip.ParseAddr(lh); (lh == "" || err == nil && la.IsUnspecified()) && ipErr == nil && localAddrs()[ip.Unmap()] {
			return true
		}
	}
	return false
}

// localAddrs are the addresses of this machine's interfaces (read once).
var localAddrs = sync.OnceValue(func() map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			m[p.Addr().Unmap()] = true
		}
	}
	return m
})

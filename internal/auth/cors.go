package auth

import (
	"net/http"
)

// CORS serves h to cross-origin readers whose Origin p allows
// (WSGATE_ALLOWED_ORIGINS; contract section 22): /client/wsgate.js, which
// a page of another origin imports as a module, and /v1/allocate, which
// the JavaScript client fetches. An allowed Origin is echoed in
// Access-Control-Allow-Origin (no credentials: neither path reads
// cookies); a preflight (OPTIONS with Access-Control-Request-Method) is
// answered here, 204 for an allowed Origin, 403 for another, and never
// reaches h. Without an Origin, or from one p refuses, h answers as
// before, without CORS headers, so a browser keeps the answer from the
// page. Every answer varies by Origin (caches).
func (p *OriginPolicy) CORS(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Add("Vary", "Origin")
		origin := r.Header.Get("Origin")
		allowed := origin != "" && len(r.Header.Values("Origin")) == 1 && p.AllowOrigin(origin, r.Host)
		if allowed {
			hd.Set("Access-Control-Allow-Origin", origin)
		}
		if r.Method != http.MethodOptions {
			h.ServeHTTP(w, r)
			return
		}
		hd.Set("Allow", "GET, HEAD, OPTIONS")
		if r.Header.Get("Access-Control-Request-Method") == "" {
			w.WriteHeader(http.StatusNoContent) // a plain OPTIONS
			return
		}
		if !allowed {
			http.Error(w, "origin not allowed (WSGATE_ALLOWED_ORIGINS)", http.StatusForbidden)
			return
		}
		hd.Add("Vary", "Access-Control-Request-Method")
		hd.Add("Vary", "Access-Control-Request-Headers")
		hd.Set("Access-Control-Allow-Methods", "GET, HEAD")
		if rh := r.Header.Get("Access-Control-Request-Headers"); rh != "" {
			hd.Set("Access-Control-Allow-Headers", rh) // nothing is secret behind these paths
		}
		hd.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
	})
}

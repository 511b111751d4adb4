// Package web holds the browser side of wsgate, embedded in the binary:
// the console at /, the demo chat at /demo and the JavaScript client at
// /client/wsgate.js. Nothing is loaded from a CDN.
//
// The JavaScript client's source is client/wsgate.js, the module of the
// npm package @wsgate/client (client/package.json): the binary embeds that
// very file, so the served client and the package never differ.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// client is the npm package's module alone (not its tests nor node_modules).
//
//go:embed client/wsgate.js
var client embed.FS

// PageCSP is the Content-Security-Policy of the console and the demo: their
// own scripts, styles, images and API only, no inline script or style, no
// plugins, no framing (clickjacking), forms and base URL to themselves.
const PageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self' ws: wss:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Register serves every web page and file on mux: the console at /, the
// demo chat at /demo, the JavaScript client and the pages' assets.
// clientCORS, when not nil, wraps the JavaScript client's handler (also
// registered for OPTIONS, for preflights): pages of other origins import
// it (see auth.OriginPolicy.CORS).
func Register(mux *http.ServeMux, clientCORS func(http.Handler) http.Handler) {
	h := newHandlers()
	mux.HandleFunc("GET /{$}", h.page("index.html"))
	mux.HandleFunc("GET /demo", h.page("demo.html"))
	h.registerClient(mux, "/client/", clientCORS)
	mux.Handle("GET /assets/", h.files)
}

// RegisterPublic serves what a public listener carries when the admin
// plane has its own (WSGATE_ADMIN_LISTEN): the JavaScript client (with
// clientCORS as for Register), and with demo the demo chat with the
// assets it loads. The console is not served.
func RegisterPublic(mux *http.ServeMux, demo bool, clientCORS func(http.Handler) http.Handler) {
	h := newHandlers()
	h.registerClient(mux, "/client/wsgate.js", clientCORS)
	if demo {
		mux.HandleFunc("GET /demo", h.page("demo.html"))
		for _, f := range demoAssets {
			mux.Handle("GET /assets/"+f, h.files)
		}
	}
}

func (h *handlers) registerClient(mux *http.ServeMux, path string, cors func(http.Handler) http.Handler) {
	if cors == nil {
		mux.Handle("GET "+path, h.client)
		return
	}
	mux.Handle("GET "+path, cors(h.client))
	mux.Handle("OPTIONS "+path, cors(h.client))
}

// demoAssets are the files of assets/ that the demo page loads.
var demoAssets = []string{"base.css", "demo.css", "demo.js", "dom.js", "favicon.svg"}

type handlers struct {
	sub    fs.FS
	files  http.Handler // static/
	client http.Handler // client/wsgate.js
}

func newHandlers() *handlers {
	sub, _ := fs.Sub(static, "static")
	return &handlers{sub: sub, files: nosniff(http.FileServer(http.FS(sub))), client: nosniff(http.FileServerFS(client))}
}

func nosniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// page serves one HTML page with the pages' security headers.
func (h *handlers) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := fs.ReadFile(h.sub, name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		hd := w.Header()
		hd.Set("Content-Type", "text/html; charset=utf-8")
		hd.Set("Cache-Control", "no-cache")
		hd.Set("Content-Security-Policy", PageCSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		w.Write(b)
	}
}

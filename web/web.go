// Package web holds the browser side of wsgate, embedded in the binary:
// the console at /, the demo chat at /demo and the JavaScript client at
// /client/wsgate.js. Nothing is loaded from a CDN.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Register serves the web pages on mux.
func Register(mux *http.ServeMux) {
	sub, _ := fs.Sub(static, "static")
	files := http.FileServer(http.FS(sub))
	page := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, err := fs.ReadFile(sub, name)
			if err != nil {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.Write(b)
		}
	}
	mux.HandleFunc("GET /{$}", page("index.html"))
	mux.HandleFunc("GET /demo", page("demo.html"))
	mux.Handle("GET /client/", files)
	mux.Handle("GET /assets/", files)
}

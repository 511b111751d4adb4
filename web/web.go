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
	mux.Handle("GET /client/", http.FileServerFS(client))
	mux.Handle("GET /assets/", files)
}

package gateway

import (
	"io"
	"net/http"
	"testing"

	"github.com/wsgate/wsgate/internal/config"
)

// corsCall sends one request with an Origin (and, for a preflight, the
// Access-Control-Request-Method) and returns its status and
// Access-Control-Allow-Origin.
func corsCall(t *testing.T, method, url, origin string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("Origin", origin)
	if method == http.MethodOptions {
		req.Header.Set("Access-Control-Request-Method", "GET")
		req.Header.Set("Access-Control-Request-Headers", "content-type")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin")
}

// /client/wsgate.js and /v1/allocate answer pages of the origins
// WSGATE_ALLOWED_ORIGINS allows (CORS, preflight included), on the shared
// listener and on the public one of an admin layout; other origins get
// no Access-Control-Allow-Origin (and 403 on a preflight).
func TestCORSClientScriptAndAllocate(t *testing.T) {
	const app, evil = "https://app.example", "https://evil.example"
	for _, layout := range []string{"shared", "admin"} {
		n := startNode(t, func(c *config.Gateway) {
			c.AllowedOrigins = []string{app}
			if layout == "admin" {
				c.AdminListen = "127.0.0.1:0"
			}
		})
		for _, path := range []string{"/client/wsgate.js", "/v1/allocate?user=u"} {
			url := "http://" + n.addr + path
			if st, acao := corsCall(t, http.MethodOptions, url, app); st != http.StatusNoContent || acao != app {
				t.Errorf("%s: preflight from %s: %d %q, want 204 and the origin", layout, path, st, acao)
			}
			if st, acao := corsCall(t, http.MethodGet, url, app); st != http.StatusOK || acao != app {
				t.Errorf("%s: GET %s from %s: %d %q, want 200 and the origin", layout, path, app, st, acao)
			}
			if st, acao := corsCall(t, http.MethodOptions, url, evil); st != http.StatusForbidden || acao != "" {
				t.Errorf("%s: preflight %s from %s: %d %q, want 403 and no CORS header", layout, path, evil, st, acao)
			}
			if _, acao := corsCall(t, http.MethodGet, url, evil); acao != "" {
				t.Errorf("%s: GET %s from %s: Access-Control-Allow-Origin %q, want none", layout, path, evil, acao)
			}
		}
	}
	// Without the setting only the node's own origin is allowed.
	n := startNode(t, nil)
	if _, acao := corsCall(t, http.MethodGet, "http://"+n.addr+"/client/wsgate.js", app); acao != "" {
		t.Errorf("no WSGATE_ALLOWED_ORIGINS: Access-Control-Allow-Origin %q for %s", acao, app)
	}
	if st, acao := corsCall(t, http.MethodGet, "http://"+n.addr+"/v1/allocate", "http://"+n.addr); st != http.StatusOK || acao != "http://"+n.addr {
		t.Errorf("same origin: %d %q", st, acao)
	}
}

package web_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/wsgate/wsgate/web"
)

// TestTokenRefreshInBand runs wsgate.js in Chromium against a dev node that
// checks tokens: each token the page's token function gets lives 35 s, so
// the node's expiring notice comes 5 s after the connect; the client
// refreshes in band with a new token and the connection outlives the first
// token's exp (no 4401, the same connection).
func TestTokenRefreshInBand(t *testing.T) {
	const secret = "web-refresh-test-secret-0123456789abcdef"
	browser := newBrowser(t)
	dev := startDev(t, "WSGATE_ALLOWED_ORIGINS=*", "WSGATE_JWT_SECRET="+secret, "WSGATE_AUTH_INSECURE=false")
	var issued atomic.Int64
	mux := http.NewServeMux()
	web.Register(mux, nil)
	mux.Handle("GET /testdata/", http.StripPrefix("/testdata/", http.FileServer(http.Dir("testdata"))))
	mux.HandleFunc("GET /token", func(w http.ResponseWriter, r *http.Request) {
		issued.Add(1)
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(35 * time.Second).Unix()}).SignedString([]byte(secret))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		fmt.Fprint(w, s)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	p := newPage(t, browser, "refresh")
	p.navigate(srv.URL + "/testdata/refresh-test.html?" + url.Values{"url": {fmt.Sprintf("ws://127.0.0.1:%d/ws", dev.port)}}.Encode())
	p.waitFor(20*time.Second, "connected", `window.__ready === true`)
	connID := eval[string](p, `window.__client.connId`)
	p.waitFor(20*time.Second, "the expiring notice and an accepted refresh", `window.__events.expiring.length >= 1 && window.__events.refresh.some((r) => r.ok)`)
	firstExp := eval[int64](p, `window.__events.expiring[0].exp`)
	if got := eval[int64](p, `window.__events.refresh.find((r) => r.ok).exp`); got <= firstExp {
		t.Fatalf("refreshed exp %d is not after the first token's %d", got, firstExp)
	}
	if n := issued.Load(); n != 2 {
		t.Fatalf("the token function was called %d times, want 2 (connect, refresh)", n)
	}
	// Past the first token's exp the connection is still the same one.
	p.waitFor(40*time.Second, "the first token's exp to pass", fmt.Sprintf(`Date.now() / 1000 > %d + 2`, firstExp))
	if got := eval[string](p, `window.__client.state + ' ' + window.__client.connId`); got != "open "+connID {
		t.Fatalf("after the first exp: %q, want open %s", got, connID)
	}
	if n := eval[int](p, `window.__events.close.length`); n != 0 {
		t.Fatalf("%d closes, want none: %v", n, eval[any](p, `window.__events.close`))
	}
}

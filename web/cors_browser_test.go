package web_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A page of another origin imports /client/wsgate.js from a node and
// connects through its /v1/allocate when WSGATE_ALLOWED_ORIGINS lists the
// page's origin (contract section 22); a page of an unlisted origin gets
// Chromium's "Failed to fetch dynamically imported module".
func TestCrossOriginPageImportsClientAndAllocates(t *testing.T) {
	pages := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><body>cross-origin page</body></html>`)
	}))
	defer pages.Close()
	allowed := pages.URL // http://127.0.0.1:PORT
	other := strings.Replace(pages.URL, "127.0.0.1", "localhost", 1)
	n := startDev(t, "WSGATE_ALLOWED_ORIGINS="+allowed)

	browser := newBrowser(t)
	script := func(base string) string {
		return fmt.Sprintf(`window.result = 'pending';
import(%q).then(async (m) => {
  const c = new m.Client({ allocator: %q, user: 'corsuser' });
  c.on('error', (e) => { window.result = 'error: ' + e.message; });
  await c.connect();
  window.result = 'connected';
}).catch((e) => { window.result = 'error: ' + e.message; }); 0`, base+"/client/wsgate.js", base)
	}

	p := newPage(t, browser, "allowed origin")
	p.navigate(allowed + "/")
	eval[int](p, script(n.base))
	p.waitFor(15*time.Second, "the client to import, allocate and connect", `window.result !== 'pending'`)
	if got := eval[string](p, `window.result`); got != "connected" {
		t.Fatalf("page of %s (allowed): %s", allowed, got)
	}

	q := newTab(t, browser, "other origin")
	q.navigate(other + "/")
	eval[int](q, script(n.base))
	q.waitFor(15*time.Second, "the import to fail", `window.result !== 'pending'`)
	if got := eval[string](q, `window.result`); !strings.Contains(got, "Failed to fetch dynamically imported module") {
		t.Fatalf("page of %s (not allowed): %q, want the import refused", other, got)
	}
}

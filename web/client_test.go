package web_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/web"
)

// TestClientLibrary runs the unit cases of the npm package
// (client/test/cases.js, also run by `node --test`) in Chromium against a
// fake WebSocket: close codes, full-jitter backoff, redirect, token
// refresh, resume, acks, duplicates, requests, rooms, devices.
func TestClientLibrary(t *testing.T) {
	browser := newBrowser(t)
	mux := http.NewServeMux()
	web.Register(mux, nil)
	mux.Handle("GET /testdata/", http.StripPrefix("/testdata/", http.FileServer(http.Dir("testdata"))))
	mux.Handle("GET /pkg/", http.StripPrefix("/pkg/", http.FileServer(http.Dir("client"))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	p := newPage(t, browser, "client unit tests")
	p.navigate(srv.URL + "/testdata/client-test.html")
	p.waitFor(60*time.Second, "the unit tests to finish", `window.__results && window.__results.done`)
	type result struct {
		Name  string
		OK    bool
		Error string
		MS    int
	}
	res := eval[[]result](p, `window.__results.results`)
	if len(res) < 20 {
		t.Fatalf("only %d unit tests ran", len(res))
	}
	for _, r := range res {
		if !r.OK {
			t.Errorf("wsgate.js: %s\n%s", r.Name, strings.TrimSpace(r.Error))
		}
	}
	t.Logf("%d wsgate.js unit tests ran", len(res))
}

// TestRoutes checks what Register serves, without a browser.
func TestRoutes(t *testing.T) {
	mux := http.NewServeMux()
	web.Register(mux, nil)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		path, ctype, contains string
	}{
		{"/", "text/html", "wsgate console"},
		{"/demo", "text/html", "wsgate demo chat"},
		{"/client/wsgate.js", "javascript", "export class Client extends EventTarget"},
		{"/assets/api.js", "javascript", "api/v1/nodes"},
		{"/assets/console.js", "javascript", "drain"},
		{"/assets/demo.js", "javascript", "allocator: location.origin"},
		{"/assets/base.css", "text/css", ":root"},
		{"/assets/favicon.svg", "image/svg+xml", "<svg"},
	} {
		res, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 {
			t.Errorf("GET %s: %d", tc.path, res.StatusCode)
			continue
		}
		if ct := res.Header.Get("Content-Type"); !strings.Contains(ct, tc.ctype) {
			t.Errorf("GET %s: Content-Type %q, want %s", tc.path, ct, tc.ctype)
		}
		if !strings.Contains(string(b), tc.contains) {
			t.Errorf("GET %s: body does not contain %q", tc.path, tc.contains)
		}
	}
	// The demo shows the server-set sender of a message (contract 4.1
	// v1.1), never a "from" inside its data, and does not send one.
	res, err := http.Get(srv.URL + "/assets/demo.js")
	if err != nil {
		t.Fatal(err)
	}
	demo, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(demo), "typeof m.from === 'string'") || strings.Contains(string(demo), "data?.from") || strings.Contains(string(demo), "data.from") ||
		strings.Contains(string(demo), "{ from: me") {
		t.Error("demo.js must take the sender from the message's server-set from, not from its data")
	}
	res, err = http.Get(srv.URL + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Errorf("GET /nope: %d, want 404", res.StatusCode)
	}
}

package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func apiCall(t *testing.T, n *testNode, method, path, key, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+n.addr+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// The JSON decoding errors; the checks of every transport are in
// api_transport_test.go.
func TestAPIBadBodiesGetClearErrors(t *testing.T) {
	n := startNode(t, nil)
	for _, tc := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"target":`, 400, "invalid JSON"},
		{``, 400, "empty body"},
		{`[1]`, 400, "JSON object"},
		{`{"target":{"type":"planet","id":"x"}}`, 400, "target.type"},
		{`{"target":{"type":"user","id":"u"},"class":"urgent"}`, 400, "class"},
		{`{"target":{"type":"broadcast"},"reliable":true}`, 400, "reliable"},
		{`{"target":{"type":"user","id":""}}`, 400, "target.id"},
		{`{"target":"user:u"}`, 400, "object"},
		{`{"event":"e"}`, 400, "target is required"},
		{`{"target":{"type":"user","id":"u"},"reliable":"yes"}`, 400, "reliable"},
		{`{"target":{"type":"user","id":"u"},"data":` + strings.Repeat(" ", 1<<20) + `1}`, 413, "1 MiB"},
	} {
		status, m := apiCall(t, n, "POST", "/api/v1/publish", "k", tc.body)
		e, _ := m["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if status != tc.status || e["code"] == "" || !strings.Contains(msg, tc.msg) {
			t.Errorf("body %.40q: got %d %v, want %d mentioning %q", tc.body, status, m, tc.status, tc.msg)
		}
	}
	if status, _ := apiCall(t, n, "POST", "/api/v1/publish", "", `{}`); status != 401 {
		t.Errorf("no key: %d", status)
	}
	if status, _ := apiCall(t, n, "POST", "/api/v1/publish", "kk", `{}`); status != 401 {
		t.Errorf("wrong key: %d", status)
	}
	if status, m := apiCall(t, n, "GET", "/api/v1/nope", "k", ""); status != 404 || m["error"] == nil {
		t.Errorf("unknown endpoint: %d %v", status, m)
	}
}

func TestIDsAreUniqueAndFixedWidth(t *testing.T) {
	n := startNode(t, nil)
	a, b := n.newID(), n.newID()
	if a == b || len(a) != 20 || len(b) != 20 {
		t.Fatalf("ids %q %q", a, b)
	}
	if got := n.formatID(0xabc); got != n.idPrefix+"000000000abc" {
		t.Fatalf("formatID: %q", got)
	}
}

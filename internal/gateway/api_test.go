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

func TestAPIBatchKeepsGoodMessages(t *testing.T) {
	n := startNode(t, nil)
	c := n.connect(t, "gus", "")
	status, m := apiCall(t, n, "POST", "/api/v1/publish/batch", "k", `{"messages":[
		{"target":{"type":"user","id":"gus"},"event":"one","reliable":true},
		{"target":{"type":"nowhere"}},
		{"target":{"type":"user","id":"gus"},"event":"two","reliable":true}]}`)
	if status != 200 {
		t.Fatalf("batch: %d %v", status, m)
	}
	res := m["results"].([]any)
	if res[0].(map[string]any)["seq"].(float64) != 1 || res[1].(map[string]any)["error"] == nil || res[2].(map[string]any)["seq"].(float64) != 2 {
		t.Fatalf("results %v", res)
	}
	if c.expect("message")["event"] != "one" || c.expect("message")["event"] != "two" {
		t.Fatal("batch order")
	}
	big := `{"messages":[` + strings.Repeat(`{"target":{"type":"broadcast"}},`, 1000) + `{"target":{"type":"broadcast"}}]}`
	if status, _ := apiCall(t, n, "POST", "/api/v1/publish/batch", "k", big); status != 400 {
		t.Fatalf("1001 messages: %d", status)
	}
}

func TestAPIPresenceMembersDisconnect(t *testing.T) {
	n := startNode(t, nil)
	c := n.connect(t, "hal", "")
	if status, m := apiCall(t, n, "GET", "/api/v1/users/hal/presence", "k", ""); status != 200 || m["online"] != true || len(m["connections"].([]any)) != 1 {
		t.Fatalf("presence %d %v", status, m)
	}
	if status, _ := apiCall(t, n, "PUT", "/api/v1/rooms/r1/members/hal", "k", ""); status != 204 {
		t.Fatalf("join %d", status)
	}
	if _, m := apiCall(t, n, "GET", "/api/v1/rooms/r1/members", "k", ""); len(m["members"].([]any)) != 1 {
		t.Fatalf("members %v", m)
	}
	if status, m := apiCall(t, n, "POST", "/api/v1/users/hal/disconnect", "k", `{"reason":"bye"}`); status != 200 || m["disconnected"].(float64) != 1 {
		t.Fatalf("disconnect %d %v", status, m)
	}
	if code := c.waitClosed(5 * 1e9); code != 4003 {
		t.Fatalf("close %d", code)
	}
	if status, _ := apiCall(t, n, "POST", "/api/v1/users/hal/disconnect", "k", `not json`); status != 400 {
		t.Fatalf("bad disconnect body %d", status)
	}
	if status, _ := apiCall(t, n, "POST", "/api/v1/nodes/ghost/drain", "k", ""); status != 404 {
		t.Fatalf("drain unknown node %d", status)
	}
}

func TestPublishIdempotencyKey(t *testing.T) {
	n := startNode(t, nil)
	c := n.connect(t, "ivy", "")
	body := `{"target":{"type":"user","id":"ivy"},"event":"once","reliable":true,"idempotency_key":"order-42"}`
	s1, m1 := apiCall(t, n, "POST", "/api/v1/publish", "k", body)
	s2, m2 := apiCall(t, n, "POST", "/api/v1/publish", "k", body)
	if s1 != 200 || s2 != 200 || m1["id"] != m2["id"] || m1["seq"] != m2["seq"] {
		t.Fatalf("retry answered differently: %v %v / %v %v", s1, m1, s2, m2)
	}
	c.expect("message")
	// The retry delivered nothing: the next frame is the marker.
	apiCall(t, n, "POST", "/api/v1/publish", "k", `{"target":{"type":"user","id":"ivy"},"event":"marker"}`)
	if m := c.expect("message"); m["event"] != "marker" {
		t.Fatalf("duplicate delivery: %v", m)
	}
	s3, m3 := apiCall(t, n, "POST", "/api/v1/publish", "k", `{"target":{"type":"user","id":"ivy"},"event":"other","reliable":true,"idempotency_key":"order-43"}`)
	if s3 != 200 || m3["seq"].(float64) != 2 {
		t.Fatalf("another key: %d %v", s3, m3)
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

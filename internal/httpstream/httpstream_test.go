package httpstream

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/internal/admission"
)

// Frames are exact: an SSE event is "data: JSON\n" (then "id: ID\n"
// when it has one) and a blank line; an ndjson frame one line; a raw
// line break in the JSON becomes a space.
func TestFrame(t *testing.T) {
	for _, tc := range []struct {
		k    Kind
		in   string
		id   string
		want string
	}{
		{SSE, `{"a":1}`, "", "data: {\"a\":1}\n\n"},
		{SSE, `{"a":1}`, "AQI", "data: {\"a\":1}\nid: AQI\n\n"},
		{SSE, "{\"a\":\r\n1}", "", "data: {\"a\":  1}\n\n"},
		{NDJSON, `{"a":1}`, "ignored", "{\"a\":1}\n"},
		{NDJSON, "{\n}", "", "{ }\n"},
	} {
		if got := string(Frame(tc.k, []byte(tc.in), tc.id)); got != tc.want {
			t.Errorf("Frame(%v, %q, %q) = %q, want %q", tc.k, tc.in, tc.id, got, tc.want)
		}
	}
	if string(KeepAlive(SSE)) != ":\n\n" || string(KeepAlive(NDJSON)) != "\n" {
		t.Errorf("keep-alives %q %q", KeepAlive(SSE), KeepAlive(NDJSON))
	}
	h := string(Header(NDJSON, "https://app.example"))
	for _, want := range []string{"HTTP/1.1 200 OK\r\n", "Content-Type: application/x-ndjson\r\n", "X-Accel-Buffering: no\r\n",
		"Access-Control-Allow-Origin: https://app.example\r\n", "Vary: Origin\r\n"} {
		if !strings.Contains(h, want) {
			t.Errorf("header %q lacks %q", h, want)
		}
	}
	if !strings.HasSuffix(h, "\r\n\r\n") || strings.Contains(string(Header(SSE, "")), "Access-Control") {
		t.Errorf("header without an origin names one, or does not end the head: %q", h)
	}
}

// A cursor reads back as the positions it was made of (negative ones as
// 0), whatever the order of its rooms; anything else is refused.
func TestCursorRoundTrip(t *testing.T) {
	c := Cursor(42, []RoomPos{{"b:2", 7}, {"a", 0}, {"z", -1}})
	since, rooms, err := ParseCursor(c)
	if err != nil || since != 42 || !maps.Equal(rooms, map[string]int64{"a": 0, "b:2": 7, "z": 0}) {
		t.Fatalf("ParseCursor(%q) = %d %v %v", c, since, rooms, err)
	}
	if again := Cursor(42, []RoomPos{{"z", 0}, {"a", 0}, {"b:2", 7}}); again != c {
		t.Fatalf("the same positions in another order gave %q, want %q", again, c)
	}
	if _, rooms, err := ParseCursor(Cursor(0, nil)); err != nil || len(rooms) != 0 {
		t.Fatalf("inbox-only cursor: %v %v", rooms, err)
	}
	for _, bad := range []string{"", "AA", "!!", "AgE", strings.Repeat("A", 17<<10)} {
		if _, _, err := ParseCursor(bad); err == nil {
			t.Errorf("ParseCursor(%q) accepted", bad)
		}
	}
	many := make([]RoomPos, admission.MaxRoomSince+1)
	for i := range many {
		many[i] = RoomPos{fmt.Sprint("r", i), 1}
	}
	if _, _, err := ParseCursor(Cursor(1, many)); err == nil {
		t.Errorf("a cursor of %d rooms accepted, the bound is %d", len(many), admission.MaxRoomSince)
	}
}

// A cursor's positions replace since and the room_since of its rooms; a
// room_since for another room stays.
func TestResumeFromCursor(t *testing.T) {
	q := url.Values{"since": {"3"}, "room_since": {"a:1", "other:9"}, "device": {"d"}}
	if err := ResumeFromCursor(q, Cursor(10, []RoomPos{{"a", 5}, {"b", 2}})); err != nil {
		t.Fatal(err)
	}
	if q.Get("since") != "10" || !slices.Equal(q["room_since"], []string{"a:5", "b:2", "other:9"}) || q.Get("device") != "d" {
		t.Fatalf("query after resume: %v", q)
	}
	if err := ResumeFromCursor(url.Values{}, "nope"); err == nil {
		t.Fatal("a bad cursor resumed")
	}
}

func request(method, target, body string, hdr http.Header) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	maps.Copy(r.Header, hdr)
	return r
}

// The parameters of a stream request, from the query, the headers or
// the JSON body of POST /stream; each refusal is a 400 (413 for a body
// over MaxBody) with its reason.
func TestReadRequest(t *testing.T) {
	r, f := ReadRequest(request("POST", "/stream", `{"token":"tok","since":"4","room_since":["r:2"],"device":"phone","format":"json"}`, nil), NDJSON)
	if f != nil || r.Authz != "Bearer tok" || r.Query.Get("since") != "4" || r.Query.Get("room_since") != "r:2" || r.Query.Get("device") != "phone" {
		t.Fatalf("body parameters: %+v %v", r, f)
	}
	r, f = ReadRequest(request("POST", "/stream", `{"token":"tok"}`, http.Header{"Authorization": {"Bearer hdr"}}), NDJSON)
	if f != nil || r.Authz != "Bearer hdr" {
		t.Fatalf("the header's token must win over the body's: %q %v", r.Authz, f)
	}
	r, f = ReadRequest(request("GET", "/sse?token=q", "", nil), SSE)
	if f != nil || r.Authz != "Bearer q" {
		t.Fatalf("SSE takes the query token (EventSource sets no header): %q %v", r.Authz, f)
	}
	cur := Cursor(8, []RoomPos{{"r", 3}})
	r, f = ReadRequest(request("GET", "/sse?since=1", "", http.Header{"Last-Event-Id": {cur}}), SSE)
	if f != nil || r.Query.Get("since") != "8" || r.Query.Get("room_since") != "r:3" {
		t.Fatalf("Last-Event-ID: %v %v", r.Query, f)
	}
	r, f = ReadRequest(request("GET", "/sse?last_event_id="+cur, "", nil), SSE)
	if f != nil || r.Query.Get("since") != "8" {
		t.Fatalf("last_event_id: %v %v", r.Query, f)
	}
	for _, tc := range []struct {
		name   string
		req    *http.Request
		k      Kind
		status int
	}{
		{"bad JSON body", request("POST", "/stream", `{"token":`, nil), NDJSON, 400},
		{"body over 64 KiB", request("POST", "/stream", `{"device":"`+strings.Repeat("x", MaxBody)+`"}`, nil), NDJSON, 413},
		{"msgpack", request("GET", "/sse?format=msgpack", "", nil), SSE, 400},
		{"msgpack in the body", request("POST", "/stream", `{"format":"msgpack"}`, nil), NDJSON, 400},
		{"two Origins", request("GET", "/sse", "", http.Header{"Origin": {"https://a", "https://b"}}), SSE, 400},
		{"bad cursor", request("GET", "/sse", "", http.Header{"Last-Event-Id": {"garbage"}}), SSE, 400},
	} {
		_, f := ReadRequest(tc.req, tc.k)
		if f == nil || f.Status != tc.status || f.Msg == "" {
			t.Errorf("%s: refusal %+v, want %d with a reason", tc.name, f, tc.status)
		}
	}
}

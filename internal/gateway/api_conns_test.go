package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

// connectID connects user to n and returns the client and its conn_id.
func connectID(t *testing.T, n *testNode, user string) (*wsClient, string) {
	t.Helper()
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, user, nil)}}, true)
	w := c.next(5 * time.Second)
	id, _ := w["conn_id"].(string)
	if w["type"] != "welcome" || id == "" {
		t.Fatalf("first frame %v, want a welcome with a conn_id", w)
	}
	return c, id
}

// listAll reads every page of node's connections through n's API.
func listAll(t *testing.T, n *testNode, node string, limit int) (ids []string, byID map[string]map[string]any, pages int) {
	t.Helper()
	byID = map[string]map[string]any{}
	cursor := ""
	for {
		pages++
		status, m := apiCall(t, n, "GET", fmt.Sprintf("/api/v1/nodes/%s/connections?limit=%d&cursor=%s", node, limit, url.QueryEscape(cursor)), "k", "")
		if status != 200 {
			t.Fatalf("connections page %d of %s: %d %v", pages, node, status, m)
		}
		list, _ := m["connections"].([]any)
		if len(list) > limit {
			t.Fatalf("page of %d connections, limit %d", len(list), limit)
		}
		for _, x := range list {
			e := x.(map[string]any)
			id := e["conn_id"].(string)
			ids = append(ids, id)
			byID[id] = e
		}
		cursor, _ = m["cursor"].(string)
		if cursor == "" {
			return ids, byID, pages
		}
		if pages > 100 {
			t.Fatal("the listing never ends")
		}
	}
}

// A node's connections listed through another node's API, page by page:
// every connection once, with its user, device, transport and rooms; the
// first request to the other node is lost and asked again.
func TestConnectionsListPagesEveryConnectionOnce(t *testing.T) {
	b := redisBackends(t, 2)
	n1 := startNodeWith(t, b[0], nil)
	n2 := startNodeWith(t, loseFirst(b[1], kindConns, 1), func(c *config.Gateway) { c.NodeID = "t2" })
	if err := n1.JoinRoom(t.Context(), "lobby", "u3"); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 7 {
		_, id := connectID(t, n1, fmt.Sprintf("u%d", i))
		want = append(want, id)
	}
	_, other := connectID(t, n2, "u9")

	got, byID, pages := listAll(t, n2, "t1", 3)
	if pages != 3 {
		t.Errorf("7 connections by 3 came in %d pages, want 3", pages)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("listed %v, want every connection of t1 once: %v", got, want)
	}
	for id, e := range byID {
		rooms := fmt.Sprint(e["rooms"])
		wantRooms := "[]"
		if e["user"] == "u3" {
			wantRooms = "[lobby]"
		}
		if e["transport"] != "ws" || e["device"] != protocol.DefaultDevice || rooms != wantRooms || e["connected_at"].(float64) <= 0 {
			t.Errorf("connection %s listed as %v, want transport ws, device default, rooms %s", id, e, wantRooms)
		}
	}
	// The serving node lists its own connections as well.
	if own, _, _ := listAll(t, n2, "t2", 100); !slices.Equal(own, []string{other}) {
		t.Errorf("t2 lists %v, want [%s]", own, other)
	}
}

// Disconnecting one connection by its id through another node's API
// closes exactly that one with 4003 (the first answer of its node to the
// lookup is lost, and asked again); the user's other connection stays,
// and is closed in turn through its own node's API.
func TestDisconnectOneConnectionOnAnotherNode(t *testing.T) {
	b := redisBackends(t, 2)
	n1 := startNodeWith(t, loseFirst(b[0], kindConnsPage, 1), nil)
	n2 := startNodeWith(t, b[1], func(c *config.Gateway) { c.NodeID = "t2" })
	target, id := connectID(t, n1, "erin")
	kept, keptID := connectID(t, n1, "erin")
	status, m := apiCall(t, n2, "POST", "/api/v1/connections/"+id+"/disconnect", "k", `{"reason":"bye"}`)
	if status != 200 || m["disconnected"] != float64(1) {
		t.Fatalf("disconnect: %d %v, want 200 and 1", status, m)
	}
	if code := target.waitClosed(5 * time.Second); code != protocol.CloseDisconnected {
		t.Fatalf("closed with %d, want 4003", code)
	}
	eventually(t, 5*time.Second, "t1 to count one connection", func() bool { return n1.hub.count() == 1 })
	if ids, _, _ := listAll(t, n2, "t1", 10); !slices.Equal(ids, []string{keptID}) {
		t.Fatalf("t1 lists %v after the disconnect, want only %s", ids, keptID)
	}
	pub(t, n2, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "erin"}, Event: "still", Data: raw(`1`)})
	if f := kept.expect("message"); f["event"] != "still" {
		t.Fatalf("the other connection got %v", f)
	}
	// The same id again: no such connection now.
	if status, m := apiCall(t, n2, "POST", "/api/v1/connections/"+id+"/disconnect", "k", ""); status != 404 {
		t.Fatalf("second disconnect: %d %v, want 404", status, m)
	}
	// The other one through the API of the node that holds it.
	if status, m := apiCall(t, n1, "POST", "/api/v1/connections/"+keptID+"/disconnect", "k", ""); status != 200 || m["disconnected"] != float64(1) {
		t.Fatalf("local disconnect: %d %v, want 200 and 1", status, m)
	}
	if code := kept.waitClosed(5 * time.Second); code != protocol.CloseDisconnected {
		t.Fatalf("closed with %d, want 4003", code)
	}
}

// Bad input to the connections endpoints gets a 4xx that says why.
func TestConnectionsBadInput(t *testing.T) {
	n := startNode(t, nil)
	_, id := connectID(t, n, "fay")
	for _, tc := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/api/v1/nodes/nope/connections", 404, "not_found"},
		{"GET", "/api/v1/nodes/t1/connections?cursor=zz", 400, "bad_request"},
		{"GET", "/api/v1/nodes/t1/connections?cursor=11111111111111111", 400, "bad_request"},
		{"GET", "/api/v1/nodes/t1/connections?limit=0", 400, "bad_request"},
		{"GET", "/api/v1/nodes/t1/connections?limit=1001", 400, "bad_request"},
		{"GET", "/api/v1/nodes/t1/connections?limit=x", 400, "bad_request"},
		{"POST", "/api/v1/connections/alice/disconnect", 400, "bad_request"},
		{"POST", "/api/v1/connections/" + id + "ff/disconnect", 404, "unknown_connection"},
		{"POST", "/api/v1/connections/0000000000000000000001/disconnect", 404, "unknown_connection"},
	} {
		status, m := apiCall(t, n, tc.method, tc.path, "k", "")
		e, _ := m["error"].(map[string]any)
		if status != tc.status || e["code"] != tc.code || e["message"] == "" {
			t.Errorf("%s %s: %d %v, want %d %s with a message", tc.method, tc.path, status, m, tc.status, tc.code)
		}
	}
	if status, m := apiCall(t, n, "POST", "/api/v1/connections/"+id+"/disconnect", "k", `[1]`); status != 400 {
		t.Errorf("a body that is not an object: %d %v, want 400", status, m)
	}
	if status, _ := apiCall(t, n, "GET", "/api/v1/nodes/t1/connections", "", ""); status != 401 {
		t.Errorf("without the key: %d, want 401", status)
	}
}

// A node that does not confirm the close in time is not counted, and is
// asked again afterwards until the connection is closed.
func TestDisconnectOneConnectionGoesOnAsking(t *testing.T) {
	b := redisBackends(t, 2)
	n1 := startNodeWith(t, b[0], nil)
	// 9 lost kicks: 4.5 s of retries, longer than the request waits.
	n2 := startNodeWith(t, loseFirst(b[1], kindKick, 9), func(c *config.Gateway) { c.NodeID = "t2" })
	target, id := connectID(t, n1, "hal")
	status, m := apiCall(t, n2, "POST", "/api/v1/connections/"+id+"/disconnect", "k", "")
	if status != 200 || m["disconnected"] != float64(0) {
		t.Fatalf("disconnect: %d %v, want 200 and 0 (not confirmed yet)", status, m)
	}
	if code := target.waitClosed(10 * time.Second); code != protocol.CloseDisconnected {
		t.Fatalf("closed with %d, want 4003", code)
	}
}

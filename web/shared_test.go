package web_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/wsgate/wsgate/web"
)

// received is what a shared-test tab recorded (testdata/shared-test.html).
type received struct {
	ID, Type, Target, Text string
	Seq                    int
}

// TestSharedConnectionTabs opens three tabs of one origin with shared: true
// on a dev node: the node has one connection for the three; each tab has
// its own rooms; reliable user and room messages published while the tabs
// close one by one (the one that opened the connection first) reach the
// remaining tabs in order, without hole or duplicate, on the same socket.
func TestSharedConnectionTabs(t *testing.T) {
	browser := newBrowser(t)
	dev := startDev(t, "WSGATE_ALLOWED_ORIGINS=*")
	mux := http.NewServeMux()
	web.Register(mux, nil)
	mux.Handle("GET /testdata/", http.StripPrefix("/testdata/", http.FileServer(http.Dir("testdata"))))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	wsURL := fmt.Sprintf("ws://127.0.0.1:%d/ws", dev.port)
	open := func(name, rooms string) *page {
		p := newTab(t, browser, name)
		p.navigate(srv.URL + "/testdata/shared-test.html?" + url.Values{"url": {wsURL}, "user": {"alice"}, "rooms": {rooms}}.Encode())
		p.waitFor(20*time.Second, name+" connected and joined", `window.__ready === true`)
		if !eval[bool](p, `window.__client.shared`) {
			t.Fatalf("%s: the client did not use a SharedWorker", name)
		}
		return p
	}
	tabs := []*page{open("tab0", "lobby"), open("tab1", "lobby"), open("tab2", "lobby,side")}
	connID := eval[string](tabs[0], `window.__client.connId`)
	for _, p := range tabs[1:] {
		if got := eval[string](p, `window.__client.connId`); got != connID {
			t.Fatalf("%s is on connection %q, tab0 on %q: not shared", p.name, got, connID)
		}
	}
	presence := func() int {
		var res struct {
			Connections []struct {
				ConnID string `json:"conn_id"`
			}
		}
		if code := api(t, dev, "", "GET", "/api/v1/users/alice/presence", nil, &res); code != 200 {
			t.Fatalf("presence: %d", code)
		}
		if len(res.Connections) == 1 && res.Connections[0].ConnID != connID {
			t.Fatalf("presence lists connection %q, the tabs use %q", res.Connections[0].ConnID, connID)
		}
		return len(res.Connections)
	}
	if n := presence(); n != 1 {
		t.Fatalf("three shared tabs: %d connections on the node, want 1", n)
	}

	// Per-tab subscriptions: a message of "side" reaches tab2 only; one of
	// the lobby reaches every tab.
	publish := func(target, id, text string, reliable bool) {
		t.Helper()
		body := map[string]any{"target": map[string]string{"type": target, "id": id}, "event": "chat", "data": map[string]string{"text": text}, "reliable": reliable}
		var res struct{ Seq int }
		if code := api(t, dev, "", "POST", "/api/v1/publish", body, &res); code != 200 || (reliable && res.Seq == 0) {
			t.Fatalf("publish %s to %s:%s: status %d seq %d", text, target, id, code, res.Seq)
		}
	}
	publish("room", "side", "side-only", false)
	publish("room", "lobby", "lobby-all", false)
	for _, p := range tabs {
		p.waitFor(10*time.Second, "the lobby message", `window.__got.some((m) => m.text === 'lobby-all')`)
	}
	if got := eval[[]string](tabs[2], `window.__got.filter((m) => m.target === 'side').map((m) => m.text)`); !slices.Equal(got, []string{"side-only"}) {
		t.Fatalf("tab2 (joined side) got %q from side", got)
	}
	for _, p := range tabs[:2] {
		if n := eval[int](p, `window.__got.filter((m) => m.target === 'side').length`); n != 0 {
			t.Fatalf("%s did not join side but got %d of its messages", p.name, n)
		}
	}

	// Reliable messages throughout, closing the tab that opened the
	// connection first, then tab2; tab1 remains.
	total := 0
	burst := func() {
		for i := 0; i < 10; i++ {
			total++
			publish("user", "alice", fmt.Sprintf("u%d", total), true)
			publish("room", "lobby", fmt.Sprintf("r%d", total), true)
		}
	}
	burst()
	tabs[0].close()
	burst()
	tabs[2].close()
	burst()
	last := tabs[1]
	last.waitFor(20*time.Second, fmt.Sprintf("%d reliable user and room messages", total),
		fmt.Sprintf(`window.__got.filter((m) => m.seq && m.type === 'user').length >= %d && window.__got.filter((m) => m.seq && m.type === 'room').length >= %d`, total, total))
	got := eval[[]received](last, `window.__got.filter((m) => m.seq)`)
	var user, room []int
	for _, m := range got {
		if m.Type == "user" {
			user = append(user, m.Seq)
		} else {
			room = append(room, m.Seq)
		}
	}
	want := make([]int, total)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(user, want) {
		t.Errorf("user seqs in the last tab: %v, want 1..%d exactly once, in order", user, total)
	}
	if !slices.Equal(room, want) {
		t.Errorf("room seqs in the last tab: %v, want 1..%d exactly once, in order", room, total)
	}
	if id := eval[string](last, `window.__client.connId`); id != connID {
		t.Errorf("the connection changed from %q to %q when tabs closed", connID, id)
	}
	if n := presence(); n != 1 {
		t.Errorf("after closing two tabs: %d connections, want 1", n)
	}
	// The connection acknowledged for the remaining tab: nothing is left
	// unacknowledged once the last ack went out (ping is a barrier).
	last.waitFor(10*time.Second, "the acks", fmt.Sprintf(`window.__client.ping().then(() => { window.__acked = window.__client.stats.ackedSeq }), window.__acked === %d`, total))
}

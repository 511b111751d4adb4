package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/config"
)

// hookReceiver is an application's Pusher webhook endpoint: it checks
// each request as Pusher's server libraries do (X-Pusher-Key, and
// X-Pusher-Signature the hex HMAC-SHA256 of the body with the secret) and
// passes on the events of the valid ones; an invalid one fails the test.
type hookReceiver struct {
	t      *testing.T
	events chan map[string]any
	url    string
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{t: t, events: make(chan map[string]any, 256)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var b struct {
			TimeMS int64            `json:"time_ms"`
			Events []map[string]any `json:"events"`
		}
		switch {
		case req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json":
			t.Errorf("webhook %s with Content-Type %q", req.Method, req.Header.Get("Content-Type"))
		case req.Header.Get("X-Pusher-Key") != pusherTestKey:
			t.Errorf("webhook X-Pusher-Key %q", req.Header.Get("X-Pusher-Key"))
		case req.Header.Get("X-Pusher-Signature") != hmacHex(pusherTestSecret, string(body)):
			t.Errorf("webhook X-Pusher-Signature %q is not the HMAC of its body %s", req.Header.Get("X-Pusher-Signature"), body)
		case json.Unmarshal(body, &b) != nil || b.TimeMS < time.Now().Add(-time.Minute).UnixMilli() || len(b.Events) == 0:
			t.Errorf("webhook body %s", body)
		default:
			for _, e := range b.Events {
				r.events <- e
			}
		}
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/pusher/webhook"
	return r
}

// expect takes the next events, which must be want (in order), as
// "name channel [user_id]" (client events: "client_event channel event
// data socket_id user_id").
func (r *hookReceiver) expect(want ...string) {
	r.t.Helper()
	for _, w := range want {
		select {
		case e := <-r.events:
			got := fmt.Sprint(e["name"], " ", e["channel"])
			if u, ok := e["user_id"]; ok && e["name"] != "client_event" {
				got += fmt.Sprint(" ", u)
			}
			if e["name"] == "client_event" {
				got += fmt.Sprint(" ", e["event"], " ", e["data"], " ", e["socket_id"], " ", e["user_id"])
			}
			if got != w {
				r.t.Fatalf("webhook event %q, want %q", got, w)
			}
		case <-time.After(10 * time.Second):
			r.t.Fatalf("no webhook event %q within 10s", w)
		}
	}
}

// Pusher-format webhooks, from two nodes to one endpoint: channel_occupied
// with a channel's first subscription and channel_vacated with its last,
// member_added / member_removed per user of a presence channel (a second
// socket of a user adds none, closing it removes none), client_event with
// the data as a string, the sender's socket_id, and user_id on presence
// channels.
func TestPusherWebhooks(t *testing.T) {
	t.Parallel()
	hooks := newHookReceiver(t)
	n1, n2 := startPusherPair(t, "pusher-hooks-", func(c *config.Gateway) { c.PusherWebhookURL = hooks.url })
	const room = "presence-hooks"
	alice := n1.pusher(t)
	alice.subscribed(room, `{"user_id":"alice","user_info":{"name":"Alice"}}`)
	hooks.expect("channel_occupied "+room, "member_added "+room+" alice")
	bob := n2.pusher(t)
	bob.subscribed(room, `{"user_id":"bob"}`)
	hooks.expect("member_added " + room + " bob")

	// A second socket of alice, on the node of her first: no member_added
	// (it would come before what follows from that node).
	alice2 := n1.pusher(t)
	alice2.subscribed(room, `{"user_id":"alice","user_info":{"name":"Alice"}}`)
	bob.send(map[string]any{"event": "client-wave", "channel": room, "data": map[string]any{"n": 1}})
	alice.event("client-wave", room)
	hooks.expect(`client_event ` + room + ` client-wave {"n":1} ` + bob.socketID + ` bob`)

	// A private channel: occupied, a client event without user_id.
	alice.subscribed("private-desk", "")
	bob.subscribed("private-desk", "")
	hooks.expect("channel_occupied private-desk")
	alice.send(map[string]any{"event": "client-note", "channel": "private-desk", "data": "plain text"})
	bob.event("client-note", "private-desk")
	hooks.expect(`client_event private-desk client-note plain text ` + alice.socketID + ` <nil>`)

	// bob leaves both channels with his socket: member_removed, and
	// private-desk stays occupied by alice.
	bob.conn.Close()
	hooks.expect("member_removed " + room + " bob")
	// alice's first socket closes: she is still a member through alice2;
	// then alice2 closes: member_removed, channel_vacated, for both.
	alice.conn.Close()
	hooks.expect("channel_vacated private-desk")
	alice2.conn.Close()
	hooks.expect("member_removed "+room+" alice", "channel_vacated "+room)
	select {
	case e := <-hooks.events:
		t.Fatalf("unexpected webhook event %v", e)
	default:
	}
}

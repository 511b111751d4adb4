package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

const (
	pusherTestApp    = "77"
	pusherTestKey    = "test-app-key"
	pusherTestSecret = "test-app-secret-0123456789"
)

func withPusher(c *config.Gateway) {
	c.Transports = append(c.Transports, "pusher")
	c.PusherAppID, c.PusherKey, c.PusherSecret = pusherTestApp, pusherTestKey, pusherTestSecret
}

// pusherClient is a raw Pusher protocol client on a wsClient.
type pusherClient struct {
	*wsClient
	socketID string
}

// dialPusher connects to /app/{key} and returns the client and its first
// frame.
func (n *testNode) dialPusher(t testing.TB, path string) (*pusherClient, map[string]any) {
	t.Helper()
	return dialPusherWith(t, ws.Dialer{Timeout: 5 * time.Second}, "ws://"+n.addr+path)
}

// dialPusherWith connects to url (ws:// or wss://, path included) with d.
func dialPusherWith(t testing.TB, d ws.Dialer, url string) (*pusherClient, map[string]any) {
	t.Helper()
	conn, br, _, err := d.Dial(context.Background(), url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	c := &wsClient{t: t, conn: conn, r: conn, frames: make(chan map[string]any, 4096), closed: make(chan struct{})}
	if br != nil {
		c.r = io.MultiReader(br, conn)
	}
	t.Cleanup(func() { conn.Close(); <-c.closed })
	go c.readLoop()
	return &pusherClient{wsClient: c}, c.next(5 * time.Second)
}

// pusher connects a Pusher client and reads its connection_established.
func (n *testNode) pusher(t testing.TB) *pusherClient {
	t.Helper()
	return pusherOn(t, ws.Dialer{Timeout: 5 * time.Second}, "ws://"+n.addr)
}

// pusherOn connects a Pusher client to base (ws://HOST or wss://HOST) with
// dialer and reads its connection_established.
func pusherOn(t testing.TB, dialer ws.Dialer, base string) *pusherClient {
	t.Helper()
	p, first := dialPusherWith(t, dialer, base+"/app/"+pusherTestKey+"?protocol=7&client=js&version=8.4.0")
	if first["event"] != protocol.PusherConnectionEstablished {
		t.Fatalf("first frame %v, want %s", first, protocol.PusherConnectionEstablished)
	}
	var d struct {
		SocketID        string `json:"socket_id"`
		ActivityTimeout int    `json:"activity_timeout"`
	}
	s, ok := first["data"].(string)
	if !ok || json.Unmarshal([]byte(s), &d) != nil || !socketIDPattern.MatchString(d.SocketID) || d.ActivityTimeout <= 0 {
		t.Fatalf("connection_established data %v: want a JSON string with socket_id N.N and activity_timeout", first["data"])
	}
	p.socketID = d.SocketID
	return p
}

// event waits for the frame of event on channel ("" = any), skipping others.
func (p *pusherClient) event(event, channel string) map[string]any {
	p.t.Helper()
	deadline := time.After(5 * time.Second)
	var seen []string
	for {
		select {
		case f := <-p.frames:
			if f["event"] == event && (channel == "" || f["channel"] == channel) {
				return f
			}
			seen = append(seen, fmt.Sprint(f["event"], " ", f["channel"]))
		case <-deadline:
			p.t.Fatalf("no %s on %q within 5s (seen %v)", event, channel, seen)
		}
	}
}

// quiet asserts that no frame of event comes before a pusher:pong answers
// a ping sent now (frames of one connection are answered in order).
func (p *pusherClient) quiet(event string) {
	p.t.Helper()
	p.send(map[string]any{"event": protocol.PusherPing, "data": map[string]any{}})
	deadline := time.After(5 * time.Second)
	for {
		select {
		case f := <-p.frames:
			if f["event"] == event {
				p.t.Fatalf("unexpected %s: %v", event, f)
			}
			if f["event"] == protocol.PusherPong {
				return
			}
		case <-deadline:
			p.t.Fatal("no pusher:pong within 5s")
		}
	}
}

func (p *pusherClient) subscribe(channel, channelData string) {
	p.t.Helper()
	d := map[string]any{"channel": channel}
	switch {
	case strings.HasPrefix(channel, "presence-"):
		d["auth"] = protocol.PusherAuth(pusherTestKey, pusherTestSecret, p.socketID, channel, channelData)
		d["channel_data"] = channelData
	case strings.HasPrefix(channel, "private-"):
		d["auth"] = protocol.PusherAuth(pusherTestKey, pusherTestSecret, p.socketID, channel, "")
	}
	p.send(map[string]any{"event": protocol.PusherSubscribe, "data": d})
}

// subscribed subscribes and returns the subscription_succeeded frame.
func (p *pusherClient) subscribed(channel, channelData string) map[string]any {
	p.t.Helper()
	p.subscribe(channel, channelData)
	return p.event(protocol.PusherSubscriptionSucceeded, channel)
}

func pusherData(t testing.TB, f map[string]any) map[string]any {
	t.Helper()
	s, ok := f["data"].(string)
	var m map[string]any
	if !ok || json.Unmarshal([]byte(s), &m) != nil {
		t.Fatalf("data of %v is not a string holding a JSON object", f)
	}
	return m
}

func pusherErrCode(t testing.TB, f map[string]any) float64 {
	t.Helper()
	d, ok := f["data"].(map[string]any)
	if !ok {
		t.Fatalf("pusher:error data %v is not an object", f["data"])
	}
	c, _ := d["code"].(float64)
	return c
}

// signedPusher builds a signed Pusher HTTP API request (as Pusher's server
// libraries sign them).
func signedPusher(t testing.TB, method, base, path string, extra url.Values, body []byte, at time.Time) *http.Request {
	t.Helper()
	params := map[string]string{"auth_key": pusherTestKey, "auth_timestamp": strconv.FormatInt(at.Unix(), 10), "auth_version": "1.0"}
	if len(body) > 0 {
		sum := md5.Sum(body)
		params["body_md5"] = hex.EncodeToString(sum[:])
	}
	for k, v := range extra {
		params[k] = v[0]
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+"="+params[k])
	}
	qs := strings.Join(parts, "&")
	mac := hmacHex(pusherTestSecret, method+"\n"+path+"\n"+qs)
	req, err := http.NewRequest(method, base+path+"?"+qs+"&auth_signature="+mac, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

func pusherAPI(t testing.TB, n *testNode, method, path string, extra url.Values, body any) (int, string) {
	t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	resp, err := pusherHTTP.Do(signedPusher(t, method, "http://"+n.addr, path, extra, b, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// Contract 21: the handshake. An unknown key is answered with
// pusher:error 4001 and the close 4001, an unsupported protocol with 4007;
// the node keeps serving. A Pusher connection counts in
// wsgate_connections{transport="pusher"}.
func TestPusherHandshake(t *testing.T) {
	t.Parallel()
	n := startNode(t, withPusher)
	for _, tc := range []struct {
		path string
		code float64
	}{
		{"/app/wrong-key?protocol=7", protocol.PusherErrAppUnknown},
		{"/app/" + pusherTestKey + "?protocol=5", protocol.PusherErrProtocol},
		{"/app/" + pusherTestKey, protocol.PusherErrProtocol},
	} {
		p, first := n.dialPusher(t, tc.path)
		if first["event"] != protocol.PusherError || pusherErrCode(t, first) != tc.code {
			t.Fatalf("%s: first frame %v, want pusher:error %v", tc.path, first, tc.code)
		}
		if code := p.waitClosed(5 * time.Second); code != int(tc.code) {
			t.Fatalf("%s: closed with %d, want %v", tc.path, code, tc.code)
		}
	}
	p := n.pusher(t)
	p.send(map[string]any{"event": protocol.PusherPing, "data": map[string]any{}})
	p.event(protocol.PusherPong, "")
	p.send("not json")
	if f := p.event(protocol.PusherError, ""); !strings.Contains(fmt.Sprint(f["data"]), "not a JSON object") {
		t.Fatalf("bad frame answered %v", f)
	}
	p.send(map[string]any{"event": protocol.PusherPing})
	p.event(protocol.PusherPong, "")
	if got := counterValue(t, n, "wsgate_connections", "pusher"); got != 1 {
		t.Fatalf("pusher connections %v, want 1", got)
	}
}

// Contract 21: public, private and presence channels; an API publish to
// room X reaches the Pusher subscribers of X with data as a string (a
// non-string data JSON encoded), and wsgate members alike.
func TestPusherChannels(t *testing.T) {
	t.Parallel()
	n := startNode(t, withPusher)
	p := n.pusher(t)
	p.subscribed("lobby", "")
	w := n.connectTok(t, "alice", anyRoom)
	w.send(map[string]any{"type": "join", "id": "j", "room": "lobby"})
	w.expect("reply")
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: protocol.TargetRoom, ID: "lobby"}, Event: "greet", Data: raw(`{"hi":1}`)})
	f := p.event("greet", "lobby")
	if f["data"] != `{"hi":1}` {
		t.Fatalf("data %#v, want the JSON text as a string", f["data"])
	}
	if m := w.expect("message"); m["event"] != "greet" {
		t.Fatalf("wsgate member got %v", m)
	}
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: protocol.TargetRoom, ID: "lobby"}, Event: "s", Data: raw(`"plain"`)})
	if f := p.event("s", "lobby"); f["data"] != "plain" {
		t.Fatalf("string data %#v, want plain", f["data"])
	}

	// private: a bad auth is 4009, a good one subscribes.
	p.send(map[string]any{"event": protocol.PusherSubscribe, "data": map[string]any{"channel": "private-a", "auth": pusherTestKey + ":00"}})
	if f := p.event(protocol.PusherError, "private-a"); pusherErrCode(t, f) != protocol.PusherErrUnauthorized {
		t.Fatalf("bad auth answered %v", f)
	}
	p.subscribed("private-a", "")

	// unsubscribe: no more events.
	p.send(map[string]any{"event": protocol.PusherUnsubscribe, "data": map[string]any{"channel": "lobby"}})
	p.quiet("x")
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: protocol.TargetRoom, ID: "lobby"}, Event: "after", Data: raw(`1`)})
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: protocol.TargetRoom, ID: "private-a"}, Event: "marker", Data: raw(`1`)})
	for {
		f := p.next(5 * time.Second)
		if f["event"] == "after" {
			t.Fatalf("event after unsubscribe: %v", f)
		}
		if f["event"] == "marker" {
			break
		}
	}
}

// Contract 21: client events on private and presence channels reach the
// channel's other subscribers, never the sender; on public channels they
// are refused; beyond 10 a second they get pusher:error 4301.
func TestPusherClientEvents(t *testing.T) {
	t.Parallel()
	n := startNode(t, withPusher)
	a, b := n.pusher(t), n.pusher(t)
	a.subscribed("private-chat", "")
	b.subscribed("private-chat", "")
	a.send(map[string]any{"event": "client-typing", "channel": "private-chat", "data": map[string]any{"who": "a"}})
	f := b.event("client-typing", "private-chat")
	if d := pusherData(t, f); d["who"] != "a" {
		t.Fatalf("client event data %v", f)
	}
	a.quiet("client-typing")

	a.subscribed("open", "")
	a.send(map[string]any{"event": "client-x", "channel": "open", "data": map[string]any{}})
	if f := a.event(protocol.PusherError, "open"); pusherErrCode(t, f) != protocol.PusherErrClientEvent {
		t.Fatalf("client event on a public channel answered %v", f)
	}
	for range 12 {
		a.send(map[string]any{"event": "client-burst", "channel": "private-chat", "data": map[string]any{}})
	}
	if f := a.event(protocol.PusherError, "private-chat"); pusherErrCode(t, f) != protocol.PusherErrClientRate {
		t.Fatalf("client events over the rate answered %v", f)
	}
}

// startPusherPair starts two nodes on one Redis, with extra settings.
func startPusherPair(t *testing.T, prefix string, extra ...func(*config.Gateway)) (*testNode, *testNode) {
	t.Helper()
	srv := redistest.Standalone(t, redistest.Options{})
	var nodes [2]*testNode
	for i := range nodes {
		b := redisBackend(t, srv.URL(), prefix, 0)
		nodes[i] = startNodeWith(t, b, func(c *config.Gateway) {
			withPusher(c)
			c.NodeID = "p" + strconv.Itoa(i)
			for _, f := range extra {
				f(c)
			}
		})
	}
	return nodes[0], nodes[1]
}

// Contract 21: presence channels across two nodes on Redis. The
// subscription_succeeded carries the members (one per user), a user's
// second socket adds no member and its first socket's close removes none;
// member_removed comes when the user's last socket leaves. The HTTP API
// lists the channel, its counts and its users.
func TestPusherPresenceAcrossNodes(t *testing.T) {
	t.Parallel()
	n1, n2 := startPusherPair(t, "pusherpres")
	alice := n1.pusher(t)
	s := alice.subscribed("presence-room", `{"user_id":"alice","user_info":{"name":"Alice"}}`)
	d := pusherData(t, s)["presence"].(map[string]any)
	if d["count"] != 1.0 || fmt.Sprint(d["ids"]) != "[alice]" {
		t.Fatalf("first member's presence %v", d)
	}
	bob1 := n2.pusher(t)
	s = bob1.subscribed("presence-room", `{"user_id":"bob","user_info":null}`)
	d = pusherData(t, s)["presence"].(map[string]any)
	if d["count"] != 2.0 || fmt.Sprint(d["ids"]) != "[alice bob]" || fmt.Sprint(d["hash"].(map[string]any)["alice"]) != "map[name:Alice]" {
		t.Fatalf("second member's presence %v", d)
	}
	added := alice.event(protocol.PusherMemberAdded, "presence-room")
	if m := pusherData(t, added); m["user_id"] != "bob" {
		t.Fatalf("member_added %v", m)
	}
	bob2 := n1.pusher(t)
	bob2.subscribed("presence-room", `{"user_id":"bob"}`)
	alice.quiet(protocol.PusherMemberAdded)

	st, body := pusherAPI(t, n2, "GET", "/apps/"+pusherTestApp+"/channels/presence-room", url.Values{"info": {"user_count,subscription_count"}}, nil)
	if st != 200 || !strings.Contains(body, `"user_count":2`) || !strings.Contains(body, `"subscription_count":3`) {
		t.Fatalf("channel info %d %s", st, body)
	}
	st, body = pusherAPI(t, n1, "GET", "/apps/"+pusherTestApp+"/channels/presence-room/users", nil, nil)
	if st != 200 || body != `{"users":[{"id":"alice"},{"id":"bob"}]}`+"\n" && body != `{"users":[{"id":"bob"},{"id":"alice"}]}`+"\n" {
		t.Fatalf("users %d %s", st, body)
	}
	st, body = pusherAPI(t, n1, "GET", "/apps/"+pusherTestApp+"/channels", url.Values{"filter_by_prefix": {"presence-"}, "info": {"user_count"}}, nil)
	if st != 200 || body != `{"channels":{"presence-room":{"user_count":2}}}`+"\n" {
		t.Fatalf("channels %d %s", st, body)
	}

	bob1.conn.Close()
	alice.quiet(protocol.PusherMemberRemoved)
	bob2.conn.Close()
	removed := alice.event(protocol.PusherMemberRemoved, "presence-room")
	if m := pusherData(t, removed); m["user_id"] != "bob" {
		t.Fatalf("member_removed %v", m)
	}
}

// Contract 21: the HTTP API publishes with Pusher's query signature;
// socket_id spares that connection; a wrong signature, an old timestamp,
// a wrong body_md5 or another app id are refused and change nothing.
func TestPusherHTTPAPI(t *testing.T) {
	t.Parallel()
	n := startNode(t, withPusher)
	a, b := n.pusher(t), n.pusher(t)
	a.subscribed("news", "")
	b.subscribed("news", "")
	path := "/apps/" + pusherTestApp + "/events"
	if st, body := pusherAPI(t, n, "POST", path, nil, map[string]any{"name": "e1", "channels": []string{"news"}, "data": `{"n":1}`, "socket_id": a.socketID}); st != 200 {
		t.Fatalf("events: %d %s", st, body)
	}
	if f := b.event("e1", "news"); f["data"] != `{"n":1}` {
		t.Fatalf("b got %v", f)
	}
	a.quiet("e1")
	batch := map[string]any{"batch": []map[string]any{{"channel": "news", "name": "b1", "data": "x"}, {"channel": "news", "name": "b2", "data": "y"}}}
	if st, body := pusherAPI(t, n, "POST", "/apps/"+pusherTestApp+"/batch_events", nil, batch); st != 200 {
		t.Fatalf("batch_events: %d %s", st, body)
	}
	a.event("b1", "news")
	a.event("b2", "news")

	body, _ := json.Marshal(map[string]any{"name": "bad", "channels": []string{"news"}, "data": "z"})
	for name, req := range map[string]*http.Request{
		"old timestamp": signedPusher(t, "POST", "http://"+n.addr, path, nil, body, time.Now().Add(-11*time.Minute)),
		"wrong path":    signedPusher(t, "POST", "http://"+n.addr, "/apps/"+pusherTestApp+"/batch_events", nil, body, time.Now()),
	} {
		if name == "wrong path" {
			req.URL.Path = path
		}
		resp, err := pusherHTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("%s: %d, want 401", name, resp.StatusCode)
		}
	}
	req := signedPusher(t, "POST", "http://"+n.addr, path, nil, body, time.Now())
	req.Body = io.NopCloser(strings.NewReader(strings.Replace(string(body), `"z"`, `"w"`, 1)))
	resp, err := pusherHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("body changed after signing: %d, want 401", resp.StatusCode)
	}
	if st, _ := pusherAPI(t, n, "POST", "/apps/other/events", nil, map[string]any{"name": "x", "channel": "news", "data": ""}); st != 404 {
		t.Fatalf("other app id: %d, want 404", st)
	}
	if st, _ := pusherAPI(t, n, "POST", path, nil, map[string]any{"name": "x", "channel": "bad channel", "data": ""}); st != 400 {
		t.Fatalf("bad channel: %d, want 400", st)
	}
	a.quiet("bad")
}

func hmacHex(secret, s string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(s))
	return hex.EncodeToString(mac.Sum(nil))
}

// pusherHTTP keeps no connection after a test (goleak).
var pusherHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// GET /app/{key} through net/http (servePusher): a TLS 1.2 client, which
// the event loop leaves to net/http, speaks the Pusher protocol there as
// on the event loop: connection_established, a private subscription, a
// publish as a Pusher event, ping and pong; a wrong key or protocol gets
// its pusher:error and close code on this route too.
func TestPusherNetHTTPRoute(t *testing.T) {
	t.Parallel()
	n := tlsNode(t, withPusher)
	d := ws.Dialer{TLSConfig: &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}, Timeout: 5 * time.Second}
	for _, tc := range []struct {
		path string
		code float64
	}{
		{"/app/wrong-key?protocol=7", protocol.PusherErrAppUnknown},
		{"/app/" + pusherTestKey + "?protocol=6", protocol.PusherErrProtocol},
	} {
		p, first := dialPusherWith(t, d, "wss://"+n.addr+tc.path)
		if first["event"] != protocol.PusherError || pusherErrCode(t, first) != tc.code {
			t.Fatalf("%s: first frame %v, want pusher:error %v", tc.path, first, tc.code)
		}
		if code := p.waitClosed(5 * time.Second); code != int(tc.code) {
			t.Fatalf("%s: closed with %d, want %v", tc.path, code, tc.code)
		}
	}

	p := pusherOn(t, d, "wss://"+n.addr)
	if conns := n.hub.userConns(p.socketID); len(conns) != 1 || conns[0].tp != tpPusher || conns[0].tlsc == nil || conns[0].tr != nil {
		t.Fatalf("the TLS 1.2 Pusher connection is not a Pusher connection on the goroutine path: %d conns", len(conns))
	}
	if f := p.subscribed("private-desk", ""); f["channel"] != "private-desk" {
		t.Fatalf("subscription_succeeded %v", f)
	}
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: protocol.TargetRoom, ID: "private-desk"}, Event: "note", Data: raw(`{"n":1}`)})
	if f := p.event("note", "private-desk"); f["data"] != `{"n":1}` {
		t.Fatalf("event on the net/http route %v, want data as the string {\"n\":1}", f)
	}
	p.send(map[string]any{"event": protocol.PusherPing, "data": map[string]any{}})
	p.event(protocol.PusherPong, "")
	if got := counterValue(t, n, "wsgate_connections", "pusher"); got != 1 {
		t.Fatalf("pusher connections %v, want 1", got)
	}
}

// A drain that has another node to send its clients to closes a Pusher
// connection with 4200, which makes pusher-js reconnect at once, where a
// wsgate client gets 4001 with its redirect (pusher-js would take a
// 4000-4099 code as "do not reconnect").
func TestPusherDrainCloseCode(t *testing.T) {
	t.Parallel()
	n, _ := startPusherPair(t, "pusher-drain-")
	p := n.pusher(t)
	p.subscribed("news", "")
	w := n.connect(t, "wsgate-user", "")
	go n.Drain("test")
	if code := p.waitClosed(10 * time.Second); code != protocol.PusherErrReconnect {
		t.Fatalf("a drained Pusher connection closed with %d, want %d", code, protocol.PusherErrReconnect)
	}
	if code := w.waitClosed(10 * time.Second); code != protocol.CloseDraining {
		t.Fatalf("a drained wsgate connection closed with %d, want %d", code, protocol.CloseDraining)
	}
}

// A ping sent behind other frames is answered behind them: subscribe and
// ping in one write (the subscribe waits for the backend on the
// connection's inbound queue) come back as subscription_succeeded, then
// pong. Answered at once, the pong overtook the subscribe's answer.
func TestPusherPingAnsweredInOrder(t *testing.T) {
	n := startNodeWith(t, cluster.NewMemory(), withPusher)
	p := n.pusher(t)
	var buf bytes.Buffer
	for _, v := range []map[string]any{
		{"event": protocol.PusherSubscribe, "data": map[string]any{"channel": "ordered"}},
		{"event": protocol.PusherPing, "data": map[string]any{}},
	} {
		b, _ := json.Marshal(v)
		f := ws.MaskFrameInPlace(ws.NewTextFrame(b))
		if err := ws.WriteFrame(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	p.wmu.Lock()
	_, err := p.conn.Write(buf.Bytes())
	p.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	var order []any
	for len(order) < 2 {
		f := p.next(5 * time.Second)
		if e := f["event"]; e == protocol.PusherSubscriptionSucceeded || e == protocol.PusherPong {
			order = append(order, e)
		}
	}
	if order[0] != protocol.PusherSubscriptionSucceeded {
		t.Fatalf("answers in the order %v, want the subscribe's before the pong", order)
	}
}

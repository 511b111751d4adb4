package gateway

import (
	"connectrpc.com/connect"

	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	wsgatev1 "github.com/wsgate/wsgate/proto/wsgate/v1"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/upstream"
)

// roomsFile writes a rooms file and returns its path.
func roomsFile(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rooms.yml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const meetRooms = "rooms:\n  - pattern: \"meet:*\"\n    presence: true\n    join_leave: true\n"

func withRooms(body string) func(*testing.T) func(*config.Gateway) {
	return func(t *testing.T) func(*config.Gateway) {
		p := roomsFile(t, body)
		return func(c *config.Gateway) { c.RoomsFile = p }
	}
}

func joinRoom(t testing.TB, c *wsClient, id, room string) {
	t.Helper()
	c.send(map[string]any{"type": "join", "id": id, "room": room})
	for {
		f := c.next(5 * time.Second)
		if f["type"] == "reply" && f["id"] == id {
			if f["ok"] != true {
				t.Fatalf("join %s refused: %v", room, f)
			}
			return
		}
	}
}

// member connects user with a token allowing rooms meet:*.
func (n *testNode) member(t testing.TB, user string) *wsClient {
	t.Helper()
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, user, map[string]any{"rooms": []string{"meet:*"}})}}, true)
	if w := c.next(5 * time.Second); w["type"] != "welcome" {
		t.Fatalf("first frame %v", w)
	}
	return c
}

func TestRoomPresenceJoinedLeft(t *testing.T) {
	n := startNode(t, withRooms(meetRooms)(t))
	a := n.member(t, "a")
	b := n.member(t, "b")
	joinRoom(t, a, "1", "meet:x")
	joinRoom(t, b, "2", "meet:x")
	f := a.expect("joined")
	if f["user"] != "b" || f["room"] != "meet:x" {
		t.Fatalf("joined %v", f)
	}
	joinRoom(t, a, "3", "meet:y")
	st, body := apiCall(t, n, "GET", "/api/v1/rooms?prefix=meet:&limit=1", "k", "")
	rooms, _ := body["rooms"].([]any)
	if st != 200 || len(rooms) != 1 || body["cursor"] != "meet:x" {
		t.Fatalf("room list: %d %v", st, body)
	}
	if r := rooms[0].(map[string]any); r["room"] != "meet:x" || r["users"] != 2.0 || r["connections"] != 2.0 {
		t.Fatalf("first room %v", r)
	}
	eventually(t, 5*time.Second, "meet:y listed", func() bool {
		_, body := apiCall(t, n, "GET", "/api/v1/rooms?prefix=meet:&cursor=meet:x", "k", "")
		rooms, _ := body["rooms"].([]any)
		return len(rooms) == 1 && rooms[0].(map[string]any)["room"] == "meet:y"
	})
}

// request sends a frame with id and returns its reply, skipping other
// frames (kept in skipped).
func frameReq(t testing.TB, c *wsClient, f map[string]any) map[string]any {
	t.Helper()
	c.send(f)
	for {
		r := c.next(5 * time.Second)
		if r["type"] == "reply" && r["id"] == f["id"] {
			return r
		}
	}
}

func refusedCode(r map[string]any) string {
	if r["ok"] == true {
		return ""
	}
	e, _ := r["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// noFrameOf checks that, up to the answer of a ping, c got no frame of
// the given type and event.
func noFrameOf(t *testing.T, c *wsClient, typ, event string) {
	t.Helper()
	c.send(map[string]any{"type": "ping", "id": "p"})
	for {
		f := c.next(5 * time.Second)
		if f["type"] == "pong" {
			return
		}
		if f["type"] == typ && (event == "" || f["event"] == event) {
			t.Fatalf("unexpected frame %v", f)
		}
	}
}

func TestRoomScopeConnection(t *testing.T) {
	n := startNode(t, withRooms("rooms:\n  - pattern: \"tab:*\"\n    scope: connection\n    presence: true\n")(t))
	tok := token(t, "u", map[string]any{"rooms": []string{"tab:*"}})
	dial := func() *wsClient {
		c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + tok}}, true)
		c.expect("welcome")
		return c
	}
	a, b := dial(), dial()
	if r := frameReq(t, a, map[string]any{"type": "join", "id": "1", "room": "tab:1"}); r["ok"] != true {
		t.Fatalf("join: %v", r)
	}
	pub(t, n, api.PublishRequest{Target: roomTarget("tab:1"), Event: "hello"})
	if f := a.expect("message"); f["event"] != "hello" {
		t.Fatalf("the joined connection got %v", f)
	}
	noFrameOf(t, b, "message", "hello") // the user's other connection did not join
	if m, _ := n.RoomMembers(context.Background(), "tab:1"); len(m) != 0 {
		t.Fatalf("a connection's join stored a membership of the user: %v", m)
	}
	eventually(t, 5*time.Second, "the connection in the room's presence", func() bool {
		p, err := n.ReadRoomPresence(context.Background(), "tab:1", "", 10)
		return err == nil && p.Connections == 1
	})
	a.conn.Close()
	eventually(t, 5*time.Second, "the closed connection out of presence", func() bool {
		p, err := n.ReadRoomPresence(context.Background(), "tab:1", "", 10)
		return err == nil && p.Connections == 0
	})
	pub(t, n, api.PublishRequest{Target: roomTarget("tab:1"), Event: "after"})
	noFrameOf(t, b, "message", "after")
}

func TestRoomPublishModesEchoAndExcept(t *testing.T) {
	n := startNode(t, withRooms("rooms:\n  - pattern: \"m:*\"\n    publish: members\n    echo: false\n  - pattern: \"ro:*\"\n    publish: none\n")(t))
	tok := func(u string) string {
		return token(t, u, map[string]any{"rooms": []string{"m:*", "ro:*"}, "pub": []string{"room:*"}})
	}
	dial := func(u string) *wsClient {
		c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + tok(u)}}, true)
		c.expect("welcome")
		return c
	}
	a, b := dial("a"), dial("b")
	noClaim := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "c", map[string]any{"rooms": []string{"m:*"}})}}, true)
	noClaim.expect("welcome")
	for i, c := range []*wsClient{a, b, noClaim} {
		if r := frameReq(t, c, map[string]any{"type": "join", "id": "j", "room": "m:1"}); r["ok"] != true {
			t.Fatalf("join %d: %v", i, r)
		}
	}
	// A member without a pub claim may publish (members); echo off: not back to itself.
	noClaim.send(map[string]any{"type": "publish", "id": "p1", "target": map[string]any{"type": "room", "id": "m:1"}, "event": "say"})
	a.expect("message")
	b.expect("message")
	noClaim.send(map[string]any{"type": "ping", "id": "p"})
	for replied := false; ; {
		f := noClaim.next(5 * time.Second)
		if f["type"] == "reply" && f["id"] == "p1" {
			if f["ok"] != true {
				t.Fatalf("member publish refused: %v", f)
			}
			replied = true
		}
		if f["type"] == "message" {
			t.Fatalf("echo off, but the sender got its message back: %v", f)
		}
		if f["type"] == "pong" {
			if !replied {
				t.Fatal("no reply to the publish")
			}
			break
		}
	}
	// A non-member with a pub claim may not.
	outsider := dial("d")
	if r := frameReq(t, outsider, map[string]any{"type": "publish", "id": "p2", "target": map[string]any{"type": "room", "id": "m:1"}, "event": "x"}); refusedCode(r) != "forbidden" {
		t.Fatalf("non-member publish: %v", r)
	}
	if r := frameReq(t, a, map[string]any{"type": "publish", "id": "p3", "target": map[string]any{"type": "room", "id": "ro:1"}, "event": "x"}); refusedCode(r) != "forbidden" {
		t.Fatalf("publish to a publish: none room: %v", r)
	}
	// except on an API publish.
	var aID string
	n.hub.mu.RLock()
	for _, c := range n.hub.users["a"].conns {
		aID = c.connID()
	}
	n.hub.mu.RUnlock()
	pub(t, n, api.PublishRequest{Target: roomTarget("m:1"), Event: "api", Except: aID})
	b.expect("message")
	noFrameOf(t, a, "message", "api")
}

func TestRoomTokenMaxMembersAndJoinProxy(t *testing.T) {
	var asked atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		var body struct {
			User, Room string
			Data       json.RawMessage
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		switch string(body.Data) {
		case `"let me"`:
			_, _ = w.Write([]byte(`{"info":{"seat":7}}`))
		case `"broken"`:
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	t.Cleanup(proxy.Close)
	n := startNode(t, withRooms("rooms:\n  - pattern: \"vip:*\"\n    presence: true\n    join_proxy: "+proxy.URL+"\n  - pattern: \"small:*\"\n    presence: true\n    max_members: 1\n  - pattern: \"priv:*\"\n")(t))
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "u", nil)}}, true)
	c.expect("welcome")
	if r := frameReq(t, c, map[string]any{"type": "join", "id": "1", "room": "priv:1"}); refusedCode(r) != "forbidden" {
		t.Fatalf("join without a claim: %v", r)
	}
	for _, bad := range []string{token(t, "other", map[string]any{"room": "priv:1"}), token(t, "u", map[string]any{"room": "priv:2"}), "junk"} {
		if r := frameReq(t, c, map[string]any{"type": "join", "id": "2", "room": "priv:1", "token": bad}); refusedCode(r) != "forbidden" {
			t.Fatalf("join with a wrong room token: %v", r)
		}
	}
	if m, _ := n.RoomMembers(context.Background(), "priv:1"); len(m) != 0 {
		t.Fatalf("refused joins registered %v", m)
	}
	if r := frameReq(t, c, map[string]any{"type": "join", "id": "3", "room": "priv:1", "token": token(t, "u", map[string]any{"room": "priv:1"})}); r["ok"] != true {
		t.Fatalf("join with its room token: %v", r)
	}
	// The join proxy decides each join, and its info is the presence's.
	for data, want := range map[string]string{`"no"`: "forbidden", `"broken"`: "unavailable"} {
		if r := frameReq(t, c, map[string]any{"type": "join", "id": "4", "room": "vip:1", "data": json.RawMessage(data)}); refusedCode(r) != want {
			t.Fatalf("join proxy answering for %s: %v, want %s", data, r, want)
		}
	}
	if r := frameReq(t, c, map[string]any{"type": "join", "id": "5", "room": "vip:1", "data": "let me"}); r["ok"] != true {
		t.Fatalf("join allowed by the proxy: %v", r)
	}
	if asked.Load() != 3 {
		t.Fatalf("the join proxy was asked %d times, want 3 (no caching)", asked.Load())
	}
	eventually(t, 5*time.Second, "the proxy's info in presence", func() bool {
		p, err := n.ReadRoomPresence(context.Background(), "vip:1", "", 10)
		return err == nil && len(p.Clients) == 1 && string(p.Clients[0].Info) == `{"seat":7}`
	})
	// max_members 1: a second user is refused "full".
	small := func(u string) *wsClient {
		x := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, u, map[string]any{"rooms": []string{"small:*"}})}}, true)
		x.expect("welcome")
		return x
	}
	s1, s2 := small("s1"), small("s2")
	if r := frameReq(t, s1, map[string]any{"type": "join", "id": "6", "room": "small:1"}); r["ok"] != true {
		t.Fatalf("first join: %v", r)
	}
	eventually(t, 5*time.Second, "s1 present", func() bool {
		p, err := n.ReadRoomPresence(context.Background(), "small:1", "", 0)
		return err == nil && p.Users == 1
	})
	if r := frameReq(t, s2, map[string]any{"type": "join", "id": "7", "room": "small:1"}); refusedCode(r) != "full" {
		t.Fatalf("join beyond max_members: %v", r)
	}
}

// A join frame is answered once the room's presence has the connection,
// a leave frame once it no longer has it: an API read right after the
// answer agrees.
func TestRoomPresenceAtTheAnswer(t *testing.T) {
	n := startNode(t, withRooms("rooms:\n  - pattern: \"meet:*\"\n    presence: true\n  - pattern: \"tab:*\"\n    presence: true\n    scope: connection\n")(t))
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "u", map[string]any{"rooms": []string{"meet:*", "tab:*"}})}}, true)
	c.expect("welcome")
	for i := range 20 {
		for _, room := range []string{"meet:1", "tab:1"} {
			if r := frameReq(t, c, map[string]any{"type": "join", "id": "j" + room, "room": room}); r["ok"] != true {
				t.Fatalf("join: %v", r)
			}
			if p, err := n.ReadRoomPresence(context.Background(), room, "", 0); err != nil || p.Connections != 1 {
				t.Fatalf("round %d: %s's presence at the join's answer: %+v, %v", i, room, p, err)
			}
			if r := frameReq(t, c, map[string]any{"type": "leave", "id": "l" + room, "room": room}); r["ok"] != true {
				t.Fatalf("leave: %v", r)
			}
			if p, err := n.ReadRoomPresence(context.Background(), room, "", 0); err != nil || p.Connections != 0 {
				t.Fatalf("round %d: %s's presence at the leave's answer: %+v, %v", i, room, p, err)
			}
		}
	}
}

// occupied when a room's presence goes from empty to one connection, and
// vacated back, once each, whatever the number of connections between.
func TestRoomOccupiedVacated(t *testing.T) {
	sink := newRecordSink()
	rf := roomsFile(t, "rooms:\n  - pattern: \"meet:*\"\n    presence: true\n")
	n := startNodeWith(t, cluster.NewMemory(), func(c *config.Gateway) {
		c.Events = []string{"occupied", "vacated"}
		c.RoomsFile = rf
	}, enable(t, sink))
	a, b := n.member(t, "a"), n.member(t, "b")
	joinRoom(t, a, "1", "meet:1")
	joinRoom(t, b, "2", "meet:1")
	frameReq(t, a, map[string]any{"type": "leave", "id": "3", "room": "meet:1"})
	frameReq(t, b, map[string]any{"type": "leave", "id": "4", "room": "meet:1"})
	recs := sink.wait(t, "occupied then vacated", func(r []upstream.Record) bool { return len(r) >= 2 })
	if len(recs) != 2 || recs[0].Type != "occupied" || recs[1].Type != "vacated" || recs[0].Room != "meet:1" || recs[1].Room != "meet:1" {
		t.Fatalf("records %+v, want occupied and vacated of meet:1", recs)
	}
}

// A batch's joined followed by its left is transient: a member that did
// not know of the connection is told neither, one that did is told left.
func TestPresenceCoalescing(t *testing.T) {
	evs := []presEvent{
		{conn: "a", join: true}, {conn: "b", join: true}, {conn: "a"}, {conn: "c"}, {conn: "b"}, {conn: "b", join: true},
	}
	markTransient(evs)
	var got []string
	for _, ev := range evs {
		got = append(got, fmt.Sprintf("%s:%v:%v", ev.conn, ev.join, ev.transient))
	}
	want := "[a:true:true b:true:true a:false:false c:false:false b:false:false b:true:false]"
	if fmt.Sprint(got) != want {
		t.Fatalf("marked %v, want %v", got, want)
	}
	n := startNode(t, nil)
	m := n.connect(t, "m", "")
	var c *conn
	for _, x := range n.hub.all() {
		c = x
	}
	cp := &connPres{ready: true, view: map[string]string{"c": "carol"}}
	c.mu.Lock()
	for _, ev := range evs {
		ev.room, ev.user = "r", "u-"+ev.conn
		c.presenceEventLocked(cp, ev)
	}
	c.mu.Unlock()
	var frames []string
	m.send(map[string]any{"type": "ping", "id": "p"})
	for {
		f := m.next(5 * time.Second)
		if f["type"] == "pong" {
			break
		}
		frames = append(frames, fmt.Sprint(f["type"], ":", f["conn_id"]))
	}
	if fmt.Sprint(frames) != "[left:c joined:b]" || fmt.Sprint(cp.view) != "map[b:u-b]" {
		t.Fatalf("told %v, view %v; want [left:c joined:b] and b in the view", frames, cp.view)
	}
}

// The room list and a room's presence over gRPC, as over JSON.
func TestRoomPresenceGRPC(t *testing.T) {
	n := startNode(t, withRooms(meetRooms)(t))
	m := n.member(t, "ann")
	joinRoom(t, m, "1", "meet:1")
	tr := newTransport(t, n, "grpc").(grpcTransport)
	ctx, cancel := grpcCtx()
	defer cancel()
	rooms, err := tr.c.ListRooms(ctx, request("k", &wsgatev1.ListRoomsRequest{Prefix: "meet:"}, nil))
	if err != nil || len(rooms.Msg.GetRooms()) != 1 || rooms.Msg.GetRooms()[0].GetRoom() != "meet:1" || rooms.Msg.GetRooms()[0].GetConnections() != 1 {
		t.Fatalf("ListRooms: %v, %v", rooms, err)
	}
	p, err := tr.c.GetRoomPresence(ctx, request("k", &wsgatev1.GetRoomPresenceRequest{Room: "meet:1"}, nil))
	if err != nil || p.Msg.GetUsers() != 1 || len(p.Msg.GetClients()) != 1 || p.Msg.GetClients()[0].GetUser() != "ann" {
		t.Fatalf("GetRoomPresence: %v, %v", p, err)
	}
	p, err = tr.c.GetRoomPresence(ctx, request("k", &wsgatev1.GetRoomPresenceRequest{Room: "meet:1", CountsOnly: true}, nil))
	if err != nil || p.Msg.GetConnections() != 1 || len(p.Msg.GetClients()) != 0 {
		t.Fatalf("GetRoomPresence counts only: %v, %v", p, err)
	}
	if _, err := tr.c.GetRoomPresence(ctx, request("k", &wsgatev1.GetRoomPresenceRequest{Room: "plain"}, nil)); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a room without presence: %v, want not found", err)
	}
}

// A connection entering a joined/left room larger than its send queue
// gets a joined for each member without being taken for a slow consumer.
func TestRoomSnapshotLargerThanTheSendQueue(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) {
		c.SendQueue = 4
		c.RoomsFile = roomsFile(t, meetRooms)
	})
	for i := range 20 {
		if status, _ := apiCall(t, n, "PUT", fmt.Sprintf("/api/v1/rooms/meet:big/members/m%d", i), "k", ""); status != 204 {
			t.Fatalf("member %d: %d", i, status)
		}
	}
	// The members come at once: a member is told of many others in one
	// presence batch, more than its queue holds before the writer runs.
	var members []*wsClient
	for i := range 20 {
		members = append(members, n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, fmt.Sprintf("m%d", i), nil)}}, true))
	}
	for _, m := range members {
		if w := m.next(5 * time.Second); w["type"] != "welcome" {
			t.Fatalf("first frame %v", w)
		}
	}
	eventually(t, 10*time.Second, "20 present", func() bool {
		p, err := n.ReadRoomPresence(context.Background(), "meet:big", "", 0)
		return err == nil && p.Connections == 20
	})
	c := n.member(t, "newcomer")
	c.send(map[string]any{"type": "join", "id": "1", "room": "meet:big"})
	seen, replied := map[any]bool{}, false
	for len(seen) < 20 || !replied {
		f := c.next(5 * time.Second)
		switch f["type"] {
		case "joined":
			seen[f["conn_id"]] = true
		case "reply":
			if f["ok"] != true {
				t.Fatalf("join: %v", f)
			}
			replied = true
		}
	}
}

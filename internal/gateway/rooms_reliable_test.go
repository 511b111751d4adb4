package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

func roomTarget(room string) protocol.Target { return protocol.Target{Type: "room", ID: room} }

// reliableRoom publishes message i to room reliably and returns its seq.
func reliableRoom(t testing.TB, n *testNode, room string, i int) int64 {
	t.Helper()
	return pub(t, n, api.PublishRequest{Target: roomTarget(room), Event: "r", Data: raw(fmt.Sprint(i)), Reliable: true}).Seq
}

func join(t testing.TB, n *testNode, room, user string) {
	t.Helper()
	if err := n.JoinRoom(context.Background(), room, user); err != nil {
		t.Fatal(err)
	}
}

// roomSeqsOf reads message frames of room until seq upTo, checking that
// they carry the room target and come in strict seq order; gaps and
// other frames are returned by kind in order (gap as "gap:FROM-TO").
func roomSeqsOf(t *testing.T, c *wsClient, room string, upTo int64) (seqs []int64, events []string) {
	t.Helper()
	for {
		f := c.next(5 * time.Second)
		switch f["type"] {
		case "gap":
			tg, _ := f["target"].(map[string]any)
			if tg["type"] != "room" || tg["id"] != room {
				t.Fatalf("gap without the room's target: %v", f)
			}
			events = append(events, fmt.Sprintf("gap:%v-%v", f["from"], f["to"]))
			if to := int64(f["to"].(float64)); to >= upTo {
				return seqs, events
			}
		case "message":
			tg, _ := f["target"].(map[string]any)
			s, ok := f["seq"].(float64)
			if !ok || tg["id"] != room {
				events = append(events, fmt.Sprintf("plain:%v", f["data"]))
				continue
			}
			if tg["type"] != "room" {
				t.Fatalf("reliable room message with target %v", tg)
			}
			if len(seqs) > 0 && int64(s) <= seqs[len(seqs)-1] {
				t.Fatalf("room seq %v after %v: out of order or duplicate", s, seqs)
			}
			seqs = append(seqs, int64(s))
			events = append(events, fmt.Sprintf("m:%v", s))
			if int64(s) >= upTo {
				return seqs, events
			}
		default:
			events = append(events, fmt.Sprint(f["type"]))
		}
	}
}

// Live reliable room messages carry the room's seq and target; plain
// ones to the same room carry none; the welcome lists the reliable rooms
// of the user with their seqs (not the others); room_since resumes after
// the given seq, then live ones follow without a duplicate; a room_since
// for a room the user is not a member of is ignored.
func TestReliableRoomLiveWelcomeAndResume(t *testing.T) {
	n := startNode(t, nil)
	join(t, n, "lobby", "alice")
	join(t, n, "plain", "alice")
	c := n.connect(t, "alice", "")
	if got := reliableRoom(t, n, "lobby", 1); got != 1 {
		t.Fatalf("first reliable room publish: seq %d, want 1", got)
	}
	pub(t, n, api.PublishRequest{Target: roomTarget("lobby"), Event: "p", Data: raw(`"plain"`)})
	if seqs, ev := roomSeqsOf(t, c, "lobby", 1); len(seqs) != 1 {
		t.Fatalf("live: %v", ev)
	}
	if f := c.expect("message"); f["seq"] != nil || f["data"] != "plain" {
		t.Fatalf("a plain message to a reliable room: %v, want no seq", f)
	}
	// Not a member of "other": its room_since is ignored.
	reliableRoom(t, n, "other", 1)
	for i := 2; i <= 4; i++ {
		reliableRoom(t, n, "lobby", i)
	}
	c2 := n.dial(t, "?room_since=lobby:1&room_since=other:0", http.Header{"Authorization": {"Bearer " + token(t, "alice", nil)}}, true)
	w := c2.next(5 * time.Second)
	rooms, _ := w["rooms"].(map[string]any)
	if w["type"] != "welcome" || len(rooms) != 1 || rooms["lobby"] != float64(4) {
		t.Fatalf("welcome %v, want rooms {lobby:4} (plain and other are not listed)", w)
	}
	reliableRoom(t, n, "lobby", 5)
	if seqs, ev := roomSeqsOf(t, c2, "lobby", 5); fmt.Sprint(seqs) != "[2 3 4 5]" {
		t.Fatalf("resume from 1 then live: %v", ev)
	}
	c2.send(`{"type":"ping"}`)
	if f := c2.expect("pong"); f == nil {
		t.Fatal("no pong")
	}
	select {
	case f := <-c2.frames:
		t.Fatalf("unexpected frame after the resume: %v", f)
	default:
	}
}

// A room whose history was trimmed gives exactly one gap, with the room's
// target, for what is gone after room_since, then the kept messages; the
// history API reads the same history.
func TestReliableRoomTrimmedGivesOneGap(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.RoomHistoryLimit = 3 })
	join(t, n, "news", "bob")
	for i := 1; i <= 7; i++ {
		reliableRoom(t, n, "news", i)
	}
	var m dto.Metric
	if err := n.metrics.RoomHistory.Write(&m); err != nil || m.GetCounter().GetValue() != 7 {
		got := m.GetCounter().GetValue()
		t.Errorf("wsgate_room_history_messages_total = %v, want 7", got)
	}
	c := n.connect(t, "bob", "?room_since=news:2")
	seqs, ev := roomSeqsOf(t, c, "news", 7)
	if strings.Join(ev, " ") != "gap:3-4 m:5 m:6 m:7" || len(seqs) != 3 {
		t.Fatalf("resume after trim: %v, want one gap 3-4 then 5 6 7", ev)
	}

	req, _ := http.NewRequest("GET", "http://"+n.addr+"/api/v1/rooms/news/history?since=4&limit=2", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var h struct {
		Seq      int64              `json:"seq"`
		Messages []protocol.Message `json:"messages"`
	}
	if err := json.Unmarshal(body, &h); err != nil || resp.StatusCode != 200 {
		t.Fatalf("history: %d %s", resp.StatusCode, body)
	}
	if h.Seq != 7 || len(h.Messages) != 2 || h.Messages[0].Seq != 5 || h.Messages[1].Seq != 6 || h.Messages[0].Target != roomTarget("news") || string(h.Messages[0].Data) != "5" {
		t.Fatalf("history since 4 limit 2: %s", body)
	}
	for _, q := range []string{"since=-1", "limit=0", "limit=1001", "since=x"} {
		req, _ := http.NewRequest("GET", "http://"+n.addr+"/api/v1/rooms/news/history?"+q, nil)
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("history?%s: %d, want 400", q, resp.StatusCode)
		}
	}
}

// A join frame with since replays the room's kept messages above since to
// this connection before its reply.
func TestJoinSinceReplaysBeforeTheReply(t *testing.T) {
	n := startNode(t, nil)
	for i := 1; i <= 3; i++ {
		reliableRoom(t, n, "team", i)
	}
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "carl", map[string]any{"rooms": []string{"team"}})}}, true)
	c.expect("welcome")
	c.send(`{"type":"join","id":"j1","room":"team","since":1}`)
	var ev []string
	for len(ev) < 3 {
		f := c.next(5 * time.Second)
		if f["type"] == "reply" {
			ev = append(ev, fmt.Sprintf("reply:%v:%v", f["id"], f["ok"]))
			continue
		}
		ev = append(ev, fmt.Sprintf("%v:%v", f["type"], f["seq"]))
	}
	if strings.Join(ev, " ") != "message:2 message:3 reply:j1:true" {
		t.Fatalf("join since 1: %v, want messages 2, 3 then the reply", ev)
	}
	reliableRoom(t, n, "team", 4)
	if seqs, ev := roomSeqsOf(t, c, "team", 4); fmt.Sprint(seqs) != "[4]" {
		t.Fatalf("live after the join: %v", ev)
	}
}

// Backpressure never discards a reliable room message, whatever its
// class: a member that stalls while they pile up, then reads, gets every
// seq exactly once, in order, without holes, resuming with room_since
// after a 4008.
func TestReliableRoomSurvivesBackpressureEveryClass(t *testing.T) {
	const total = 120
	payload := `"` + strings.Repeat("x", 60000) + `"`
	for _, cl := range []string{"realtime", "chat", "notify"} {
		for _, batch := range []bool{false, true} {
			name := cl + "/single"
			if batch {
				name = cl + "/batch"
			}
			t.Run(name, func(t *testing.T) {
				n := startNode(t, func(c *config.Gateway) { c.SendQueue = 16; c.RoomHistoryLimit = 1000 })
				user, room := "stall-"+cl, "room-"+cl
				join(t, n, room, user)
				c := dialRaw(t, n.addr, user, "")
				eventually(t, 5*time.Second, "connected", func() bool { return n.hub.count() == 1 })
				if batch {
					for i := 0; i < total; i += 40 {
						var msgs []json.RawMessage
						for j := i; j < i+40; j++ {
							msgs = append(msgs, json.RawMessage(fmt.Sprintf(`{"target":{"type":"room","id":%q},"event":"e","data":%s,"reliable":true,"class":%q}`, room, payload, cl)))
						}
						for k, r := range n.publishBatch(context.Background(), msgs, "") {
							if res, ok := r.(api.PublishResult); !ok || res.Seq != int64(i+k+1) {
								t.Fatalf("batch message %d: %v", i+k, r)
							}
						}
					}
				} else {
					for i := 0; i < total; i++ {
						pub(t, n, api.PublishRequest{Target: roomTarget(room), Event: "e", Data: raw(payload), Reliable: true, Class: cl})
					}
				}
				got, resumes := receiveAllResuming(t, n, c, user, total, func(since int64) string { return fmt.Sprintf("?room_since=%s:%d", room, since) })
				checkWhole(t, got, total)
				t.Logf("%d seqs, %d resumes after 4008", len(got), resumes)
			})
		}
	}
}

// A reliable room message whose bus copy is lost on the way, with no
// later message and no reconnect, still arrives: the node compares the
// seqs of its rooms with its members' positions (here every second).
func TestLostRoomBusCopyArrivesWithoutALaterMessage(t *testing.T) {
	b := cluster.NewMemory()
	l := newLostCopy(t, b, b, 1, "quiet-member")
	join(t, l.pub, "quiet", "quiet-member")
	eventually(t, 5*time.Second, "membership", func() bool { return len(l.conn.hub.roomConns("quiet")) == 1 })
	reliableRoom(t, l.pub, "quiet", 1)
	reliableRoom(t, l.pub, "quiet", 2) // its copy is lost
	l.expectBoth(t)
}

// A node of the version before reliable rooms sends plain room messages
// in the envelope it always did: a node of this version delivers them. A
// reliable room message goes on the bus with a target type that version
// does not know (so it delivers it to nobody rather than taking the room
// seq for a user seq).
func TestOldEnvelopesOfPlainRoomsAreDelivered(t *testing.T) {
	n := startNode(t, nil)
	join(t, n, "mixed", "dora")
	c := n.connect(t, "dora", "")
	old := []byte(`{"k":"m","t":"room","i":"mixed","p":1,"o":"old-node"}` + "\n" + `{"type":"message","id":"x1","event":"e","data":1,"ts":1,"target":{"type":"room","id":"mixed"}}`)
	n.onBus(old)
	oldBatch := append([]byte(`{"k":"mb"}`+"\n"), appendRecord(nil, roomTarget("mixed"), classChat, 0, 1, []byte(`{"type":"message","id":"x2","event":"e","data":2,"ts":1,"target":{"type":"room","id":"mixed"}}`))...)
	n.onBus(oldBatch)
	for _, want := range []string{"x1", "x2"} {
		if f := c.expect("message"); f["id"] != want || f["seq"] != nil {
			t.Fatalf("old envelope: %v, want %s without seq", f, want)
		}
	}
	if got := busTargetType("room", 3); got == "room" || got == "user" || got == "broadcast" {
		t.Fatalf("a reliable room message goes on the bus as %q, a type older nodes deliver", got)
	}
	if got := busTargetType("room", 0); got != "room" {
		t.Fatalf("a plain room message goes on the bus as %q, want room", got)
	}
}

// A room becoming reliable while a member is connected (it was plain at
// the connect and at the join): its first reliable messages reach the
// member's node out of order (seq 1's bus copy lost, as when two nodes
// publish the room's first messages at once). The member still gets 1
// then 2, once each: its stream starts at 0, not at the first seq it sees.
func TestRoomBecomingReliableLosesNoFirstMessage(t *testing.T) {
	b := cluster.NewMemory()
	l := newLostCopy(t, b, b, 1000, "newbie")
	l.conn.loseBus = func(seq int64) bool { return seq == 1 }
	join(t, l.pub, "fresh", "newbie")
	eventually(t, 5*time.Second, "membership", func() bool { return len(l.conn.hub.roomConns("fresh")) == 1 })
	reliableRoom(t, l.pub, "fresh", 1) // its copy is lost
	reliableRoom(t, l.pub, "fresh", 2)
	l.expectBoth(t)
}

// A membership made through the API while the member is connected, to a
// room with history, starts at the room's seq on the member's node and on
// the joining node alike: the next message is the first frame, no replay
// of what came before the join, no gap.
func TestAPIJoinFollowsFromTheRoomsSeq(t *testing.T) {
	b := cluster.NewMemory()
	pubNode := startNodeWith(t, b, nil)
	other := startNodeWith(t, b, func(c *config.Gateway) { c.NodeID = "t2" })
	for i := 1; i <= 3; i++ {
		reliableRoom(t, pubNode, "storied", i)
	}
	here := pubNode.connect(t, "ida", "")
	there := other.connect(t, "ida", "")
	join(t, pubNode, "storied", "ida")
	eventually(t, 5*time.Second, "membership on both nodes", func() bool {
		return len(pubNode.hub.roomConns("storied")) == 1 && len(other.hub.roomConns("storied")) == 1
	})
	if seq := reliableRoom(t, pubNode, "storied", 4); seq != 4 {
		t.Fatalf("fourth message got seq %d", seq)
	}
	for name, c := range map[string]*wsClient{"the joining node": here, "the other node": there} {
		f := c.next(5 * time.Second)
		if f["type"] != "message" || f["seq"] != 4.0 {
			t.Fatalf("first frame on %s after the API join: %v, want the message of seq 4", name, f)
		}
	}
}

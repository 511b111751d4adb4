package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// The client keeps a position per reliable room: it drops a room's
// duplicates (and only that room's), skips what a room gap reports, never
// acknowledges room seqs (history is not acknowledged), and resumes each
// room it has seen with room_since on the next connection.
func TestRoomPositionsDedupGapAndResume(t *testing.T) {
	roomGaps := make(chan string, 10)
	srv := newServer(t, serverOpts{rooms: map[string]int64{"lobby": 2}, script: func(sc *serverConn) {
		if sc.n != 1 {
			return
		}
		sc.roomMessages("lobby", 3, 3, 2, 4)
		sc.roomMessages("other", 1) // another room's seq 1 is not a duplicate
		sc.send(&protocol.Gap{Type: protocol.TypeGap, From: 5, To: 6, Missed: 2, Target: &protocol.Target{Type: protocol.TargetRoom, ID: "lobby"}})
		sc.roomMessages("lobby", 7)
		sc.messages(1)
		select {
		case a := <-sc.acks:
			if a != 1 {
				sc.s.t.Errorf("ack %d, want 1: a room seq was acknowledged", a)
			}
		case <-time.After(waitTimeout):
			sc.s.t.Error("user seq 1 not acknowledged")
		}
		sc.drop()
	}})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.Handlers.OnRoomGap = func(room string, from, to, missed int64) {
		roomGaps <- fmt.Sprintf("%s %d %d %d", room, from, to, missed)
	}
	r := start(t, cfg)
	var got []string
	for range 5 {
		m := recv(t, ev.msgs, "message")
		got = append(got, fmt.Sprintf("%s:%d", m.Target.ID, m.Seq))
	}
	if fmt.Sprint(got) != "[lobby:3 lobby:4 other:1 lobby:7 alice:1]" {
		t.Fatalf("delivered %v", got)
	}
	if g := recv(t, roomGaps, "room gap"); g != "lobby 5 6 2" {
		t.Errorf("room gap %q", g)
	}
	srv.handshake(t) // the first
	hs := srv.handshake(t)
	if q := hs.query["room_since"]; fmt.Sprint(q) != "[lobby:7 other:1]" {
		t.Errorf("resume query room_since = %v, want [lobby:7 other:1]", q)
	}
	// After the second welcome, whose lobby seq (2) is below the position
	// (the room's history was lost), that seq is the base.
	ev.welcome(t)
	ev.welcome(t)
	if got := r.c.RoomSeqs(); got["lobby"] != 2 || got["other"] != 1 {
		t.Errorf("RoomSeqs after the second welcome = %v, want lobby 2 (the welcome's), other 1", got)
	}
	if st := r.c.Stats(); st.Duplicates != 2 {
		t.Errorf("stats %+v, want 2 duplicates", st)
	}
}

// A welcome whose room seq is below the client's position (the room's
// history was lost) makes that seq the base: later messages are not taken
// for duplicates. Config.RoomSince is sent on the first connection.
func TestRoomPositionFollowsLowerWelcomeSeq(t *testing.T) {
	srv := newServer(t, serverOpts{rooms: map[string]int64{"lobby": 3}, script: func(sc *serverConn) {
		sc.roomMessages("lobby", 4)
	}})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.RoomSince = map[string]int64{"lobby": 10}
	start(t, cfg)
	if q := srv.handshake(t).query["room_since"]; fmt.Sprint(q) != "[lobby:10]" {
		t.Errorf("first room_since = %v", q)
	}
	if m := recv(t, ev.msgs, "message"); m.Seq != 4 || m.Target.ID != "lobby" {
		t.Errorf("delivered %+v, want lobby 4", m)
	}
}

// JoinSince sends a join frame with since.
func TestJoinSince(t *testing.T) {
	srv := newServer(t, serverOpts{})
	ev := newEvents()
	r := start(t, baseConfig(srv.URL, ev))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r.c.JoinSince(ctx, "team", 4); err != nil {
		t.Fatal(err)
	}
	if f := srv.conn(t).frame(t, protocol.TypeJoin); f.Room != "team" || f.Since == nil || *f.Since != 4 {
		t.Errorf("join frame %+v", f)
	}
	if err := r.c.JoinSince(ctx, "team", -1); err == nil {
		t.Error("a negative since accepted")
	}
}

package auth

import "testing"

func TestMatch(t *testing.T) {
	tests := []struct {
		patterns []string
		name     string
		want     bool
	}{
		{[]string{"lobby"}, "lobby", true},
		{[]string{"lobby"}, "lobby2", false},
		{[]string{"lobby"}, "Lobby", false},
		{[]string{"lobby"}, "lob", false},
		{[]string{"team-*"}, "team-red", true},
		{[]string{"team-*"}, "team-", false},
		{[]string{"team-*"}, "team", false},
		{[]string{"team-*"}, "teams", false},
		{[]string{"team-*"}, "xteam-red", false},
		{[]string{"*"}, "anything", true},
		{[]string{"*"}, "", false},
		{[]string{"a*b"}, "a*b", true}, // inner star is literal
		{[]string{"a*b"}, "axb", false},
		{[]string{"**"}, "*x", true},
		{[]string{"**"}, "xx", false},
		{[]string{""}, "", false},
		{[]string{""}, "a", false},
		{nil, "lobby", false},
		{[]string{"x", "y", "team-*"}, "team-blue", true},
	}
	for _, tc := range tests {
		if got := Match(tc.patterns, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.patterns, tc.name, got, tc.want)
		}
	}
}

func TestAllowRoom(t *testing.T) {
	c := &Claims{Rooms: []string{"lobby", "team-*"}}
	for room, want := range map[string]bool{"lobby": true, "team-red": true, "team": false, "admin": false, "": false} {
		if got := AllowRoom(c, room); got != want {
			t.Errorf("AllowRoom(%q) = %v, want %v", room, got, want)
		}
	}
	if AllowRoom(nil, "lobby") || AllowRoom(&Claims{}, "lobby") {
		t.Error("nil claims or no rooms claim allowed a room")
	}
}

func TestAllowPublish(t *testing.T) {
	tests := []struct {
		pub     []string
		typ, id string
		want    bool
	}{
		{[]string{"room:lobby"}, "room", "lobby", true},
		{[]string{"room:lobby"}, "room", "lobby2", false},
		{[]string{"room:lobby"}, "user", "lobby", false},
		{[]string{"room:team-*"}, "room", "team-red", true},
		{[]string{"room:team-*"}, "room", "team-", false},
		{[]string{"room:team-*"}, "room", "other", false},
		{[]string{"room:team-*"}, "user", "team-red", false},
		{[]string{"user:*"}, "user", "bob", true},
		{[]string{"user:*"}, "user", "", false},
		{[]string{"user:*"}, "room", "bob", false},
		{[]string{"user:bob"}, "user", "bob", true},
		{[]string{"user:bob"}, "user", "bobby", false},
		{[]string{"user:bob"}, "user", "bo", false},
		{[]string{"room:*"}, "room", "x", true},
		{[]string{"room*"}, "room", "x", true},
		{[]string{"ro*"}, "room", "x", true},
		{[]string{"ro*"}, "user", "x", false},
		{[]string{"room:"}, "room", "", false},
		{[]string{"roomx"}, "room", "", false},
		{[]string{"room:a:b"}, "room", "a:b", true},
		{[]string{"room:a*"}, "room", "a:b", true},
		{[]string{"*"}, "user", "anyone", true},
		{[]string{"*"}, "room", "any", true},
		{[]string{"*"}, "broadcast", "x", false}, // not a client target
		{[]string{"broadcast:*"}, "broadcast", "x", false},
		{[]string{"room"}, "room", "", false},
		{nil, "room", "lobby", false},
	}
	for _, tc := range tests {
		got := AllowPublish(&Claims{Pub: tc.pub}, tc.typ, tc.id)
		if got != tc.want {
			t.Errorf("AllowPublish(%q, %q, %q) = %v, want %v", tc.pub, tc.typ, tc.id, got, tc.want)
		}
		// The allocation-free matcher agrees with Match on the joined string.
		if tc.id != "" && (tc.typ == TargetUser || tc.typ == TargetRoom) {
			if want := Match(tc.pub, tc.typ+":"+tc.id); got != want {
				t.Errorf("AllowPublish(%q, %q, %q) = %v, Match says %v", tc.pub, tc.typ, tc.id, got, want)
			}
		}
	}
	if AllowPublish(nil, "room", "lobby") {
		t.Error("nil claims allowed publishing")
	}
}

func FuzzMatchTarget(f *testing.F) {
	f.Add("room:team-*", "room", "team-red")
	f.Add("user:*", "user", "")
	f.Add("*", "room", "x")
	f.Add("ro*", "user", "x")
	f.Fuzz(func(t *testing.T, p, typ, id string) {
		if got, want := matchTarget(p, typ, id), matchOne(p, typ+":"+id); got != want {
			t.Fatalf("matchTarget(%q, %q, %q) = %v, matchOne = %v", p, typ, id, got, want)
		}
	})
}

func BenchmarkAllowPublish(b *testing.B) {
	c := &Claims{Pub: []string{"room:lobby", "room:team-*", "user:*"}}
	b.ReportAllocs()
	for b.Loop() {
		if !AllowPublish(c, "room", "team-red") {
			b.Fatal("refused")
		}
	}
}

func TestAllowSend(t *testing.T) {
	for _, tc := range []struct {
		send  []string
		event string
		want  bool
	}{
		{nil, "chat", true}, // no claim: anything
		{nil, "", true},
		{[]string{}, "chat", false}, // an empty claim allows nothing
		{[]string{"chat"}, "chat", true},
		{[]string{"chat"}, "chat.x", false},
		{[]string{"chat.*"}, "chat.x", true},
		{[]string{"chat.*"}, "chat.", false},
		{[]string{"*"}, "", false},
	} {
		if got := AllowSend(&Claims{Send: tc.send}, tc.event); got != tc.want {
			t.Errorf("AllowSend(%q, %q) = %v, want %v", tc.send, tc.event, got, tc.want)
		}
	}
}

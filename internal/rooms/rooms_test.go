package rooms

import (
	"strings"
	"testing"
	"time"
)

func TestParseAndMatch(t *testing.T) {
	_, err := Parse([]byte(`
rooms:
  - pattern: "chat:*"
    reliable: true
    history_limit: 500
    history_ttl: 72h
    presence: true
    join_leave: true
    publish: members
    echo: false
    max_members: 1000
    scope: connection
    join_proxy: http://app.internal/rooms/authorize
  - pattern: "chat:*"
  - pattern: lobby
    history_ttl: 7d
`))
	if err == nil || !strings.Contains(err.Error(), `rooms[1] ("chat:*"): pattern repeats rooms[0]`) {
		t.Fatalf("a repeated pattern: %v", err)
	}
	s, err := Parse([]byte(`
rooms:
  - pattern: "chat:*"
    reliable: true
    history_limit: 500
    history_ttl: 72h
    presence: true
    join_leave: true
    publish: members
    echo: false
    max_members: 1000
    scope: connection
    join_proxy: http://app.internal/rooms/authorize
  - pattern: lobby
    history_ttl: 7d
`))
	if err != nil {
		t.Fatal(err)
	}
	chat := s.Match("chat:42")
	want := Namespace{Pattern: "chat:*", Reliable: true, HistoryLimit: 500, HistoryTTL: 72 * time.Hour, Presence: true, JoinLeave: true,
		Publish: PublishMembers, Echo: false, MaxMembers: 1000, Scope: ScopeConnection, JoinProxy: "http://app.internal/rooms/authorize"}
	if *chat != want {
		t.Fatalf("chat:42 matched %+v, want %+v", *chat, want)
	}
	lobby := s.Match("lobby")
	if lobby.Pattern != "lobby" || lobby.HistoryTTL != 7*24*time.Hour || !lobby.Echo || lobby.Publish != PublishClaim || lobby.Scope != ScopeUser {
		t.Fatalf("lobby matched %+v", *lobby)
	}
	for _, room := range []string{"lobby2", "chat", "x"} {
		if s.Match(room) != Default {
			t.Fatalf("%s matched %+v, want the default", room, *s.Match(room))
		}
	}
	var none *Set
	if none.Match("chat:1") != Default {
		t.Fatal("a nil set matches")
	}
}

func TestParseRefusesWithOneClearLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{"rooms: 3", "not a rooms file"},
		{"rooms:\n  - presence: true\n", "rooms[0]: pattern is required"},
		{"rooms:\n  - pattern: 'a*b'\n", "* is allowed only at the end"},
		{"rooms:\n  - pattern: a\n    presense: true\n", "presense"},
		{"rooms:\n  - pattern: a\n    publish: all\n", "publish must be claim, members or none"},
		{"rooms:\n  - pattern: a\n    scope: tab\n", "scope must be user or connection"},
		{"rooms:\n  - pattern: a\n    history_limit: 100001\n", "history_limit must be 0"},
		{"rooms:\n  - pattern: a\n    history_ttl: soon\n", "history_ttl \"soon\""},
		{"rooms:\n  - pattern: a\n    max_members: -1\n", "max_members"},
		{"rooms:\n  - pattern: a\n    join_proxy: ftp://x\n", "join_proxy must be an http(s):// URL"},
	} {
		_, err := Parse([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q) = %v, want one line with %q", c.in, err, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("rooms:\n  - pattern: \"chat:*\"\n    presence: true\n"))
	f.Add([]byte("rooms:\n  - pattern: a\n    history_ttl: 7d\n    echo: false\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error of more than one line: %q", err)
			}
			return
		}
		for _, ns := range s.Namespaces() {
			if s.Match(strings.TrimSuffix(ns.Pattern, "*")) == Default {
				t.Fatalf("pattern %q does not match its own prefix", ns.Pattern)
			}
		}
	})
}

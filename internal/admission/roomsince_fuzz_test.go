package admission

import (
	"strings"
	"testing"
)

func TestParseRoomSince(t *testing.T) {
	got, err := ParseRoomSince([]string{"lobby:3", "a:b:7", "lobby:9"}, 10)
	if err != nil || len(got) != 2 || got["lobby"] != 3 || got["a:b"] != 7 {
		t.Fatalf("ParseRoomSince = %v, %v; want lobby:3 a:b:7", got, err)
	}
	for _, bad := range []string{"lobby", "lobby:", ":3", "lobby:-1", "lobby:x"} {
		if _, err := ParseRoomSince([]string{bad}, 10); err == nil {
			t.Errorf("ParseRoomSince(%q) accepted", bad)
		}
	}
	if _, err := ParseRoomSince([]string{"a:1", "b:1"}, 1); err == nil {
		t.Error("more values than allowed accepted")
	}
}

func FuzzParseRoomSince(f *testing.F) {
	for _, s := range []string{"lobby:3", "a:b:7", "x:", ":1", "r:99999999999999999999", "r:1\nq:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseRoomSince(strings.Split(s, "\n"), 100)
		if err != nil {
			return
		}
		for room, seq := range got {
			if room == "" || seq < 0 {
				t.Fatalf("ParseRoomSince(%q) gave %q:%d", s, room, seq)
			}
		}
	})
}

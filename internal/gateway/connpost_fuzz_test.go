package gateway

import (
	"encoding/base64"
	"testing"
)

// FuzzParseSession: the session of POST /v1/conn/{conn_id} comes from the
// client. Any string is refused or split into a node id and a 16-byte
// MAC (what the HMAC check compares in constant time); a session this
// node issued reads back as its own id.
func FuzzParseSession(f *testing.F) {
	node := base64.RawURLEncoding.EncodeToString([]byte("node-1"))
	mac := base64.RawURLEncoding.EncodeToString(make([]byte, 16))
	for _, s := range []string{node + "." + mac, "." + mac, node + ".", node, "a.b.c", "!!." + mac, node + "." + mac + "A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, m, ok := parseSession(s)
		if !ok {
			if id != "" || m != nil {
				t.Fatalf("%q refused with %q %x", s, id, m)
			}
			return
		}
		if len(m) != 16 || len(s) > 512+1+22 {
			t.Fatalf("%q: mac of %d bytes from a session of %d", s, len(m), len(s))
		}
		if id2, m2, ok := parseSession(base64.RawURLEncoding.EncodeToString([]byte(id)) + "." + base64.RawURLEncoding.EncodeToString(m)); !ok || id2 != id || string(m2) != string(m) {
			t.Fatalf("%q: re-encoded it reads %q %x %v", s, id2, m2, ok)
		}
	})
}

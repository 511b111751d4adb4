package downstream

import (
	"slices"
	"strings"
	"testing"
)

// FuzzTargetsOf: a record's value comes from the business's log. Any
// bytes give its targets, each once and of a known shape ("broadcast\x00"
// or TYPE\x00ID), the same on every call; a value that is not a JSON
// publish or batch body gives none (it goes to the dead-letter place).
func FuzzTargetsOf(f *testing.F) {
	for _, s := range []string{
		`{"target":{"type":"user","id":"u1"},"data":1}`,
		`{"messages":[{"target":{"type":"room","id":"r"}},{"target":{"type":"room","id":"r"}},{"target":{"type":"broadcast","id":"x"}}]}`,
		`{"target":null,"messages":[{"target":{"type":"user","id":"a\u0000b"}}]}`,
		`{"target":{"type":"user"}}`, `[]`, `null`, `{`, ``, `{"messages":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		got := targetsOf(value)
		if again := targetsOf(value); !slices.Equal(got, again) {
			t.Fatalf("%q: %q then %q", value, got, again)
		}
		seen := map[string]bool{}
		for _, k := range got {
			if seen[k] {
				t.Fatalf("%q: target %q twice", value, k)
			}
			seen[k] = true
			if typ, _, ok := strings.Cut(k, "\x00"); !ok || typ == "broadcast" && k != "broadcast\x00" {
				t.Fatalf("%q: target %q", value, k)
			}
		}
	})
}

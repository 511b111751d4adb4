package wsframe

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCloseReasonIsValidUTF8CutOnABoundary(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int // bytes kept
	}{
		{"short", "slow consumer", 13},
		{"ascii too long", strings.Repeat("a", 200), 123},
		{"two-byte runes", strings.Repeat("é", 100), 122},
		{"three-byte runes", strings.Repeat("€", 50), 123},
		{"four-byte runes", strings.Repeat("😀", 40), 120},
		{"invalid bytes left out", "bad\xffreason", 9},
	} {
		f := CloseFrame(4008, tc.in)
		h, hs, err := ParseHeader(f, false)
		if err != nil || h.OpCode != OpClose {
			t.Fatalf("%s: not a close frame: %v", tc.name, err)
		}
		reason := f[hs+2:]
		if !utf8.Valid(reason) || len(reason) != tc.want || !strings.HasPrefix(strings.ToValidUTF8(tc.in, ""), string(reason)) {
			t.Errorf("%s: reason %q (%d bytes), want the first %d bytes, valid UTF-8", tc.name, reason, len(reason), tc.want)
		}
	}
}

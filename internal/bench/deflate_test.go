package bench

import (
	"encoding/json"
	"testing"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// TestFillText: --fill text keeps the data a valid bench object of the
// same size, with padding that compresses like text, not like a run.
func TestFillText(t *testing.T) {
	for _, size := range []int{0, 100, 2048, 20000} {
		b := appendData(nil, "0123abcd", 42, 7, 1767225600123456789, size)
		n := len(b)
		fillText(b, 7)
		if len(b) != n || !json.Valid(b) {
			t.Fatalf("size %d: %d bytes, valid %v: %s", size, len(b), json.Valid(b), b)
		}
		p, ok := parseData(b)
		if !ok || p.idx != 7 || p.stream != 42 || string(p.run) != "0123abcd" {
			t.Fatalf("size %d: parsed %+v %v", size, p, ok)
		}
		if size == 2048 {
			x := appendData(nil, "0123abcd", 42, 7, 1767225600123456789, size)
			zt, zx := len(wsframe.AppendDeflate(nil, b)), len(wsframe.AppendDeflate(nil, x))
			if zt < 4*zx || zt > len(b)*2/3 {
				t.Fatalf("2 KB compresses to %d bytes with text padding, %d with x", zt, zx)
			}
		}
	}
}

package wsframe

import (
	"bytes"
	"testing"

	"github.com/gobwas/ws"
)

// FuzzParseHeader checks the hand-written parser against gobwas/ws on
// arbitrary bytes: whenever both accept a header they agree on every field.
func FuzzParseHeader(f *testing.F) {
	f.Add(clientFrame(ws.OpText, true, []byte(`{"type":"ping"}`)))
	f.Add(clientFrame(ws.OpBinary, false, bytes.Repeat([]byte{1}, 300)))
	f.Add(clientFrame(ws.OpPing, true, nil))
	f.Add([]byte{0x81, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0, 1, 2, 3, 4})
	f.Add([]byte{0x81})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, size, err := ParseHeader(b, false)
		if err != nil || size == 0 {
			return
		}
		gh, gerr := ws.ReadHeader(bytes.NewReader(b))
		if gerr != nil {
			// gobwas refuses some headers we accept only for reasons we
			// check elsewhere (none expected); report a disagreement.
			t.Fatalf("we accepted %x (size %d) but gobwas: %v", b, size, gerr)
		}
		if gh.Fin != h.Fin || byte(gh.OpCode) != h.OpCode || gh.Masked != h.Masked || gh.Length != h.Length || (h.Masked && gh.Mask != h.Mask) {
			t.Fatalf("disagreement on %x: ours %+v gobwas %+v", b[:size], h, gh)
		}
	})
}

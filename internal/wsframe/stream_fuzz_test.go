package wsframe

import (
	"bytes"
	"testing"

	"github.com/gobwas/ws"
)

type parsed struct {
	h       Header
	payload []byte
}

// parseStream reads frames from chunks the way the gateway's reader does:
// a header or payload split over reads is kept and completed by the next
// chunk. It returns the frames and whether the stream was refused.
func parseStream(chunks [][]byte, maxLen int64) (frames []parsed, refused bool) {
	var rest []byte
	for _, c := range chunks {
		data := append(rest, c...)
		for len(data) > 0 {
			h, hs, err := ParseHeader(data, true)
			if err != nil || h.Length > maxLen {
				return frames, true
			}
			if hs == 0 || int64(len(data)-hs) < h.Length {
				break
			}
			p := bytes.Clone(data[hs : hs+int(h.Length)])
			Unmask(p, h.Mask)
			frames = append(frames, parsed{h, p})
			data = data[hs+int(h.Length):]
		}
		rest = bytes.Clone(data)
	}
	return frames, false
}

// FuzzFrameStream feeds a client byte stream cut at two arbitrary points:
// the frames read must be the same as from the stream in one piece (a
// frame split over reads is neither lost nor changed), and nothing panics.
func FuzzFrameStream(f *testing.F) {
	two := append(clientFrame(ws.OpText, true, []byte(`{"type":"ping"}`)), clientFrame(ws.OpPing, true, []byte("x"))...)
	f.Add(two, uint16(3), uint16(9))
	f.Add(append(clientFrame(ws.OpText, false, []byte(`{"type":`)), clientFrame(ws.OpContinuation, true, []byte(`"ping"}`))...), uint16(1), uint16(20))
	f.Add(clientFrame(ws.OpBinary, true, bytes.Repeat([]byte{0x91}, 300)), uint16(2), uint16(4))
	f.Add(clientFrame(ws.OpClose, true, []byte{3, 232}), uint16(0), uint16(0))
	f.Add([]byte{0x81, 0x05, 'h', 'e', 'l', 'l', 'o'}, uint16(1), uint16(2)) // unmasked: refused
	f.Fuzz(func(t *testing.T, b []byte, cut1, cut2 uint16) {
		i, j := int(cut1)%(len(b)+1), int(cut2)%(len(b)+1)
		if i > j {
			i, j = j, i
		}
		whole, wr := parseStream([][]byte{b}, 1<<20)
		split, sr := parseStream([][]byte{b[:i], b[i:j], b[j:]}, 1<<20)
		if wr != sr || len(whole) != len(split) {
			t.Fatalf("whole: %d frames refused=%v; split at %d,%d: %d frames refused=%v", len(whole), wr, i, j, len(split), sr)
		}
		for k := range whole {
			if whole[k].h != split[k].h || !bytes.Equal(whole[k].payload, split[k].payload) {
				t.Fatalf("frame %d differs when split at %d,%d", k, i, j)
			}
		}
	})
}

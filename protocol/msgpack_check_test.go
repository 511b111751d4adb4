package protocol

import (
	"runtime"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestCheckMsgpack(t *testing.T) {
	ok, _ := msgpack.Marshal(map[string]any{"type": "publish", "id": "1", "target": map[string]any{"type": "room", "id": "r"},
		"data": map[string]any{"n": 1.5, "list": []any{1, "x", true, nil, []byte{1, 2}, uint64(1 << 40), int64(-5)}}})
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"a whole frame", ok, true},
		{"truncated frame", ok[:len(ok)-1], false},
		{"str32 declaring 1 GiB", []byte{0x81, 0xa4, 't', 'y', 'p', 'e', 0xdb, 0x40, 0, 0, 0, 'x'}, false},
		{"array32 declaring 2^28 items", []byte{0x81, 0xa4, 'd', 'a', 't', 'a', 0xdd, 0x10, 0, 0, 0, 1}, false},
		{"map16 declaring more pairs than bytes", []byte{0xde, 0x00, 0x10, 1, 2}, false},
		{"bin8 short", []byte{0xc4, 5, 1, 2}, false},
		{"ext8 with its type byte", []byte{0xc7, 1, 9, 0xff}, true},
		{"fixext4", []byte{0xd6, 1, 1, 2, 3, 4}, true},
		{"fixext4 short", []byte{0xd6, 1, 1, 2}, false},
		{"0xc1 never used", []byte{0xc1}, false},
		{"empty", nil, false},
		{"nested empty containers", []byte{0x92, 0x90, 0x80}, true},
	} {
		if err := checkMsgpack(tc.in); (err == nil) != tc.ok {
			t.Errorf("%s: checkMsgpack(% x) = %v, want ok=%v", tc.name, tc.in, err, tc.ok)
		}
	}
}

// A short frame that declares a huge string costs no more than its size.
func TestDecodeClientShortFrameDeclaringAHugeValue(t *testing.T) {
	p := []byte{0x81, 0xa4, 't', 'y', 'p', 'e', 0xdb, 0x40, 0, 0, 0, 'x'}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, err := DecodeClient(MsgPack, p)
	runtime.ReadMemStats(&m1)
	if err == nil {
		t.Fatal("decoded a truncated frame")
	}
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 64<<10 {
		t.Fatalf("refusing a 12-byte frame allocated %d bytes", got)
	}
}

// FuzzCheckMsgpack: what the check accepts, the decoder reads without
// running past the input; valid encodings are always accepted.
func FuzzCheckMsgpack(f *testing.F) {
	seed, _ := msgpack.Marshal(map[string]any{"type": "ack", "seq": 3, "data": []any{"a", 1.25, map[string]any{}}})
	f.Add(seed)
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0xc7, 1, 9, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkMsgpack(b) != nil {
			return
		}
		var v any
		if err := msgpack.Unmarshal(b, &v); err != nil {
			return // other problems (bad UTF-8 keys, unknown ext) are the decoder's to report
		}
		again, err := msgpack.Marshal(v)
		if err != nil {
			return
		}
		if checkMsgpack(again) != nil {
			t.Fatalf("a valid re-encoding % x was refused", again)
		}
	})
}

// nestedArrays is a frame whose data is n arrays, one inside the other.
func nestedArrays(n int) []byte {
	b := []byte{0x82, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'p', 'i', 'n', 'g', 0xa4, 'd', 'a', 't', 'a'}
	for range n {
		b = append(b, 0x91)
	}
	return append(b, 0xc0)
}

func TestCheckMsgpackLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"63 levels inside the frame's map", nestedArrays(MaxMsgpackDepth - 1), nil},
		{"64 levels inside the frame's map", nestedArrays(MaxMsgpackDepth), errMsgpackDepth},
		{"a 64 KB nesting bomb", nestedArrays(64 << 10), errMsgpackDepth},
		{"65536 values", append([]byte{0xdd, 0, 0, 0xff, 0xff}, make([]byte, 0xffff)...), nil},
		{"65537 values", append([]byte{0xdd, 0, 1, 0, 0}, make([]byte, 0x10000)...), errMsgpackElements},
	} {
		if err := checkMsgpack(tc.in); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// A nesting bomb is refused before the recursive decoder sees it: its
// cost does not grow with the nesting.
func TestDecodeClientNestingBombIsRefusedBeforeDecoding(t *testing.T) {
	bomb := nestedArrays(64 << 10)
	if _, err := DecodeClient(MsgPack, bomb); err == nil {
		t.Fatal("decoded a 64 KB nesting bomb")
	}
	allocs := testing.AllocsPerRun(5, func() { DecodeClient(MsgPack, bomb) })
	if allocs > 20 {
		t.Fatalf("refusing a nesting bomb took %.0f allocations, want a handful", allocs)
	}
	p := []byte{0x82, 0xa4, 't', 'y', 'p', 'e', 0xa5, 'e', 'v', 'e', 'n', 't', 0xa4, 'd', 'a', 't', 'a'}
	for range 64 << 10 {
		p = append(p, 0x91)
	}
	p = append(p, 0xc0)
	if _, err := PeekServer(MsgPack, p); err == nil {
		t.Fatal("peeked a server frame nested 64 Ki deep")
	}
}

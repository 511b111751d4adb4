package wsframe

import (
	"bytes"
	"io"
	"testing"

	"github.com/gobwas/ws"
)

func clientFrame(op ws.OpCode, fin bool, payload []byte) []byte {
	var buf bytes.Buffer
	f := ws.NewFrame(op, fin, append([]byte(nil), payload...))
	f = ws.MaskFrameInPlace(f)
	if err := ws.WriteFrame(&buf, f); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func TestParseHeaderLengths(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 127, 65535, 65536, 200000} {
		payload := bytes.Repeat([]byte{'x'}, n)
		b := clientFrame(ws.OpText, true, payload)
		h, size, err := ParseHeader(b, true)
		if err != nil || size == 0 {
			t.Fatalf("n=%d: size %d err %v", n, size, err)
		}
		if h.Length != int64(n) || !h.Fin || h.OpCode != OpText || !h.Masked {
			t.Fatalf("n=%d: header %+v", n, h)
		}
		got := append([]byte(nil), b[size:]...)
		Unmask(got, h.Mask)
		if !bytes.Equal(got, payload) {
			t.Fatalf("n=%d: payload differs after unmask", n)
		}
		// Every prefix shorter than the header asks for more bytes.
		for i := 0; i < size; i++ {
			if _, s, err := ParseHeader(b[:i], true); s != 0 || err != nil {
				t.Fatalf("n=%d prefix %d: size %d err %v", n, i, s, err)
			}
		}
	}
}

func TestParseHeaderRefusals(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"reserved bits", []byte{0xC1, 0x80, 0, 0, 0, 0}, ErrReservedBits},
		{"unmasked", []byte{0x81, 0x01, 'a'}, ErrUnmasked},
		{"bad opcode", []byte{0x83, 0x80, 0, 0, 0, 0}, ErrBadOpCode},
		{"long ping", []byte{0x89, 0xFE, 0, 200, 0, 0, 0, 0}, ErrControlTooLong},
		{"fragmented close", []byte{0x08, 0x80, 0, 0, 0, 0}, ErrControlFrag},
		{"length high bit", []byte{0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrLength},
	}
	for _, tc := range cases {
		if _, _, err := ParseHeader(tc.b, true); err != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

// readFrame reads one whole frame with gobwas' header reader.
func readFrame(r io.Reader) (f ws.Frame, err error) {
	if f.Header, err = ws.ReadHeader(r); err == nil {
		f.Payload = make([]byte, f.Header.Length)
		_, err = io.ReadFull(r, f.Payload)
	}
	return f, err
}

func TestServerFramesReadByGobwas(t *testing.T) {
	for _, n := range []int{0, 5, 125, 126, 65535, 65536} {
		payload := bytes.Repeat([]byte{'y'}, n)
		f, err := readFrame(bytes.NewReader(Frame(OpText, payload)))
		if err != nil || !bytes.Equal(f.Payload, payload) || f.Header.OpCode != ws.OpText || !f.Header.Fin {
			t.Fatalf("n=%d: %v %+v", n, err, f.Header)
		}
	}
	f, err := readFrame(bytes.NewReader(CloseFrame(4001, "draining")))
	if err != nil {
		t.Fatal(err)
	}
	code, reason := ws.ParseCloseFrameData(f.Payload)
	if code != 4001 || reason != "draining" {
		t.Fatalf("close frame: %d %q", code, reason)
	}
}

func BenchmarkParseHeader(b *testing.B) {
	frame := clientFrame(ws.OpText, true, bytes.Repeat([]byte{'z'}, 100))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseHeader(frame, true); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFrame100(b *testing.B) {
	payload := bytes.Repeat([]byte{'z'}, 100)
	b.ReportAllocs()
	for b.Loop() {
		_ = Frame(OpText, payload)
	}
}

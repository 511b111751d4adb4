package wsframe

import (
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsflate"
)

func TestAcceptDeflate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   bool
	}{
		{"none", nil, false},
		{"chrome", []string{"permessage-deflate; client_max_window_bits"}, true},
		{"bare", []string{"permessage-deflate"}, true},
		{"all parameters", []string{"permessage-deflate; server_no_context_takeover; client_no_context_takeover; client_max_window_bits=10; server_max_window_bits=15"}, true},
		{"quoted value", []string{`permessage-deflate; client_max_window_bits="12"`}, true},
		{"other extension first", []string{"x-webkit-deflate-frame, permessage-deflate"}, true},
		{"other extension only", []string{"x-webkit-deflate-frame"}, false},
		{"second header", []string{"foo", "permessage-deflate"}, true},
		{"server window below 15", []string{"permessage-deflate; server_max_window_bits=10"}, false},
		{"bad offer then good", []string{"permessage-deflate; server_max_window_bits=10, permessage-deflate"}, true},
		{"unknown parameter", []string{"permessage-deflate; foo=1"}, false},
		{"unknown then good", []string{"permessage-deflate; foo, permessage-deflate; client_max_window_bits"}, true},
		{"duplicate parameter", []string{"permessage-deflate; client_no_context_takeover; client_no_context_takeover"}, false},
		{"window out of range", []string{"permessage-deflate; client_max_window_bits=16"}, false},
		{"window not a number", []string{"permessage-deflate; client_max_window_bits=ten"}, false},
		{"server window without value", []string{"permessage-deflate; server_max_window_bits"}, false},
		{"flag with value", []string{"permessage-deflate; server_no_context_takeover=1"}, false},
		{"garbage", []string{";;;==,,"}, false},
		{"unterminated quote", []string{`permessage-deflate; client_max_window_bits="12`}, false},
		{"garbage beside a good header", []string{"permessage-deflate", `x; a="`}, false},
		{"case matters", []string{"Permessage-Deflate"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vs [][]byte
			for _, v := range tc.values {
				vs = append(vs, []byte(v))
			}
			if got := AcceptDeflate(vs); got != tc.want {
				t.Fatalf("AcceptDeflate(%q) = %v, want %v", tc.values, got, tc.want)
			}
		})
	}
}

// FuzzAcceptDeflate: any header value is either accepted or declined,
// never a panic; an accepted value holds an offer gobwas' own negotiation
// accepts with our parameters, and a declined one none it accepts.
func FuzzAcceptDeflate(f *testing.F) {
	for _, s := range []string{
		"permessage-deflate; client_max_window_bits",
		`permessage-deflate; client_max_window_bits="12", permessage-deflate`,
		"permessage-deflate; server_max_window_bits=9",
		"a, b; c=d; e=\"f\\\"g\", permessage-deflate; server_no_context_takeover",
		";;;",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AcceptDeflate([][]byte{[]byte(s)})
		if !wellFormed([]byte(s)) {
			if got {
				t.Fatalf("accepted malformed %q", s)
			}
			return
		}
		// gobwas' Extension declines what its Parameters.Parse refuses
		// by failing; we decline the offer and go on to the next one.
		want := false
		opts, ok := httphead.ParseOptions([]byte(s), nil)
		if !ok {
			return
		}
		for _, o := range opts {
			ext := wsflate.Extension{Parameters: wsflate.Parameters{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 15}}
			if acc, err := ext.Negotiate(o); err == nil && acc.Size() > 0 {
				// gobwas also takes a smaller server window; we cannot.
				if p, _ := ext.Accepted(); !p.ServerMaxWindowBits.Defined() || p.ServerMaxWindowBits == 15 {
					want = true
					break
				}
			}
		}
		if got != want {
			t.Fatalf("AcceptDeflate(%q) = %v, gobwas' negotiation says %v", s, got, want)
		}
	})
}

func TestDeflateRoundTrip(t *testing.T) {
	msg := []byte(strings.Repeat(`{"type":"message","data":"hello world"},`, 60))
	fr := DeflateFrame(OpText, msg)
	h, hs, err := ParseHeaderDeflate(fr, false)
	if err != nil || !h.Rsv1 || h.OpCode != OpText || !h.Fin {
		t.Fatalf("header %+v err %v", h, err)
	}
	z := fr[hs:]
	if len(z) >= len(msg)/2 {
		t.Fatalf("compressed %d bytes to %d", len(msg), len(z))
	}
	if bytes.HasSuffix(z, deflateTail) {
		t.Fatal("the sync flush tail was not left off")
	}
	got, err := AppendInflate(nil, z, len(msg))
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("inflate: %v, %d bytes", err, len(got))
	}
	// The standard library inflates it too.
	var out bytes.Buffer
	r := flate.NewReader(bytes.NewReader(append(append([]byte(nil), z...), 0, 0, 0xff, 0xff, 1, 0, 0, 0xff, 0xff)))
	if _, err := out.ReadFrom(r); err != nil || !bytes.Equal(out.Bytes(), msg) {
		t.Fatalf("stdlib inflate: %v", err)
	}
	// A limit one byte short fails.
	if _, err := AppendInflate(nil, z, len(msg)-1); !errors.Is(err, ErrInflatedTooBig) {
		t.Fatalf("limit %d: %v", len(msg)-1, err)
	}
}

func TestInflateBomb(t *testing.T) {
	bomb := AppendDeflate(nil, make([]byte, 8<<20)) // 8 MiB of zeros
	if len(bomb) > 100<<10 {
		t.Fatalf("bomb is %d bytes", len(bomb))
	}
	dst := make([]byte, 0, 16)
	out, err := AppendInflate(dst, bomb, 65536)
	if !errors.Is(err, ErrInflatedTooBig) {
		t.Fatalf("err %v", err)
	}
	if cap(out) > 4*65536 {
		t.Fatalf("inflating the bomb grew the buffer to %d bytes", cap(out))
	}
}

func TestInflateGarbage(t *testing.T) {
	for _, z := range [][]byte{{0xff, 0xff, 0xff}, {0x07}, bytes.Repeat([]byte{0xa5}, 300)} {
		if _, err := AppendInflate(nil, z, 1<<20); !errors.Is(err, ErrInflate) {
			t.Fatalf("%x: %v", z, err)
		}
	}
	// The pooled decompressor works again after a failure.
	z := AppendDeflate(nil, []byte("after"))
	if got, err := AppendInflate(nil, z, 100); err != nil || string(got) != "after" {
		t.Fatalf("%q %v", got, err)
	}
}

func TestParseHeaderCompressedBit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		b       []byte
		deflate bool
		want    error
	}{
		{"text without extension", []byte{0xc1, 0x80, 1, 2, 3, 4}, false, ErrReservedBits},
		{"text with extension", []byte{0xc1, 0x80, 1, 2, 3, 4}, true, nil},
		{"ping", []byte{0xc9, 0x80, 1, 2, 3, 4}, true, ErrCompressedBit},
		{"close", []byte{0xc8, 0x80, 1, 2, 3, 4}, true, ErrCompressedBit},
		{"continuation", []byte{0xc0, 0x80, 1, 2, 3, 4}, true, ErrCompressedBit},
		{"rsv2", []byte{0xa1, 0x80, 1, 2, 3, 4}, true, ErrReservedBits},
		{"rsv3", []byte{0x91, 0x80, 1, 2, 3, 4}, true, ErrReservedBits},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parse := ParseHeader
			if tc.deflate {
				parse = ParseHeaderDeflate
			}
			h, _, err := parse(tc.b, true)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err == nil && !h.Rsv1 {
				t.Fatal("Rsv1 not reported")
			}
		})
	}
}

// FuzzInflate: any bytes inflate to at most the limit or fail cleanly,
// and what a compressor made inflates back.
func FuzzInflate(f *testing.F) {
	f.Add(AppendDeflate(nil, []byte(strings.Repeat("abc", 500))))
	f.Add(AppendDeflate(nil, make([]byte, 10000)))
	f.Add([]byte{0x00, 0x00, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, z []byte) {
		const limit = 4096
		out, err := AppendInflate(nil, z, limit)
		if err == nil && len(out) > limit {
			t.Fatalf("%d bytes out past the limit", len(out))
		}
		back, err := AppendInflate(nil, AppendDeflate(nil, z), len(z))
		if err != nil || !bytes.Equal(back, z) {
			t.Fatalf("round trip of %d bytes: %v", len(z), err)
		}
	})
}

// BenchmarkDeflateFrame: one 2 KB JSON message compressed into a frame
// (what a broadcast pays once, whatever its number of recipients).
func BenchmarkDeflateFrame(b *testing.B) {
	msg := benchJSON(2048)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		DeflateFrame(OpText, msg)
	}
}

// BenchmarkInflate: the same message inflated (a client message, or the
// receiving side).
func BenchmarkInflate(b *testing.B) {
	msg := benchJSON(2048)
	z := AppendDeflate(nil, msg)
	dst := make([]byte, 0, 4096)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendInflate(dst[:0], z, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

func benchJSON(n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		b = append(b, fmt.Sprintf(`{"id":%d,"name":"item-%d","price":%d.%02d,"tags":["a","b%d"]},`, i, i*7919%1000, i*31%500, i%100, i%13)...)
	}
	return b[:n]
}

// FuzzParseHeaderDeflate checks the permessage-deflate variant against
// gobwas/ws and its wsflate bit rules: whenever we accept a header, gobwas
// reads the same fields, RSV1 included, and wsflate agrees that the bit is
// allowed on that frame.
func FuzzParseHeaderDeflate(f *testing.F) {
	f.Add([]byte{0xc1, 0x85, 1, 2, 3, 4, 0, 0, 0, 0, 0})
	f.Add([]byte{0xc9, 0x80, 1, 2, 3, 4})
	f.Add([]byte{0x41, 0xfe, 0x01, 0x00, 1, 2, 3, 4})
	f.Add([]byte{0xe1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, size, err := ParseHeaderDeflate(b, false)
		if err != nil || size == 0 {
			return
		}
		gh, gerr := ws.ReadHeader(bytes.NewReader(b))
		if gerr != nil {
			t.Fatalf("we accepted %x (size %d) but gobwas: %v", b, size, gerr)
		}
		if gh.Fin != h.Fin || byte(gh.OpCode) != h.OpCode || gh.Masked != h.Masked || gh.Length != h.Length || gh.Rsv1() != h.Rsv1 {
			t.Fatalf("disagreement on %x: ours %+v gobwas %+v", b[:size], h, gh)
		}
		if _, err := wsflate.IsCompressed(gh); err != nil {
			t.Fatalf("we accepted RSV1 on %x, wsflate: %v", b[:size], err)
		}
	})
}

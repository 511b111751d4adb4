package proxyproto

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

func v2(cmd, fam byte, body []byte) []byte {
	b := append([]byte(nil), v2Sig...)
	b = append(b, 0x20|cmd, fam, 0, 0)
	binary.BigEndian.PutUint16(b[14:], uint16(len(body)))
	return append(b, body...)
}

func TestParse(t *testing.T) {
	ipv4 := []byte{203, 0, 113, 7, 10, 0, 0, 1, 0x30, 0x39, 0x1f, 0x90}
	ipv6 := make([]byte, 36)
	copy(ipv6, netip.MustParseAddr("2001:db8::5").AsSlice())
	for _, tc := range []struct {
		name string
		in   string
		n    int
		src  string
		err  error
	}{
		{"v1 tcp4", "PROXY TCP4 203.0.113.7 10.0.0.1 12345 8080\r\nGET /", 44, "203.0.113.7", nil},
		{"v1 tcp6", "PROXY TCP6 2001:db8::5 2001:db8::1 1 2\r\n", 40, "2001:db8::5", nil},
		{"v1 unknown", "PROXY UNKNOWN\r\nGET", 15, "", nil},
		{"v1 incomplete", "PROXY TCP4 203.0.113.7 10.0", 0, "", ErrIncomplete},
		{"v1 prefix only", "PRO", 0, "", ErrIncomplete},
		{"v1 family mismatch", "PROXY TCP4 2001:db8::5 10.0.0.1 1 2\r\n", 0, "", ErrInvalid},
		{"v1 bad port", "PROXY TCP4 1.2.3.4 5.6.7.8 99999 2\r\n", 0, "", ErrInvalid},
		{"v1 leading zero port", "PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n", 0, "", ErrInvalid},
		{"v1 too few fields", "PROXY TCP4 1.2.3.4\r\n", 0, "", ErrInvalid},
		{"v1 no CRLF in 107 bytes", "PROXY TCP4 " + string(make([]byte, 120)), 0, "", ErrInvalid},
		{"v2 tcp4", string(v2(1, 0x11, ipv4)) + "GET", 28, "203.0.113.7", nil},
		{"v2 tcp6", string(v2(1, 0x21, ipv6)), 52, "2001:db8::5", nil},
		{"v2 local", string(v2(0, 0x00, nil)), 16, "", nil},
		{"v2 incomplete body", string(v2(1, 0x11, ipv4)[:20]), 0, "", ErrIncomplete},
		{"v2 short tcp4 body", string(v2(1, 0x11, ipv4[:4])), 0, "", ErrInvalid},
		{"v2 bad command", string(v2(5, 0x11, ipv4)), 0, "", ErrInvalid},
		{"no header", "GET /ws HTTP/1.1\r\n", 0, "", nil},
		{"empty", "", 0, "", ErrIncomplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, src, err := Parse([]byte(tc.in))
			if !errors.Is(err, tc.err) || n != tc.n || (tc.src == "") != !src.IsValid() || (src.IsValid() && src.String() != tc.src) {
				t.Fatalf("Parse = %d, %v, %v; want %d, %q, %v", n, src, err, tc.n, tc.src, tc.err)
			}
		})
	}
}

// FuzzParse: never panics, never claims more bytes than it was given, and
// a header it accepts parses the same with anything appended.
func FuzzParse(f *testing.F) {
	f.Add([]byte("PROXY TCP4 203.0.113.7 10.0.0.1 12345 8080\r\n"))
	f.Add([]byte("PROXY UNKNOWN\r\n"))
	f.Add(v2(1, 0x11, []byte{1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2}))
	f.Add(v2(0, 0, nil))
	f.Add([]byte("GET /ws HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, src, err := Parse(data)
		if n < 0 || n > len(data) || (err != nil && n != 0) {
			t.Fatalf("Parse(%q) = %d, %v, %v", data, n, src, err)
		}
		if err == nil && n > 0 {
			n2, src2, err2 := Parse(append(data[:n:n], "GET / HTTP/1.1\r\n"...))
			if n2 != n || src2 != src || err2 != nil {
				t.Fatalf("header %q parses differently with bytes after it", data[:n])
			}
		}
	})
}

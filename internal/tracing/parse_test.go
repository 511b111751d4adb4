package tracing

import "testing"

func TestParse(t *testing.T) {
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	p, good := Parse(ok)
	if !good || p.TraceIDString() != "4bf92f3577b34da6a3ce929d0e0e4736" || p.Flags != 1 || p.String() != ok {
		t.Fatalf("Parse(%q) = %+v %v", ok, p, good)
	}
	if p, good := Parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra"); !good || p.Flags != 0 {
		t.Fatalf("a later version with more fields: %+v %v", p, good)
	}
	for _, bad := range []string{
		"",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", // version 00 has no more fields
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper case
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
	} {
		if p, good := Parse(bad); good {
			t.Errorf("Parse(%q) accepted: %+v", bad, p)
		}
	}
}

// FuzzParse: any input is refused or parsed into a value that formats
// back to the input's first 55 bytes (as version 00).
func FuzzParse(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := Parse(s)
		if !ok {
			return
		}
		if got := p.String(); got[3:] != s[3:55] {
			t.Fatalf("Parse(%q) formats back as %q", s, got)
		}
		if q, ok := Parse(p.String()); !ok || q != p {
			t.Fatalf("round trip of %q: %+v %v", s, q, ok)
		}
	})
}

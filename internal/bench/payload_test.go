package bench

import (
	"encoding/json"
	"testing"

	"github.com/wsgate/wsgate/protocol"
)

func TestDataRoundTrip(t *testing.T) {
	for _, size := range []int{0, 10, 60, 100, 1000} {
		b := appendData(nil, "0123abcd", 42, 7, 1767225600123456789, size)
		if !json.Valid(b) {
			t.Fatalf("size %d: invalid JSON %s", size, b)
		}
		if size > 80 && len(b) != size {
			t.Fatalf("size %d: data is %d bytes", size, len(b))
		}
		p, ok := parseData(b)
		if !ok || string(p.run) != "0123abcd" || p.stream != 42 || p.idx != 7 || p.ts != 1767225600123456789 {
			t.Fatalf("size %d: parsed %+v %v from %s", size, p, ok, b)
		}
	}
}

func TestDataSurvivesMsgpack(t *testing.T) {
	b := appendData(nil, "run00001", 3, 99, 1767225600000000001, 100)
	m, err := protocol.JSONToMsgpack(b)
	if err != nil {
		t.Fatal(err)
	}
	j, err := protocol.MsgpackToJSON(m)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := parseData(j)
	if !ok || string(p.run) != "run00001" || p.stream != 3 || p.idx != 99 || p.ts != 1767225600000000001 {
		t.Fatalf("parsed %+v %v from %s", p, ok, j)
	}
}

func TestParseDataForeign(t *testing.T) {
	for _, in := range []string{
		``, `null`, `"text"`, `{}`, `{"text":"hello"}`, `[1,2]`, `{"i":1,"r":"x","s":2}`,
		`{"i":1.5,"r":"x","s":2,"t":3}`, `{"i":1,"r":"x","s":2,"t":{"a":1}}`, `{"i":1 "r":"x"}`,
		`{"i":1,"r":"x","s":2,"t":3`, `{"i":123456789012345678901,"r":"x","s":2,"t":3}`,
	} {
		if p, ok := parseData([]byte(in)); ok {
			t.Errorf("%q parsed as a bench payload: %+v", in, p)
		}
	}
	// Whitespace, other keys and escapes in strings are fine.
	p, ok := parseData([]byte(` { "z" : "a\"b" , "i" : 5 , "r" : "ab" , "s" : 1 , "t" : -2 } `))
	if !ok || p.idx != 5 || string(p.run) != "ab" || p.stream != 1 || p.ts != -2 {
		t.Fatalf("parsed %+v %v", p, ok)
	}
}

func TestParseDataDoesNotAllocate(t *testing.T) {
	b := appendData(nil, "0123abcd", 42, 7, 1767225600123456789, 100)
	if n := testing.AllocsPerRun(1000, func() { parseData(b) }); n != 0 {
		t.Fatalf("parseData allocates %v times", n)
	}
}

func FuzzParseData(f *testing.F) {
	f.Add(appendData(nil, "0123abcd", 42, 7, 1767225600123456789, 100))
	f.Add([]byte(`{"i":1,"r":"x","s":2,"t":3}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseData(b) // must not panic
	})
}

func TestParseDataMsgpack(t *testing.T) {
	for _, in := range [][]byte{
		appendData(nil, "0123abcd", 42, 7, 1767225600123456789, 100),
		appendData(nil, "run00001", 0, 0, 1, 0),
		appendData(nil, "run00001", 70000, 1<<33, -5, 300),
		[]byte(`{"i":1,"r":"x","s":2,"t":-9223372036854775808,"z":"q","y":-3}`),
	} {
		m, err := protocol.JSONToMsgpack(in)
		if err != nil {
			t.Fatal(err)
		}
		want, ok := parseData(in)
		got, gok := parseDataMsgpack(m)
		if !ok || !gok || string(got.run) != string(want.run) || got.idx != want.idx || got.stream != want.stream || got.ts != want.ts {
			t.Errorf("%s: msgpack %+v %v, JSON %+v %v", in, got, gok, want, ok)
		}
	}
	for _, in := range []string{
		`null`, `"text"`, `{}`, `[1,2]`, `{"i":1,"r":"x","s":2}`, `{"i":1.5,"r":"x","s":2,"t":3}`,
		`{"i":1,"r":"x","s":2,"t":{"a":1}}`, `{"i":1,"r":"x","s":2,"t":true}`, `{"i":1,"r":"x","s":2,"t":3,"n":null}`,
	} {
		m, err := protocol.JSONToMsgpack([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := parseDataMsgpack(m); ok {
			t.Errorf("%s parsed as a bench payload: %+v", in, p)
		}
	}
	m, _ := protocol.JSONToMsgpack(appendData(nil, "0123abcd", 42, 7, 1767225600123456789, 100))
	for n := range len(m) {
		if p, ok := parseDataMsgpack(m[:n]); ok {
			t.Errorf("truncated to %d bytes: parsed %+v", n, p)
		}
	}
	if n := testing.AllocsPerRun(1000, func() { parseDataMsgpack(m) }); n != 0 {
		t.Fatalf("parseDataMsgpack allocates %v times", n)
	}
}

// FuzzParseDataMsgpack: never panics, and agrees with parseData on the
// JSON form whenever both accept.
func FuzzParseDataMsgpack(f *testing.F) {
	m, _ := protocol.JSONToMsgpack(appendData(nil, "0123abcd", 42, 7, 1767225600123456789, 100))
	f.Add(m)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseDataMsgpack(b)
		if !ok {
			return
		}
		j, err := protocol.MsgpackToJSON(b)
		if err != nil {
			return
		}
		want, jok := parseData(j)
		if jok && (got.idx != want.idx || got.stream != want.stream || got.ts != want.ts) {
			t.Fatalf("%x: msgpack %+v, JSON %s %+v", b, got, j, want)
		}
	})
}

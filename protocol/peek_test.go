package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// serverFrames are one frame of every type a gateway sends, as its
// encoders write them.
func serverFrames(t testing.TB, f Format) map[string][]byte {
	t.Helper()
	enc := func(v any) []byte {
		b, err := Encode(f, v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	msg := func(m *Message) []byte {
		b, err := EncodeMessage(f, m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	data := json.RawMessage(`{"i":17,"r":"9f3a61c2","s":4,"t":1767225600123456789,"x":"xxxx"}`)
	return map[string][]byte{
		"welcome":           enc(&Welcome{Type: TypeWelcome, ConnID: "c1", Node: "n1", User: "alice", PingIntervalMS: 25000, InboxSeq: 41}),
		"message":           msg(&Message{ID: "0123456789abcdef", Event: "tick", Data: data, TS: 1767225600123, Target: Target{Type: TargetBroadcast}}),
		"message reliable":  msg(&Message{ID: "m2", Event: "e", Data: data, TS: 1767225600124, Target: Target{Type: TargetUser, ID: "al\"ice"}, Seq: 9_000_000_001}),
		"message null data": msg(&Message{ID: "m3", Event: "e", Data: json.RawMessage(`null`), TS: 1, Target: Target{Type: TargetRoom, ID: "lobby"}}),
		"reply":             enc(&Reply{Type: TypeReply, ID: "7", OK: true, Seq: 12}),
		"reply refused":     enc(&Reply{Type: TypeReply, ID: "8", Error: &ErrorBody{Code: ErrForbidden, Message: "no"}}),
		"pong":              enc(&Pong{Type: TypePong, TS: -1}),
		"pong fraction":     enc(&Pong{Type: TypePong, TS: 1700000000123.25}),
		"gap":               enc(&Gap{Type: TypeGap, From: 3, To: 5, Missed: 3}),
		"redirect":          enc(&Redirect{Type: TypeRedirect, URL: "ws://x/ws", Reason: "drain", RetryAfterMS: 10}),
		"error":             enc(&ErrorFrame{Type: TypeError, Code: ErrBadFrame, Message: "bad"}),
	}
}

func TestPeekServerGatewayFrames(t *testing.T) {
	for _, f := range []Format{JSON, MsgPack} {
		for name, b := range serverFrames(t, f) {
			p, err := PeekServer(f, b)
			if err != nil {
				t.Fatalf("%v %s: PeekServer(%q): %v", f, name, b, err)
			}
			if !agree(t, f, b) {
				t.Fatalf("%v %s: PeekServer and DecodeServer disagree on %q", f, name, b)
			}
			switch name {
			case "message":
				if p.Type != TypeMessage || string(p.ID) != "0123456789abcdef" || p.Seq != 0 || p.TS != 1767225600123 {
					t.Errorf("%v %s: %+v", f, name, p)
				}
				want := `{"i":17,"r":"9f3a61c2","s":4,"t":1767225600123456789,"x":"xxxx"}`
				got := p.Data
				if f == MsgPack {
					got, _ = MsgpackToJSON(p.Data)
				}
				if string(got) != want {
					t.Errorf("%v %s: data %s", f, name, got)
				}
			case "message reliable":
				if p.Seq != 9_000_000_001 {
					t.Errorf("%v %s: seq %d", f, name, p.Seq)
				}
			case "pong":
				if p.Type != TypePong || p.TS != -1 {
					t.Errorf("%v %s: %+v", f, name, p)
				}
			case "reply":
				if p.Type != TypeReply || string(p.ID) != "7" || p.Seq != 12 {
					t.Errorf("%v %s: %+v", f, name, p)
				}
			case "gap", "redirect", "error", "welcome":
				if p.Type != name {
					t.Errorf("%v %s: type %q", f, name, p.Type)
				}
			}
		}
	}
}

func TestPeekServerDoesNotAllocate(t *testing.T) {
	for _, f := range []Format{JSON, MsgPack} {
		frames := serverFrames(t, f)
		for _, name := range []string{"message", "message reliable", "pong", "gap"} {
			b := frames[name]
			if n := testing.AllocsPerRun(100, func() {
				if _, err := PeekServer(f, b); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%v %s: %v allocations per PeekServer", f, name, n)
			}
		}
	}
}

// TestPeekServerJSONCases covers what encoding/json does beyond the
// gateway's own output: PeekServer must refuse what DecodeServer refuses,
// and agree with it otherwise.
func TestPeekServerJSONCases(t *testing.T) {
	cases := []struct {
		in        string
		peekable  bool // PeekServer succeeds
		typ       string
		id        string
		seq       int64
		ts        float64
		data      string
		notPeekOK bool // ErrNotPeekable expected (DecodeServer succeeds)
	}{
		{in: ` {"type":"message","seq":3,"ts":5,"data":[1,{"a":null}]} `, peekable: true, typ: "message", seq: 3, ts: 5, data: `[1,{"a":null}]`},
		{in: `{"TYPE":"pong","Ts":2.5}`, peekable: true, typ: "pong", ts: 2.5},
		{in: `{"type":"message","ſeq":4}`, peekable: true, typ: "message", seq: 4}, // U+017F folds to s, as in encoding/json
		{in: `{"type":"message","seq":4,"seq":null}`, peekable: true, typ: "message", seq: 4},
		{in: `{"type":"pong","type":"gap"}`, peekable: true, typ: "gap"},
		{in: `{"type":"message","data":null}`, peekable: true, typ: "message", data: "null"},
		{in: `{"type":"message","data":1,"data":{"b":2}}`, peekable: true, typ: "message", data: `{"b":2}`},
		{in: `{"type":"message","id":"a\"b\u00e9"}`, peekable: true, typ: "message", id: "a\"bé"},
		{in: "{\"type\":\"message\",\"id\":\"a\xffb\"}", peekable: true, typ: "message", id: "a\uFFFDb"},
		{in: `{"type":"mess\u0061ge"}`, peekable: true, typ: "message"},
		{in: `{"type":"custom","target":{"type":"room","id":"x","more":[1]},"error":null,"ok":true}`, peekable: true, typ: "custom"},
		{in: `{"type":"message","ts":-0}`, peekable: true, typ: "message", ts: math.Copysign(0, -1)},
		{in: `{"type":"message","ts":12345678901234567890123}`, peekable: true, typ: "message", ts: 12345678901234567890123},
		{in: `{"type":"message","seq":-9223372036854775808}`, peekable: true, typ: "message", seq: math.MinInt64},
		{in: `{"typ\u0065":"message"}`, notPeekOK: true},
		// refused by DecodeServer, so by PeekServer
		{in: `{"type":"message","seq":9223372036854775808}`},
		{in: `{"type":"message","seq":1.0}`},
		{in: `{"type":"message","seq":"1"}`},
		{in: `{"type":"message","ts":1e400}`},
		{in: `{"type":"message","ok":1}`},
		{in: `{"type":"message","target":[]}`},
		{in: `{"type":"message","target":{"id":5}}`},
		{in: `{"type":"message","error":{"code":true}}`},
		{in: `{"type":"message","event":7}`},
		{in: `{"type":1}`},
		{in: `{"type":""}`},
		{in: `{"id":"x"}`},
		{in: `null`},
		{in: `[]`},
		{in: `{"type":"message"} x`},
		{in: `{"type":"message",}`},
		{in: `{"type":"message","data":01}`},
		{in: `{"type":"message","data":"\x"}`},
		{in: "{\"type\":\"message\",\"data\":\"\x01\"}"},
		{in: `{"type":"message","data":[1,]}`},
		{in: `{"type":"message"`},
		{in: ``},
	}
	for _, c := range cases {
		b := []byte(c.in)
		p, err := PeekServer(JSON, b)
		_, derr := DecodeServer(JSON, b)
		switch {
		case c.notPeekOK:
			if !errors.Is(err, ErrNotPeekable) || derr != nil {
				t.Errorf("%s: PeekServer %v, DecodeServer %v; want ErrNotPeekable and success", c.in, err, derr)
			}
			continue
		case !c.peekable:
			if err == nil || derr == nil {
				t.Errorf("%s: PeekServer %+v, %v; DecodeServer %v: want both to refuse", c.in, p, err, derr)
			}
			continue
		case err != nil:
			t.Errorf("%s: PeekServer: %v", c.in, err)
			continue
		}
		if p.Type != c.typ || string(p.ID) != c.id || p.Seq != c.seq || math.Float64bits(p.TS) != math.Float64bits(c.ts) || string(p.Data) != c.data {
			t.Errorf("%s: %+v (data %s)", c.in, p, p.Data)
		}
		if !agree(t, JSON, b) {
			t.Errorf("%s: disagrees with DecodeServer", c.in)
		}
	}
}

func TestPeekServerMsgpackCases(t *testing.T) {
	mp := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ok := [][]byte{
		mp(map[string]any{"type": "message", "seq": uint64(5), "ts": float32(1.5), "data": map[string]any{"a": []any{1, "x", nil, true, 2.5}}, "extra": map[string]any{"n": []byte{1, 2}}}),
		mp(map[string]any{"type": "pong", "ts": int8(-1), "id": nil}),
		mp(map[string]any{"type": "message", "seq": nil, "data": nil}),
		mp(map[string]any{"type": []byte("gap"), "ts": 1.25}),
	}
	for _, b := range ok {
		if _, err := PeekServer(MsgPack, b); err != nil {
			t.Errorf("%x: %v", b, err)
		}
		if !agree(t, MsgPack, b) {
			t.Errorf("%x: disagrees with DecodeServer", b)
		}
	}
	bad := [][]byte{
		mp(map[string]any{"seq": 1}),
		mp(map[string]any{"type": 5}),
		mp(map[string]any{"type": "message", "seq": "1"}),
		mp(map[string]any{"type": "message", "ts": "1"}),
		mp([]any{"type", "message"}),
		{0xc0},
		{0x81, 0xa4, 't', 'y', 'p', 'e'},
		{0x82, 0xa4, 't', 'y', 'p', 'e', 0xa1, 'x', 0xa1, 'd', 0xdd, 0xff, 0xff, 0xff, 0xff},
		{0x81, 0xc1},
	}
	for _, b := range bad {
		if p, err := PeekServer(MsgPack, b); err == nil {
			t.Errorf("%x: accepted as %+v", b, p)
		}
	}
}

// agree reports whether PeekServer and DecodeServer agree on b: when
// DecodeServer refuses a JSON frame PeekServer must refuse it too; when
// both succeed, every field PeekServer returns must match.
func agree(t testing.TB, f Format, b []byte) bool {
	t.Helper()
	p, perr := PeekServer(f, b)
	if perr != nil && f == MsgPack {
		// Nothing is promised then; and the MessagePack decoder allocates
		// whatever length a truncated input declares, which a fuzzer
		// turns into gigabytes. (When PeekServer succeeds, every length
		// fits in b.)
		return true
	}
	sf, derr := DecodeServer(f, b)
	if derr != nil {
		if f == JSON && perr == nil {
			t.Logf("PeekServer accepted %q as %+v; DecodeServer: %v", b, p, derr)
			return false
		}
		return true
	}
	if perr != nil {
		if !errors.Is(perr, ErrNotPeekable) {
			t.Logf("PeekServer refused %q (%v); DecodeServer accepted it", b, perr)
			return false
		}
		return true
	}
	data := p.Data
	if f == MsgPack && data != nil {
		j, err := MsgpackToJSON(data)
		if err != nil {
			t.Logf("data %x: %v", data, err)
			return false
		}
		data = j
	}
	if p.Type != sf.Type || string(p.ID) != sf.ID || p.Seq != sf.Seq ||
		math.Float64bits(p.TS) != math.Float64bits(sf.TS) || !bytes.Equal(data, sf.Data) {
		t.Logf("%q:\npeek   type %q id %q seq %d ts %v data %q\ndecode type %q id %q seq %d ts %v data %q",
			b, p.Type, p.ID, p.Seq, p.TS, data, sf.Type, sf.ID, sf.Seq, sf.TS, sf.Data)
		return false
	}
	return true
}

// FuzzPeekServer checks PeekServer against DecodeServer on arbitrary
// bytes in both formats (see agree).
func FuzzPeekServer(f *testing.F) {
	for _, format := range []Format{JSON, MsgPack} {
		for _, b := range serverFrames(f, format) {
			f.Add(b, format == MsgPack)
		}
	}
	for _, s := range []string{
		`{"Type":"message","SEQ":1,"ts":1e3,"data":{"a":[true,false,null,-0.5e-3,"\u00e9\n"]}}`,
		`{"type":"pong","ts":null,"id":null,"target":null}`,
		`{"type":"message","target":{"Type":"room","ID":"x"}}`,
		`{"type":"x","ping_interval_ms":1,"inbox_seq":-2,"from":0,"to":1,"missed":2,"retry_after_ms":3,"ok":false,"url":"u","reason":"r","code":"c","message":"m","conn_id":"i","node":"n","user":"u","event":"e"}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, mp bool) {
		format := JSON
		if mp {
			format = MsgPack
		}
		if !agree(t, format, b) {
			t.Fatal("PeekServer and DecodeServer disagree")
		}
	})
}

func BenchmarkPeekServer(b *testing.B) {
	for _, f := range []Format{JSON, MsgPack} {
		in := serverFrames(b, f)["message"]
		b.Run(f.String(), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := PeekServer(f, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeServer is the full decode PeekServer replaces on the hot
// path, for comparison.
func BenchmarkDecodeServer(b *testing.B) {
	for _, f := range []Format{JSON, MsgPack} {
		in := serverFrames(b, f)["message"]
		b.Run(f.String(), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if _, err := DecodeServer(f, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestServerFieldIndex(t *testing.T) {
	for k, f := range serverFields {
		if got := serverFieldIndex([]byte(f.name)); got != k {
			t.Errorf("%s: index %d, want %d", f.name, got, k)
		}
	}
	if serverFieldIndex([]byte("nope")) != -1 {
		t.Error("unknown name found")
	}
}

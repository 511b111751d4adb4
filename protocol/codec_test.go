package protocol

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestDecodeClientJSON(t *testing.T) {
	cases := []struct {
		in   string
		code string // "" = accepted
		typ  string
	}{
		{`{"type":"ping"}`, "", "ping"},
		{`{"type":"ping","ts":123,"extra":[1,2]}`, "", "ping"},
		{`  {"type":"ack","seq":5}  `, "", "ack"},
		{`{"type":"join","id":"1","room":"lobby"}`, "", "join"},
		{`{"type":"publish","id":"p","target":{"type":"user","id":"bob"},"event":"e","data":{"a":1}}`, "", "publish"},
		{`{"type":"publish","id":"p","target":{"type":"room","id":"r"}}`, "", "publish"},
		{`{"type":"ping",`, ErrBadFrame, ""},
		{`[1,2]`, ErrBadFrame, ""},
		{``, ErrBadFrame, ""},
		{`"ping"`, ErrBadFrame, ""},
		{`{}`, ErrBadFrame, ""},
		{`{"type":5}`, ErrBadFrame, ""},
		{`{"type":"dance"}`, ErrUnknownType, ""},
		{`{"type":"ack","seq":-1}`, ErrBadFrame, ""},
		{`{"type":"ack","seq":"x"}`, ErrBadFrame, ""},
		{`{"type":"join","room":"lobby"}`, ErrBadFrame, ""},
		{`{"type":"join","id":"1","room":""}`, ErrBadFrame, ""},
		{`{"type":"join","id":"1","room":"a\u0001b"}`, ErrBadFrame, ""},
		{`{"type":"join","id":"1","room":"` + strings.Repeat("r", 300) + `"}`, ErrBadFrame, ""},
		{`{"type":"publish","id":"p"}`, ErrBadFrame, ""},
		{`{"type":"publish","id":"p","target":"user:bob"}`, ErrBadFrame, ""},
		{`{"type":"publish","id":"p","target":{"type":"broadcast"}}`, ErrBadFrame, ""},
		{`{"type":"publish","id":"p","target":{"type":"user","id":""}}`, ErrBadFrame, ""},
		{"{\"type\":\"ping\",\"x\":\"\xff\"}", ErrBadFrame, ""},
		// Names that forge lines or reorder text (contract section 15).
		{`{"type":"join","id":"1","room":"ad\u202emin"}`, ErrBadFrame, ""},
		{`{"type":"join","id":"1","room":"a\u2066b"}`, ErrBadFrame, ""},
		{`{"type":"join","id":"1","room":"a\u2029b"}`, ErrBadFrame, ""},
		{`{"type":"join","id":"1","room":"a\u0085b"}`, ErrBadFrame, ""},
		{`{"type":"publish","id":"p","target":{"type":"user","id":"ad\u202dmin"}}`, ErrBadFrame, ""},
		{`{"type":"publish","id":"p","target":{"type":"room","id":"a\u2028b"}}`, ErrBadFrame, ""},
		{`{"type":"join","id":"1","room":"café-\u200d"}`, "", "join"},
		{`{"type":"refresh","id":"r","token":"a.b.c"}`, "", "refresh"},
		{`{"type":"refresh","token":"a.b.c"}`, ErrBadFrame, ""},
		{`{"type":"refresh","id":"r"}`, ErrBadFrame, ""},
		{`{"type":"refresh","id":"r","token":7}`, ErrBadFrame, ""},
		// History pages (v3, contract 19).
		{`{"type":"history","id":"h","room":"r"}`, "", "history"},
		{`{"type":"history","id":"h","room":"r","since":3,"limit":1000}`, "", "history"},
		{`{"type":"history","id":"h","room":"r","before":9,"limit":1,"reverse":true}`, "", "history"},
		{`{"type":"history","id":"h","room":"r","reverse":true}`, "", "history"},
		{`{"type":"history","room":"r"}`, ErrBadFrame, ""},
		{`{"type":"history","id":"h"}`, ErrBadFrame, ""},
		{`{"type":"history","id":"h","room":"r","limit":0}`, ErrBadFrame, ""},
		{`{"type":"history","id":"h","room":"r","limit":1001}`, ErrBadFrame, ""},
		{`{"type":"history","id":"h","room":"r","since":-1}`, ErrBadFrame, ""},
		{`{"type":"history","id":"h","room":"r","before":-1,"reverse":true}`, ErrBadFrame, ""},
		{`{"type":"history","id":"h","room":"r","since":1,"before":5,"reverse":true}`, ErrBadFrame, ""},
		{`{"type":"history","id":"h","room":"r","before":5}`, ErrBadFrame, ""},
		{`{"type":"history","id":"h","room":"r","since":5,"reverse":true}`, ErrBadFrame, ""},
		{`{"type":"history","id":"h","room":"r","limit":"9"}`, ErrBadFrame, ""},
	}
	for _, tc := range cases {
		cf, err := DecodeClient(JSON, []byte(tc.in))
		if tc.code == "" {
			if err != nil {
				t.Errorf("%q: unexpected error %v", tc.in, err)
			} else if cf.Type != tc.typ {
				t.Errorf("%q: type %q", tc.in, cf.Type)
			}
			continue
		}
		de, ok := err.(*DecodeError)
		if !ok || de.Code != tc.code {
			t.Errorf("%q: want %s, got %v", tc.in, tc.code, err)
		}
		if ok && de.Msg == "" {
			t.Errorf("%q: empty message", tc.in)
		}
	}
}

func TestDecodeClientMsgpack(t *testing.T) {
	b, _ := msgpack.Marshal(map[string]any{"type": "publish", "id": "p1", "target": map[string]any{"type": "room", "id": "r"}, "event": "e", "data": map[string]any{"n": 3, "s": "x"}})
	cf, err := DecodeClient(MsgPack, b)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(cf.Data, &data); err != nil || data["n"].(float64) != 3 || data["s"] != "x" {
		t.Fatalf("data %s: %v", cf.Data, err)
	}
	if _, err := DecodeClient(MsgPack, []byte{0xc1}); err == nil {
		t.Fatal("invalid msgpack accepted")
	}
	bad, _ := msgpack.Marshal(map[string]any{"type": "publish", "id": "p", "target": map[string]any{"type": "user", "id": "u"}, "data": map[int]int{1: 2}})
	if _, err := DecodeClient(MsgPack, bad); err == nil {
		t.Fatal("non-string map keys accepted as data")
	}
}

func TestMessageEncodings(t *testing.T) {
	m := &Message{ID: "id1", Event: "ev\"<x>", Data: json.RawMessage(`{"k":[1,2.5,"é"]}`), TS: 1700000000123, Target: Target{Type: "user", ID: "al\nice"}, Seq: 7}
	var got map[string]any
	if err := json.Unmarshal(AppendMessageJSON(nil, m), &got); err != nil {
		t.Fatal(err)
	}
	if got["type"] != "message" || got["id"] != "id1" || got["event"] != "ev\"<x>" || got["seq"].(float64) != 7 || got["ts"].(float64) != 1700000000123 {
		t.Fatalf("json: %v", got)
	}
	if tg := got["target"].(map[string]any); tg["type"] != "user" || tg["id"] != "al\nice" {
		t.Fatalf("target: %v", tg)
	}
	mp, err := EncodeMessage(MsgPack, m)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := msgpack.Unmarshal(mp, &back); err != nil {
		t.Fatal(err)
	}
	if back["seq"] != int8(7) && back["seq"] != int64(7) && back["seq"] != uint8(7) {
		t.Fatalf("msgpack seq: %T %v", back["seq"], back["seq"])
	}
	noSeq := *m
	noSeq.Seq = 0
	if strings.Contains(string(AppendMessageJSON(nil, &noSeq)), `"seq"`) {
		t.Fatal("seq present on a non-reliable message")
	}
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "\x00\x1f\t\n\r", "<&>", "é✓😀", "bad\xffutf8", "\u2028\u2029"} {
		want, _ := json.Marshal(s)
		if got := AppendJSONString(nil, s); string(got) != string(want) {
			t.Errorf("%q: got %s want %s", s, got, want)
		}
	}
}

func TestCloseActions(t *testing.T) {
	for code, want := range map[int]Action{1000: ActionStop, 1001: ActionBackoff, 1008: ActionStop, 1009: ActionStop, 4001: ActionNow,
		4003: ActionStop, 4008: ActionBackoff, 4009: ActionStop, 4401: ActionRefreshToken, 4429: ActionBackoff, 1006: ActionBackoff} {
		if got := CloseAction(code); got != want {
			t.Errorf("code %d: %v, want %v", code, got, want)
		}
	}
}

func BenchmarkAppendMessageJSON(b *testing.B) {
	m := &Message{ID: "0123456789abcdef", Event: "tick", Data: json.RawMessage(`{"price":101.25,"symbol":"ACME","side":"buy","qty":100}`), TS: 1700000000123, Target: Target{Type: "room", ID: "prices"}}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendMessageJSON(buf[:0], m)
	}
}

func BenchmarkDecodeClientPing(b *testing.B) {
	in := []byte(`{"type":"ping","ts":1700000000123}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeClient(JSON, in); err != nil {
			b.Fatal(err)
		}
	}
}

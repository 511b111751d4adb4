package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestEncodeClientRoundTrip(t *testing.T) {
	ts := 1700000000123.25
	before, since, limit := int64(77), int64(5), int64(20)
	frames := []*ClientFrame{
		{Type: TypeHistory, ID: "7", Room: "chat:1", Before: &before, Limit: &limit, Reverse: true},
		{Type: TypeHistory, ID: "8", Room: "chat:1", Since: &since},
		{Type: TypePing},
		{Type: TypePing, TS: &ts},
		{Type: TypeAck, Seq: 42},
		{Type: TypeJoin, ID: "1", Room: "lobby"},
		{Type: TypeLeave, ID: "2", Room: "team-\"a\""},
		{Type: TypePublish, ID: "3", Target: &Target{Type: TargetRoom, ID: "lobby"}, Event: "chat", Data: json.RawMessage(`{"text":"hi","n":12345678901,"f":1.5}`)},
		{Type: TypePublish, ID: "4", Target: &Target{Type: TargetUser, ID: "bob"}},
		{Type: TypeSend, ID: "5", Event: "chat", Data: json.RawMessage(`{"text":"hi"}`)},
		{Type: TypeRPC, ID: "6", Method: "history.get", Data: json.RawMessage(`[1]`)},
	}
	for _, f := range []Format{JSON, MsgPack} {
		for _, cf := range frames {
			b, err := EncodeClient(f, cf)
			if err != nil {
				t.Fatalf("%v %s: encode: %v", f, cf.Type, err)
			}
			got, err := DecodeClient(f, b)
			if err != nil {
				t.Fatalf("%v %s: decode %q: %v", f, cf.Type, b, err)
			}
			want := *cf
			if want.Type == TypePublish && len(want.Data) == 0 {
				want.Data = json.RawMessage("null")
			}
			if len(want.Data) > 0 {
				if !jsonEqual(t, got.Data, want.Data) {
					t.Errorf("%v %s: data %s, want %s", f, cf.Type, got.Data, want.Data)
				}
				got.Data, want.Data = nil, nil
			}
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("%v %s: round trip\n got %+v\nwant %+v", f, cf.Type, *got, want)
			}
		}
	}
}

func TestEncodeClientRefusesBadData(t *testing.T) {
	if _, err := EncodeClient(JSON, &ClientFrame{Type: TypePublish, ID: "1", Data: json.RawMessage(`{`)}); err == nil {
		t.Fatal("invalid JSON data accepted")
	}
}

func TestDecodeServer(t *testing.T) {
	for _, f := range []Format{JSON, MsgPack} {
		b, _ := Encode(f, &Welcome{Type: TypeWelcome, ConnID: "c1", Node: "n1", User: "alice", PingIntervalMS: 25000, InboxSeq: 41})
		sf, err := DecodeServer(f, b)
		if err != nil {
			t.Fatal(err)
		}
		if w := sf.AsWelcome(); w.ConnID != "c1" || w.Node != "n1" || w.User != "alice" || w.PingIntervalMS != 25000 || w.InboxSeq != 41 {
			t.Errorf("%v: welcome %+v", f, w)
		}

		msg := &Message{ID: "m1", Event: "e", Data: json.RawMessage(`{"a":[1,2]}`), TS: 1700000000123, Target: Target{Type: TargetUser, ID: "alice"}, Seq: 7}
		b, err = EncodeMessage(f, msg)
		if err != nil {
			t.Fatal(err)
		}
		sf, err = DecodeServer(f, b)
		if err != nil {
			t.Fatal(err)
		}
		m := sf.AsMessage()
		if !jsonEqual(t, m.Data, msg.Data) {
			t.Errorf("%v: data %s", f, m.Data)
		}
		m.Data = msg.Data
		if sf.Type != TypeMessage || !reflect.DeepEqual(&m, msg) {
			t.Errorf("%v: message %+v, want %+v", f, m, *msg)
		}

		b, _ = Encode(f, &Reply{Type: TypeReply, ID: "9", Error: &ErrorBody{Code: ErrForbidden, Message: "no"}})
		sf, _ = DecodeServer(f, b)
		if sf.Type != TypeReply || sf.ID != "9" || sf.OK || sf.Error == nil || sf.Error.Code != ErrForbidden {
			t.Errorf("%v: reply %+v", f, sf)
		}
		b, _ = Encode(f, &Pong{Type: TypePong, TS: 12.5})
		if sf, _ = DecodeServer(f, b); sf.TS != 12.5 {
			t.Errorf("%v: pong %+v", f, sf)
		}
		b, _ = Encode(f, &Gap{Type: TypeGap, From: 3, To: 5, Missed: 3})
		if sf, _ = DecodeServer(f, b); sf.From != 3 || sf.To != 5 || sf.Missed != 3 {
			t.Errorf("%v: gap %+v", f, sf)
		}
		b, _ = Encode(f, &Redirect{Type: TypeRedirect, URL: "ws://x/ws", Reason: "drain", RetryAfterMS: 10})
		if sf, _ = DecodeServer(f, b); sf.URL != "ws://x/ws" || sf.Reason != "drain" || sf.RetryAfterMS != 10 {
			t.Errorf("%v: redirect %+v", f, sf)
		}
		b, _ = Encode(f, &ErrorFrame{Type: TypeError, Code: ErrBadFrame, Message: "bad"})
		if sf, _ = DecodeServer(f, b); sf.Code != ErrBadFrame || sf.Message != "bad" {
			t.Errorf("%v: error %+v", f, sf)
		}
	}
	if _, err := DecodeServer(JSON, []byte(`{"id":"x"}`)); err == nil {
		t.Error("frame without type accepted")
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func TestEncodeReplyResult(t *testing.T) {
	r := &Reply{Type: TypeReply, ID: "7", OK: true, Result: json.RawMessage(`{"a":[1,"x"],"b":null}`)}
	for _, f := range []Format{JSON, MsgPack} {
		b, err := EncodeReply(f, r)
		if err != nil {
			t.Fatal(err)
		}
		sf, err := DecodeServer(f, b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if sf.ID != "7" || !sf.OK || string(sf.Result) != `{"a":[1,"x"],"b":null}` {
			t.Fatalf("%s: decoded %+v result %s", f, sf, sf.Result)
		}
	}
}

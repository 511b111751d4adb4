package protocol

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeClient feeds arbitrary bytes to the client frame decoder in
// both formats: it must never panic, must classify every refusal with a
// contract error code, and an accepted publish carries valid JSON data.
func FuzzDecodeClient(f *testing.F) {
	for _, s := range []string{
		`{"type":"ping","ts":1}`, `{"type":"ack","seq":3}`, `{"type":"join","id":"1","room":"lobby"}`,
		`{"type":"publish","id":"p","target":{"type":"user","id":"u"},"event":"e","data":{"a":[1,{"b":null}]}}`,
		`{"type":"leave","id":"2","room":"x"}`, `{"type":`, `[]`, "\x81\xa4type\xa4ping", "\xff\xfe",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, b []byte, mp bool) {
		format := JSON
		if mp {
			format = MsgPack
		}
		cf, err := DecodeClient(format, b)
		if err != nil {
			de, ok := err.(*DecodeError)
			if !ok || (de.Code != ErrBadFrame && de.Code != ErrUnknownType) || de.Msg == "" {
				t.Fatalf("refusal without a contract code: %#v", err)
			}
			return
		}
		if (cf.Type == TypePublish || cf.Type == TypeSend || cf.Type == TypeRPC) && !json.Valid(cf.Data) {
			t.Fatalf("accepted %s with invalid data %q", cf.Type, cf.Data)
		}
		if (cf.Type == TypeSend || cf.Type == TypeRPC) && cf.ID == "" {
			t.Fatalf("accepted %s without an id", cf.Type)
		}
	})
}

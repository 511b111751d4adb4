package protocol

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// FuzzDecodeClient feeds arbitrary bytes to the client frame decoder in
// both formats: it must never panic, must classify every refusal with a
// contract error code, and an accepted publish carries valid JSON data.
func FuzzDecodeClient(f *testing.F) {
	for _, s := range []string{
		`{"type":"ping","ts":1}`, `{"type":"ack","seq":3}`, `{"type":"join","id":"1","room":"lobby"}`,
		`{"type":"publish","id":"p","target":{"type":"user","id":"u"},"event":"e","data":{"a":[1,{"b":null}]}}`,
		`{"type":"leave","id":"2","room":"x"}`, `{"type":"history","id":"h","room":"r","before":9,"limit":2,"reverse":true}`, `{"type":`, `[]`, "\x81\xa4type\xa4ping", "\xff\xfe",
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
		if cf.Type == TypeHistory && (cf.ID == "" || cf.Limit != nil && (*cf.Limit < 1 || *cf.Limit > MaxHistoryLimit) ||
			cf.Since != nil && (*cf.Since < 0 || cf.Before != nil || cf.Reverse) || cf.Before != nil && (*cf.Before < 0 || !cf.Reverse)) {
			t.Fatalf("accepted a history frame outside its rules: %+v", cf)
		}
	})
}

// FuzzValidDevice: the handshake's device parameter is accepted exactly
// when it matches the contract's pattern.
func FuzzValidDevice(f *testing.F) {
	for _, s := range []string{"default", "phone.2", "a_b-C", "", "a b", "é", strings.Repeat("x", 65)} {
		f.Add(s)
	}
	pattern := regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidDevice(s) == nil, pattern.MatchString(s); got != want {
			t.Fatalf("ValidDevice(%q) accepted %v, the pattern %v", s, got, want)
		}
	})
}

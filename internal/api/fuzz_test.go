package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzAPIBodies feeds arbitrary bytes to the parsers of the publish and
// batch bodies: no panic; a refusal is a 400 with a message; the batch
// scanner, when it accepts a body, splits it exactly as encoding/json.
func FuzzAPIBodies(f *testing.F) {
	for _, s := range []string{
		`{"target":{"type":"user","id":"u"},"event":"e","data":{"a":[1,2]},"reliable":true,"class":"chat","idempotency_key":"k"}`,
		`{"target":{"type":"room","id":"r"},"data":"x"}`, `{"target":{"type":"broadcast"}}`,
		`{"messages":[{"target":{"type":"user","id":"a"}},{"target":{"type":"room","id":"b"},"data":null}]}`,
		`{"messages":[]}`, `{"messages":[1,"x",{}]} `, `{"target":`, `[]`, `{"target":{"type":"user","id":"\u0000"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := DecodePublish(b); err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Status != 400 || ae.Message == "" {
				t.Fatalf("publish body refused without a 400 and a message: %#v", err)
			}
		}
		if _, err := DecodeBatchMessage(b); err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Status != 400 || ae.Message == "" {
				t.Fatalf("batch message refused without a 400 and a message: %#v", err)
			}
		}
		msgs, ok := ScanBatch(b)
		if !ok {
			return
		}
		var want struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("scanBatch accepted %q, encoding/json refuses it: %v", b, err)
		}
		if len(msgs) != len(want.Messages) {
			t.Fatalf("%q: ScanBatch %d messages, encoding/json %d", b, len(msgs), len(want.Messages))
		}
		for i := range msgs {
			if !bytes.Equal(bytes.TrimSpace(msgs[i]), bytes.TrimSpace(want.Messages[i])) {
				t.Fatalf("%q: message %d: %q vs %q", b, i, msgs[i], want.Messages[i])
			}
		}
	})
}

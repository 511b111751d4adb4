package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/wsgate/wsgate/protocol"
)

// batchDecodeCorpus is shared by the differential test and the fuzz seeds.
var batchDecodeCorpus = []string{
	`{"target":{"type":"user","id":"u1"},"event":"e","class":"chat","reliable":true,"data":{"a":[1,2,{"b":"c"}],"s":"x\"y"}}`,
	`{"target":{"type":"user","id":"u1"},"data":null}`,
	`{"target":{"type":"user","id":"u1"}}`,
	`{"data":"str","target":{"id":"u 2","type":"user"},"reliable":false}`,
	`{ "target" : { "type" : "room" , "id" : "r" } , "data" : 12.5e3 , "event" : "" }`,
	`{"target":{"type":"broadcast"},"data":[],"idempotency_key":"k1"}`,
	`{"target":{"type":"user","id":"u1"},"data":true}`,
	`{"target":{"type":"user","id":"u1"},"data":-1}`,
	`{"target":{"type":"user","id":"u1"},"data":"\u00e9\\"}`,
	`{"target":{"type":"user","id":"u1"},"data":{}}`,
	`{"target":{"type":"user","id":"u1"},"data":[[],[{}]]}`,
	// Not the common shape: DecodePublish decides.
	`{"Target":{"type":"user","id":"u1"}}`,
	`{"target":{"type":"user","id":"u1"},"target":{"type":"user","id":"u2"}}`,
	`{"target":{"type":"user","id":"u1","id":"u3"}}`,
	`{"target":{"type":"user","id":"u1","extra":1}}`,
	`{"target":{"type":"user","id":"\u00e9"}}`,
	`{"target":{"type":"user","id":"é"}}`,
	`{"target":{"type":"user","id":"u1"},"event":null,"class":null,"reliable":null}`,
	`{"target":{"type":"user","id":"u1"},"unknown":{"x":1}}`,
	`{"target":null}`,
	`{"target":"user:u"}`,
	`{"target":{}}`,
	`{"target":{"type":1}}`,
	`{"event":"e"}`,
	`{}`,
	`[1]`,
	`"x"`,
	`{"target":{"type":"user","id":"u1"},"reliable":"yes"}`,
	`{"target":{"type":"user","id":"u1"},"event":5}`,
}

type decoded struct {
	Req PublishRequest
	Err string
}

func decodeBoth(raw []byte) (fast, slow decoded) {
	r, err := DecodeBatchMessage(raw)
	fast = decoded{Req: r}
	if err != nil {
		fast.Err = err.Error()
	}
	r, err = DecodePublish(raw)
	slow = decoded{Req: r}
	if err != nil {
		slow.Err = err.Error()
	}
	return fast, slow
}

// The batch decoder's fast path gives exactly what DecodePublish gives,
// errors included.
func TestBatchDecoderMatchesDecodePublish(t *testing.T) {
	fastHits := 0
	for _, in := range batchDecodeCorpus {
		if !json.Valid([]byte(in)) {
			t.Fatalf("corpus entry is not valid JSON: %s", in)
		}
		if _, ok := ScanPublish([]byte(in)); ok {
			fastHits++
		}
		fast, slow := decodeBoth([]byte(in))
		if !reflect.DeepEqual(fast, slow) {
			t.Errorf("%s:\n fast %+v\n slow %+v", in, fast, slow)
		}
	}
	if fastHits < 10 {
		t.Errorf("only %d corpus entries took the fast path", fastHits)
	}
}

func FuzzBatchDecoder(f *testing.F) {
	for _, s := range batchDecodeCorpus {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if !json.Valid([]byte(in)) {
			return // the batch body is validated before its messages are decoded
		}
		fast, slow := decodeBoth([]byte(in))
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q:\n fast %+v\n slow %+v", in, fast, slow)
		}
	})
}

// ScanBatch splits exactly as json.Unmarshal into {"messages":[...]}
// does, or leaves the body to it.
func TestScanBatchMatchesUnmarshal(t *testing.T) {
	for _, in := range []string{
		`{"messages":[]}`,
		`{"messages":[{"target":{"type":"user","id":"a"}},{"target":{"type":"broadcast"},"data":[1,"]",{"x":"}"}]}]}`,
		` { "messages" : [ 1 , "two" , null , {"a":{}} ] } `,
		`{"messages":null}`,
		`{"Messages":[1]}`,
		`{"messages":[1],"extra":2}`,
		`{"messages":[1],"messages":[2]}`,
		`{"messages":{}}`,
		`{"messages":[1,]}`,
		`{"messages":[1]`,
	} {
		var want struct {
			Messages []json.RawMessage `json:"messages"`
		}
		werr := json.Unmarshal([]byte(in), &want)
		got, ok := ScanBatch([]byte(in))
		if !ok {
			continue // decided by json.Unmarshal itself
		}
		if werr != nil || len(got) != len(want.Messages) {
			t.Errorf("%s: scan %q, unmarshal %q (%v)", in, got, want.Messages, werr)
			continue
		}
		for i := range got {
			if !bytes.Equal(got[i], want.Messages[i]) {
				t.Errorf("%s: message %d = %q, want %q", in, i, got[i], want.Messages[i])
			}
		}
	}
}

// The batch answer reads as WriteJSON's encoding of the same results.
func TestAppendResultsMatchesJSON(t *testing.T) {
	yes, no := true, false
	results := []any{
		PublishResult{ID: "a1", Seq: 3, Online: &yes},
		PublishResult{ID: "a2", Online: &no},
		PublishResult{ID: "a\"3"},
		map[string]protocol.ErrorBody{"error": {Code: "bad_request", Message: "target <x> & \"y\""}},
	}
	want, _ := json.Marshal(map[string]any{"results": results})
	var a, b any
	if err := json.Unmarshal(AppendResults(nil, results), &a); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(want, &b)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("got %s, want %s", AppendResults(nil, results), want)
	}
}

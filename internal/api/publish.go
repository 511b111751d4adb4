package api

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/wsgate/wsgate/protocol"
)

// PublishRequest is one message to publish (API body, client publish).
type PublishRequest struct {
	Target         protocol.Target
	Event          string
	Data           json.RawMessage
	Reliable       bool
	Class          string
	IdempotencyKey string
	// Traceparent is the caller's W3C trace context (the traceparent
	// header or metadata); the message carries it to the delivering
	// nodes. An invalid value is ignored.
	Traceparent string
	From        string // the publishing client's user id (client publish frames); empty for the API
	// Except is a connection id that does not get the message (contract
	// 19: the API's "except", a client publish to a room with echo off).
	Except string
	// Key conflates realtime messages (contract 19): in a connection's
	// full queue, a queued message of the same target and key is
	// replaced by this one.
	Key string

	// MessageID, when set, is the message's id (a downstream record's,
	// derived from its key by the node). No API body sets it.
	MessageID string `json:"-"`
}

// PublishResult is the API's answer to a publish.
type PublishResult struct {
	ID     string `json:"id"`
	Seq    int64  `json:"seq,omitempty"`
	Online *bool  `json:"online,omitempty"`
}

// publishBody is the API's publish object; fields are decoded one by one
// so that each wrong type gets its own message.
type publishBody struct {
	Target         json.RawMessage `json:"target"`
	Event          json.RawMessage `json:"event"`
	Data           json.RawMessage `json:"data"`
	Reliable       json.RawMessage `json:"reliable"`
	Class          json.RawMessage `json:"class"`
	IdempotencyKey json.RawMessage `json:"idempotency_key"`
	Except         json.RawMessage `json:"except"`
	Key            json.RawMessage `json:"key"`
}

func DecodePublish(raw []byte) (PublishRequest, error) {
	var req PublishRequest
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return req, BadRequest("empty body: expected a JSON object")
	}
	if raw[0] != '{' {
		return req, BadRequest("the body must be a JSON object")
	}
	var b publishBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return req, BadRequest("invalid JSON: %v", err)
	}
	if len(b.Target) == 0 || string(b.Target) == "null" {
		return req, BadRequest("target is required: {\"type\":\"user|room|broadcast\",\"id\":\"...\"}")
	}
	if b.Target[0] != '{' {
		return req, BadRequest("target must be an object {\"type\",\"id\"}")
	}
	if err := json.Unmarshal(b.Target, &req.Target); err != nil {
		return req, BadRequest("target: %v", err)
	}
	if err := optString(b.Event, &req.Event); err != nil {
		return req, BadRequest("event must be a string")
	}
	if err := optString(b.Class, &req.Class); err != nil {
		return req, BadRequest("class must be a string")
	}
	if err := optString(b.IdempotencyKey, &req.IdempotencyKey); err != nil {
		return req, BadRequest("idempotency_key must be a string")
	}
	if err := optString(b.Except, &req.Except); err != nil {
		return req, BadRequest("except must be a connection id (a string)")
	}
	if err := optString(b.Key, &req.Key); err != nil {
		return req, BadRequest("key must be a string")
	}
	if len(b.Reliable) > 0 && string(b.Reliable) != "null" {
		if err := json.Unmarshal(b.Reliable, &req.Reliable); err != nil {
			return req, BadRequest("reliable must be true or false")
		}
	}
	req.Data = b.Data
	return req, nil
}

// DecodeBatchMessage decodes one message of a batch, whose body was
// already checked to be valid JSON. The common shape (the six known keys,
// each at most once, strings without escapes) is read by a single scan;
// anything else goes through DecodePublish, which gives the same request
// and the exact error messages.
func DecodeBatchMessage(raw []byte) (PublishRequest, error) {
	if req, ok := ScanPublish(raw); ok {
		return req, nil
	}
	return DecodePublish(raw)
}

// ScanPublish reads a publish object from valid JSON, or reports false
// when it is not of the common shape.
func ScanPublish(raw []byte) (req PublishRequest, ok bool) {
	p := jsonScan{b: raw}
	if !p.byte('{') {
		return req, false
	}
	var seen [6]bool
	if p.byte('}') {
		return req, false // no target: DecodePublish names the error
	}
	for {
		key, ok := p.plainString()
		if !ok || !p.byte(':') {
			return req, false
		}
		field := -1
		switch key {
		case "target":
			field = 0
			if !p.byte('{') {
				return req, false
			}
			var st [2]bool
			for {
				k, ok := p.plainString()
				if !ok || !p.byte(':') {
					return req, false
				}
				v, ok := p.plainString()
				switch {
				case !ok:
					return req, false
				case k == "type" && !st[0]:
					req.Target.Type, st[0] = v, true
				case k == "id" && !st[1]:
					req.Target.ID, st[1] = v, true
				default:
					return req, false
				}
				if p.byte('}') {
					break
				}
				if !p.byte(',') {
					return req, false
				}
			}
		case "event":
			field = 1
			if req.Event, ok = p.plainString(); !ok {
				return req, false
			}
		case "class":
			field = 2
			if req.Class, ok = p.plainString(); !ok {
				return req, false
			}
		case "idempotency_key":
			field = 3
			if req.IdempotencyKey, ok = p.plainString(); !ok {
				return req, false
			}
		case "reliable":
			field = 4
			switch {
			case p.literal("true"):
				req.Reliable = true
			case p.literal("false"):
			default:
				return req, false
			}
		case "data":
			field = 5
			v, ok := p.value()
			if !ok {
				return req, false
			}
			req.Data = v
		default:
			return req, false
		}
		if seen[field] {
			return req, false
		}
		seen[field] = true
		if p.byte('}') {
			break
		}
		if !p.byte(',') {
			return req, false
		}
	}
	p.space()
	return req, seen[0] && p.i == len(p.b)
}

func optString(raw json.RawMessage, dst *string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, dst)
}

// ScanBatch splits a batch body of the common shape ({"messages":[...]},
// nothing else) into its messages without copying them; it reports false
// for anything else (json.Unmarshal then decides, with its errors).
func ScanBatch(body []byte) ([]json.RawMessage, bool) {
	if !json.Valid(body) {
		return nil, false
	}
	p := jsonScan{b: body}
	if !p.byte('{') {
		return nil, false
	}
	if key, ok := p.plainString(); !ok || key != "messages" || !p.byte(':') || !p.byte('[') {
		return nil, false
	}
	msgs := []json.RawMessage{}
	if !p.byte(']') {
		for {
			v, ok := p.value()
			if !ok {
				return nil, false
			}
			msgs = append(msgs, v)
			if p.byte(']') {
				break
			}
			if !p.byte(',') {
				return nil, false
			}
		}
	}
	if !p.byte('}') {
		return nil, false
	}
	p.space()
	return msgs, p.i == len(p.b)
}

// AppendResults encodes a batch answer as WriteJSON would.
func AppendResults(dst []byte, results []any) []byte {
	dst = append(dst, `{"results":[`...)
	for i, r := range results {
		if i > 0 {
			dst = append(dst, ',')
		}
		if pr, ok := r.(PublishResult); ok {
			dst = append(dst, `{"id":`...)
			dst = protocol.AppendJSONString(dst, pr.ID)
			if pr.Seq != 0 {
				dst = append(dst, `,"seq":`...)
				dst = strconv.AppendInt(dst, pr.Seq, 10)
			}
			if pr.Online != nil {
				dst = append(dst, `,"online":`...)
				dst = strconv.AppendBool(dst, *pr.Online)
			}
			dst = append(dst, '}')
			continue
		}
		b, _ := json.Marshal(r)
		dst = append(dst, b...)
	}
	return append(dst, "]}\n"...)
}

const MaxBatch = 1000

// CheckBatchSize bounds a batch to MaxBatch messages.
func CheckBatchSize(n int) error {
	if n > MaxBatch {
		return BadRequest("at most %d messages per batch, got %d", MaxBatch, n)
	}
	return nil
}

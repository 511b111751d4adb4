package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// Format is a connection's frame encoding.
type Format uint8

const (
	JSON    Format = iota // text frames, one JSON object each
	MsgPack               // binary frames, one MessagePack map each
)

// ParseFormat reads the format query parameter ("" is JSON).
func ParseFormat(s string) (Format, error) {
	switch s {
	case "", "json":
		return JSON, nil
	case "msgpack":
		return MsgPack, nil
	}
	return JSON, fmt.Errorf("format must be json or msgpack, got %q", s)
}

func (f Format) String() string {
	if f == MsgPack {
		return "msgpack"
	}
	return "json"
}

// DecodeError is a client frame that could not be decoded or is invalid.
type DecodeError struct {
	Code string // bad_frame or unknown_type
	Msg  string
}

func (e *DecodeError) Error() string { return e.Msg }

func badFrame(format string, a ...any) error {
	return &DecodeError{Code: ErrBadFrame, Msg: fmt.Sprintf(format, a...)}
}

// DecodeClient decodes and validates one client frame in the given format.
// Errors are *DecodeError with the code of the error frame to send.
func DecodeClient(f Format, b []byte) (*ClientFrame, error) {
	var cf ClientFrame
	if f == MsgPack {
		var raw struct {
			ClientFrame
			Data msgpack.RawMessage `msgpack:"data"`
		}
		if err := checkMsgpack(b); err != nil {
			return nil, badFrame("invalid MessagePack: %v", err)
		}
		if err := msgpack.Unmarshal(b, &raw); err != nil {
			return nil, badFrame("invalid MessagePack: %v", err)
		}
		cf = raw.ClientFrame
		if len(raw.Data) > 0 {
			j, err := MsgpackToJSON(raw.Data)
			if err != nil {
				return nil, badFrame("invalid data: %v", err)
			}
			cf.Data = j
		}
	} else {
		if !utf8.Valid(b) {
			return nil, badFrame("frame is not valid UTF-8")
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 || b[0] != '{' {
			return nil, badFrame("a frame is one JSON object")
		}
		if err := json.Unmarshal(b, &cf); err != nil {
			return nil, badFrame("invalid JSON: %v", err)
		}
	}
	if err := cf.validate(); err != nil {
		return nil, err
	}
	return &cf, nil
}

func (cf *ClientFrame) validate() error {
	switch cf.Type {
	case TypePing:
		return nil
	case TypeAck:
		if cf.Seq < 0 {
			return badFrame("ack.seq must be >= 0")
		}
		return nil
	case TypeJoin, TypeLeave:
		if cf.ID == "" {
			return badFrame("%s needs an id", cf.Type)
		}
		if err := ValidName("room", cf.Room); err != nil {
			return badFrame("%s: %v", cf.Type, err)
		}
		if cf.Since != nil && *cf.Since < 0 {
			return badFrame("join.since must be >= 0")
		}
		return nil
	case TypePublish:
		if cf.ID == "" {
			return badFrame("publish needs an id")
		}
		if cf.Target == nil {
			return badFrame("publish needs a target {type,id}")
		}
		if cf.Target.Type != TargetUser && cf.Target.Type != TargetRoom {
			return badFrame("publish target.type must be user or room, got %q", cf.Target.Type)
		}
		if err := ValidName("target.id", cf.Target.ID); err != nil {
			return badFrame("publish: %v", err)
		}
		if len(cf.Data) == 0 {
			cf.Data = json.RawMessage("null")
		}
		return nil
	case TypeSend:
		if cf.ID == "" {
			return badFrame("send needs an id")
		}
		if cf.Event != "" {
			if err := ValidName("event", cf.Event); err != nil {
				return badFrame("send: %v", err)
			}
		}
		if len(cf.Data) == 0 {
			cf.Data = json.RawMessage("null")
		}
		return nil
	case TypeRPC:
		if cf.ID == "" {
			return badFrame("rpc needs an id")
		}
		if err := ValidName("method", cf.Method); err != nil {
			return badFrame("rpc: %v", err)
		}
		if len(cf.Data) == 0 {
			cf.Data = json.RawMessage("null")
		}
		return nil
	case TypePresence:
		if cf.ID == "" {
			return badFrame("presence needs an id")
		}
		if err := ValidName("room", cf.Room); err != nil {
			return badFrame("presence: %v", err)
		}
		return nil
	case TypeHistory:
		return cf.validateHistory()
	case TypeRefresh:
		if cf.ID == "" {
			return badFrame("refresh needs an id")
		}
		if cf.Token == "" {
			return badFrame("refresh needs a token")
		}
		return nil
	case "":
		return badFrame("frame has no type")
	}
	return &DecodeError{Code: ErrUnknownType, Msg: fmt.Sprintf("unknown frame type %q", truncate(cf.Type, 64))}
}

// MaxHistoryLimit bounds the limit of a history frame.
const MaxHistoryLimit = 1000

// validateHistory checks a history frame (v3): an id, a room, limit
// 1..MaxHistoryLimit, since and before >= 0 and not both, before only
// with reverse and since only without.
func (cf *ClientFrame) validateHistory() error {
	if cf.ID == "" {
		return badFrame("history needs an id")
	}
	if err := ValidName("room", cf.Room); err != nil {
		return badFrame("history: %v", err)
	}
	if cf.Limit != nil && (*cf.Limit < 1 || *cf.Limit > MaxHistoryLimit) {
		return badFrame("history.limit must be 1 to %d", MaxHistoryLimit)
	}
	if cf.Since != nil && *cf.Since < 0 || cf.Before != nil && *cf.Before < 0 {
		return badFrame("history.since and history.before must be >= 0")
	}
	if cf.Since != nil && cf.Before != nil {
		return badFrame("history takes since or before, not both")
	}
	if cf.Before != nil && !cf.Reverse || cf.Since != nil && cf.Reverse {
		return badFrame("history reads forwards after since, or backwards (reverse true) before before")
	}
	return nil
}

// MaxNameBytes bounds user ids, room names and event names.
const MaxNameBytes = 256

// DefaultDevice is the device of a client that names none (contract 3).
const DefaultDevice = "default"

// MaxDeviceBytes bounds the handshake's device parameter.
const MaxDeviceBytes = 64

// ValidDevice checks a device name: 1 to 64 of [A-Za-z0-9_.-].
func ValidDevice(s string) error {
	if s == "" || len(s) > MaxDeviceBytes {
		return fmt.Errorf("device must be 1 to %d characters, got %d", MaxDeviceBytes, len(s))
	}
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '_', b == '.', b == '-':
		default:
			return fmt.Errorf("device may hold only letters, digits, '_', '.' and '-', got %q", s)
		}
	}
	return nil
}

// ValidName checks a user id or room name: non-empty, at most MaxNameBytes,
// valid UTF-8 without control characters (C0, DEL, C1), bidirectional
// embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) or line
// and paragraph separators (U+2028, U+2029): a name is shown in logs,
// consoles and chats, where such characters forge lines or reorder text
// ("ad\u202enimda" displays as "adadmin"). Every path that takes a name
// (handshake, frames, server API) uses this one check.
func ValidName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > MaxNameBytes {
		return fmt.Errorf("%s is longer than %d bytes", what, MaxNameBytes)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for _, r := range s {
		switch {
		case r < 0x20 || r >= 0x7f && r <= 0x9f:
			return fmt.Errorf("%s contains a control character", what)
		case r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
			return fmt.Errorf("%s contains a bidirectional control character (U+%04X)", what, r)
		case r == 0x2028 || r == 0x2029:
			return fmt.Errorf("%s contains a line or paragraph separator (U+%04X)", what, r)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Encode encodes any server frame struct in the given format.
func Encode(f Format, v any) ([]byte, error) {
	if f == MsgPack {
		return msgpack.Marshal(v)
	}
	return json.Marshal(v)
}

// EncodeReply encodes a reply frame; for MsgPack its JSON Result is
// converted.
func EncodeReply(f Format, r *Reply) ([]byte, error) {
	if f == JSON || r.Result == nil {
		return Encode(f, r)
	}
	res, err := JSONToMsgpack(r.Result)
	if err != nil {
		return nil, err
	}
	obj := map[string]any{"type": r.Type, "id": r.ID, "ok": r.OK, "result": msgpack.RawMessage(res)}
	if r.Error != nil {
		obj["error"] = r.Error
	}
	return msgpack.Marshal(obj)
}

// AppendMessageJSON appends the JSON message frame of m to dst. It is the
// hot path of every delivery, so it writes the object by hand instead of
// going through reflection.
func AppendMessageJSON(dst []byte, m *Message) []byte {
	dst = append(dst, `{"type":"message","id":`...)
	dst = AppendJSONString(dst, m.ID)
	dst = append(dst, `,"event":`...)
	dst = AppendJSONString(dst, m.Event)
	dst = append(dst, `,"data":`...)
	if len(m.Data) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, m.Data...)
	}
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, m.TS, 10)
	dst = append(dst, `,"target":{"type":`...)
	dst = AppendJSONString(dst, m.Target.Type)
	if m.Target.ID != "" {
		dst = append(dst, `,"id":`...)
		dst = AppendJSONString(dst, m.Target.ID)
	}
	dst = append(dst, '}')
	if m.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendInt(dst, m.Seq, 10)
	}
	if m.From != "" {
		dst = append(dst, `,"from":`...)
		dst = AppendJSONString(dst, m.From)
	}
	return append(dst, '}')
}

// EncodeMessage encodes a message frame in the given format. For MsgPack
// the JSON data is converted once here.
func EncodeMessage(f Format, m *Message) ([]byte, error) {
	if f == JSON {
		return AppendMessageJSON(make([]byte, 0, 96+len(m.Data)+len(m.ID)+len(m.Event)+len(m.From)), m), nil
	}
	data, err := JSONToMsgpack(m.Data)
	if err != nil {
		return nil, err
	}
	target := map[string]any{"type": m.Target.Type}
	if m.Target.ID != "" {
		target["id"] = m.Target.ID
	}
	obj := map[string]any{
		"type": TypeMessage, "id": m.ID, "event": m.Event,
		"data": msgpack.RawMessage(data), "ts": m.TS, "target": target,
	}
	if m.Seq != 0 {
		obj["seq"] = m.Seq
	}
	if m.From != "" {
		obj["from"] = m.From
	}
	return msgpack.Marshal(obj)
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string literal (invalid UTF-8 is
// replaced by U+FFFD, as encoding/json does).
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// JSONToMsgpack converts one JSON value to MessagePack, keeping integers
// as integers.
func JSONToMsgpack(j []byte) ([]byte, error) {
	if len(j) == 0 {
		return msgpack.Marshal(nil)
	}
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return msgpack.Marshal(numbersToNative(v))
}

func numbersToNative(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbersToNative(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbersToNative(e)
		}
	}
	return v
}

// MsgpackToJSON converts one MessagePack value to JSON. Maps must have
// string keys; NaN and infinities are refused.
func MsgpackToJSON(b []byte) ([]byte, error) {
	var v any
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if err := checkJSONable(v, 0); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func checkJSONable(v any, depth int) error {
	if depth > 64 {
		return errors.New("nested too deeply")
	}
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return errors.New("NaN or infinity")
		}
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return errors.New("NaN or infinity")
		}
	case map[string]any:
		for _, e := range x {
			if err := checkJSONable(e, depth+1); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkJSONable(e, depth+1); err != nil {
				return err
			}
		}
	case map[any]any:
		return errors.New("map keys must be strings")
	}
	return nil
}

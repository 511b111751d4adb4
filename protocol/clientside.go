package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"
)

// This file is the client side of the codec: decoding server frames and
// encoding client frames. The gateway uses the other direction.

// ServerFrame is any frame a gateway sends, as a client decodes it; which
// fields matter depends on Type (see the frame structs in frames.go).
type ServerFrame struct {
	Type string `json:"type" msgpack:"type"`

	// welcome
	ConnID         string           `json:"conn_id" msgpack:"conn_id"`
	Node           string           `json:"node" msgpack:"node"`
	User           string           `json:"user" msgpack:"user"`
	PingIntervalMS int64            `json:"ping_interval_ms" msgpack:"ping_interval_ms"`
	InboxSeq       int64            `json:"inbox_seq" msgpack:"inbox_seq"`
	Rooms          map[string]int64 `json:"rooms" msgpack:"rooms"` // v2: reliable rooms and their seqs
	Device         string           `json:"device" msgpack:"device"`

	// message (and gap: Target is a room's for its history), reply (ID, Seq)
	ID     string          `json:"id" msgpack:"id"`
	Event  string          `json:"event" msgpack:"event"`
	Data   json.RawMessage `json:"data" msgpack:"-"` // always JSON, also on MsgPack connections
	TS     float64         `json:"ts" msgpack:"ts"`  // message: publish time in Unix ms; pong: the ping's ts
	Target *Target         `json:"target" msgpack:"target"`
	Seq    int64           `json:"seq" msgpack:"seq"`
	OK     bool            `json:"ok" msgpack:"ok"`
	Error  *ErrorBody      `json:"error" msgpack:"error"`
	Result json.RawMessage `json:"result" msgpack:"-"` // rpc reply; always JSON

	// message: the publishing client's user id (server-set; empty for
	// API publishes). Decoded from "from" when it is a string.
	Sender string `json:"-" msgpack:"-"`

	// gap. Decoded from "from" when it is a number.
	From   int64 `json:"-" msgpack:"-"`
	To     int64 `json:"to" msgpack:"to"`
	Missed int64 `json:"missed" msgpack:"missed"`

	// redirect
	URL          string `json:"url" msgpack:"url"`
	Reason       string `json:"reason" msgpack:"reason"`
	RetryAfterMS int64  `json:"retry_after_ms" msgpack:"retry_after_ms"`

	// error
	Code    string `json:"code" msgpack:"code"`
	Message string `json:"message" msgpack:"message"`

	// expiring: the token's exp, Unix s
	Exp int64 `json:"exp" msgpack:"exp"`

	// joined, left (v3): the room; User and ConnID are the connection
	// that entered or left its presence, Info (joined) its info.
	Room string          `json:"room" msgpack:"room"`
	Info json.RawMessage `json:"info" msgpack:"-"` // always JSON
}

// DecodeServer decodes one server frame in the given format. MessagePack
// data is converted to JSON, so Data is JSON whatever the format.
func DecodeServer(f Format, b []byte) (*ServerFrame, error) {
	var sf ServerFrame
	if f == MsgPack {
		var raw struct {
			ServerFrame
			Data   msgpack.RawMessage `msgpack:"data"`
			Result msgpack.RawMessage `msgpack:"result"`
			Info   msgpack.RawMessage `msgpack:"info"`
			From   any                `msgpack:"from"`
		}
		if err := checkMsgpack(b); err != nil {
			return nil, fmt.Errorf("invalid MessagePack server frame: %w", err)
		}
		if err := msgpack.Unmarshal(b, &raw); err != nil {
			return nil, fmt.Errorf("invalid MessagePack server frame: %w", err)
		}
		sf = raw.ServerFrame
		switch v := raw.From.(type) {
		case string:
			sf.Sender = v
		case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
			sf.From, _ = strconv.ParseInt(fmt.Sprint(v), 10, 64)
		}
		if len(raw.Data) > 0 {
			j, err := MsgpackToJSON(raw.Data)
			if err != nil {
				return nil, fmt.Errorf("invalid data in server frame: %w", err)
			}
			sf.Data = j
		}
		if len(raw.Result) > 0 {
			j, err := MsgpackToJSON(raw.Result)
			if err != nil {
				return nil, fmt.Errorf("invalid result in server frame: %w", err)
			}
			sf.Result = j
		}
		if len(raw.Info) > 0 {
			j, err := MsgpackToJSON(raw.Info)
			if err != nil {
				return nil, fmt.Errorf("invalid info in server frame: %w", err)
			}
			sf.Info = j
		}
	} else {
		raw := struct {
			*ServerFrame
			From json.RawMessage `json:"from"`
		}{ServerFrame: &sf}
		if err := json.Unmarshal(b, &raw); err != nil {
			return nil, fmt.Errorf("invalid JSON server frame: %w", err)
		}
		if err := sf.setFrom(raw.From); err != nil {
			return nil, fmt.Errorf("invalid JSON server frame: from: %w", err)
		}
	}
	if sf.Type == "" {
		return nil, errors.New("server frame has no type")
	}
	return &sf, nil
}

// setFrom sets Sender (a string, in a message) or From (a number, in a
// gap) from the JSON of "from".
func (sf *ServerFrame) setFrom(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		return json.Unmarshal(raw, &sf.Sender)
	}
	return json.Unmarshal(raw, &sf.From)
}

// AsMessage returns the message frame's fields.
func (sf *ServerFrame) AsMessage() Message {
	m := Message{ID: sf.ID, Event: sf.Event, Data: sf.Data, TS: int64(sf.TS), Seq: sf.Seq, From: sf.Sender}
	if sf.Target != nil {
		m.Target = *sf.Target
	}
	return m
}

// AsWelcome returns the welcome frame's fields.
func (sf *ServerFrame) AsWelcome() Welcome {
	return Welcome{
		Type: TypeWelcome, ConnID: sf.ConnID, Node: sf.Node, User: sf.User,
		PingIntervalMS: sf.PingIntervalMS, InboxSeq: sf.InboxSeq, Device: sf.Device, Rooms: sf.Rooms,
	}
}

// EncodeClient encodes one client frame in the given format, leaving out
// the fields its type does not use. Data must be JSON (it is converted for
// MsgPack); an empty Data of a publish is sent as null.
func EncodeClient(f Format, cf *ClientFrame) ([]byte, error) {
	if cf.TS != nil && (math.IsNaN(*cf.TS) || math.IsInf(*cf.TS, 0)) {
		return nil, errors.New("ts is NaN or infinite")
	}
	data := cf.Data
	if cf.Type == TypePublish && len(data) == 0 {
		data = json.RawMessage("null")
	}
	if len(data) > 0 && !json.Valid(data) {
		return nil, errors.New("data is not valid JSON")
	}
	if f == MsgPack {
		return encodeClientMsgpack(cf, data)
	}
	return AppendClientJSON(make([]byte, 0, 64+len(data)+len(cf.Event)+len(cf.Room)+len(cf.Token)), cf, data), nil
}

// AppendClientJSON appends the JSON object of cf with data as its data
// (already valid JSON, or empty to leave it out) to dst.
func AppendClientJSON(dst []byte, cf *ClientFrame, data json.RawMessage) []byte {
	dst = append(dst, `{"type":`...)
	dst = AppendJSONString(dst, cf.Type)
	if cf.ID != "" {
		dst = append(dst, `,"id":`...)
		dst = AppendJSONString(dst, cf.ID)
	}
	if cf.Type == TypeAck || cf.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendInt(dst, cf.Seq, 10)
	}
	if cf.Room != "" {
		dst = append(dst, `,"room":`...)
		dst = AppendJSONString(dst, cf.Room)
	}
	if cf.Since != nil {
		dst = append(dst, `,"since":`...)
		dst = strconv.AppendInt(dst, *cf.Since, 10)
	}
	if cf.Target != nil {
		dst = append(dst, `,"target":{"type":`...)
		dst = AppendJSONString(dst, cf.Target.Type)
		dst = append(dst, `,"id":`...)
		dst = AppendJSONString(dst, cf.Target.ID)
		dst = append(dst, '}')
	}
	if cf.Event != "" {
		dst = append(dst, `,"event":`...)
		dst = AppendJSONString(dst, cf.Event)
	}
	if cf.Method != "" {
		dst = append(dst, `,"method":`...)
		dst = AppendJSONString(dst, cf.Method)
	}
	if len(data) > 0 {
		dst = append(dst, `,"data":`...)
		dst = append(dst, data...)
	}
	if cf.TS != nil {
		dst = append(dst, `,"ts":`...)
		dst = strconv.AppendFloat(dst, *cf.TS, 'f', -1, 64)
	}
	if cf.Token != "" {
		dst = append(dst, `,"token":`...)
		dst = AppendJSONString(dst, cf.Token)
	}
	if cf.Before != nil {
		dst = append(dst, `,"before":`...)
		dst = strconv.AppendInt(dst, *cf.Before, 10)
	}
	if cf.Limit != nil {
		dst = append(dst, `,"limit":`...)
		dst = strconv.AppendInt(dst, *cf.Limit, 10)
	}
	if cf.Reverse {
		dst = append(dst, `,"reverse":true`...)
	}
	return append(dst, '}')
}

func encodeClientMsgpack(cf *ClientFrame, data json.RawMessage) ([]byte, error) {
	obj := map[string]any{"type": cf.Type}
	if cf.ID != "" {
		obj["id"] = cf.ID
	}
	if cf.Type == TypeAck || cf.Seq != 0 {
		obj["seq"] = cf.Seq
	}
	if cf.Room != "" {
		obj["room"] = cf.Room
	}
	if cf.Since != nil {
		obj["since"] = *cf.Since
	}
	if cf.Target != nil {
		obj["target"] = map[string]any{"type": cf.Target.Type, "id": cf.Target.ID}
	}
	if cf.Event != "" {
		obj["event"] = cf.Event
	}
	if cf.Method != "" {
		obj["method"] = cf.Method
	}
	if len(data) > 0 {
		m, err := JSONToMsgpack(data)
		if err != nil {
			return nil, err
		}
		obj["data"] = msgpack.RawMessage(m)
	}
	if cf.TS != nil {
		obj["ts"] = *cf.TS
	}
	if cf.Token != "" {
		obj["token"] = cf.Token
	}
	if cf.Before != nil {
		obj["before"] = *cf.Before
	}
	if cf.Limit != nil {
		obj["limit"] = *cf.Limit
	}
	if cf.Reverse {
		obj["reverse"] = true
	}
	return msgpack.Marshal(obj)
}

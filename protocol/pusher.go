package protocol

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The Pusher Channels protocol, version 7 (contract 21; docs/pusher.md):
// what a pusher-js or Laravel Echo client sends and gets on /app/{key}.
//
// Every frame is one JSON object {"event","channel","data"}; the server
// sends data as a string (JSON encoded when it is not one), except for
// pusher:error, whose data is an object {"code","message"}.

// PusherProtocol is the protocol version served (?protocol=7).
const PusherProtocol = 7

// Pusher event names.
const (
	PusherConnectionEstablished = "pusher:connection_established"
	PusherError                 = "pusher:error"
	PusherPing                  = "pusher:ping"
	PusherPong                  = "pusher:pong"
	PusherSubscribe             = "pusher:subscribe"
	PusherUnsubscribe           = "pusher:unsubscribe"
	PusherSubscriptionSucceeded = "pusher_internal:subscription_succeeded"
	PusherMemberAdded           = "pusher_internal:member_added"
	PusherMemberRemoved         = "pusher_internal:member_removed"
)

// Pusher error codes (pusher:error data.code and close codes). 4000-4099:
// the client must not reconnect; 4100-4199: reconnect after a backoff;
// 4200-4299: reconnect at once; 4300-4399: other errors, the connection
// stays.
const (
	PusherErrSSLOnly         = 4000
	PusherErrAppUnknown      = 4001 // no app with this key
	PusherErrProtocol        = 4007 // unsupported protocol version
	PusherErrUnauthorized    = 4009 // bad auth signature, or the connection was refused
	PusherErrOverCapacity    = 4100
	PusherErrReconnect       = 4200 // generic: reconnect at once
	PusherErrPongTimeout     = 4201
	PusherErrActivityTimeout = 4202
	PusherErrClientRate      = 4301 // client event rejected: rate limit
	PusherErrClientEvent     = 4300 // client event or subscription rejected (other reasons)
)

// PusherCloseCode maps a wsgate close code (section 4.4) to the code a
// Pusher client acts on rightly: a drain or a slow consumer makes it
// reconnect at once, a rate close after a backoff, a disconnect by the
// API or an expired token stops it.
func PusherCloseCode(code int) int {
	switch code {
	case CloseDraining, CloseSlowConsumer:
		return PusherErrReconnect
	case CloseRateLimited:
		return PusherErrOverCapacity
	case CloseDisconnected, CloseReplaced, CloseTokenExpired:
		return PusherErrUnauthorized
	}
	return code
}

// PusherFrame is one frame of the protocol, either way. Data is kept raw:
// a client sends objects (subscribe, client events), the server strings.
type PusherFrame struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	UserID  string          `json:"user_id,omitempty"` // client events on presence channels: the sender
}

// PusherSubscribeData is the data of pusher:subscribe.
type PusherSubscribeData struct {
	Channel     string `json:"channel"`
	Auth        string `json:"auth"`
	ChannelData string `json:"channel_data"`
}

// PusherMember is a presence channel's channel_data (and the data of
// member_added): user_id is a string or a number on the wire.
type PusherMember struct {
	UserID   string          `json:"user_id"`
	UserInfo json.RawMessage `json:"user_info,omitempty"`
}

// Bounds of the names a client gives.
const (
	MaxPusherChannel = 164
	MaxPusherUserID  = 128
)

// ErrPusherFrame is the error of every client frame ParsePusherFrame refuses.
var ErrPusherFrame = errors.New("pusher frame")

// ParsePusherFrame reads one client frame: a JSON object with a string
// event; channel, when present, a valid channel name.
func ParsePusherFrame(b []byte) (*PusherFrame, error) {
	var f struct {
		Event   *string         `json:"event"`
		Channel *string         `json:"channel"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %v", ErrPusherFrame, err)
	}
	if f.Event == nil || *f.Event == "" {
		return nil, fmt.Errorf("%w: no event", ErrPusherFrame)
	}
	if len(*f.Event) > 200 || !utf8.ValidString(*f.Event) {
		return nil, fmt.Errorf("%w: event name too long or not UTF-8", ErrPusherFrame)
	}
	p := &PusherFrame{Event: *f.Event, Data: f.Data}
	if f.Channel != nil {
		if err := ValidPusherChannel(*f.Channel); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPusherFrame, err)
		}
		p.Channel = *f.Channel
	}
	return p, nil
}

// ValidPusherChannel checks a channel name as Pusher does: 1 to 164 of
// A-Z a-z 0-9 _ - = @ , . ; (and : for wsgate room namespaces).
func ValidPusherChannel(s string) error {
	if s == "" || len(s) > MaxPusherChannel {
		return fmt.Errorf("channel name must be 1 to %d characters", MaxPusherChannel)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("_-=@,.;:", c) >= 0:
		default:
			return fmt.Errorf("channel name %q holds %q (allowed: A-Z a-z 0-9 _ - = @ , . ; :)", s, c)
		}
	}
	return nil
}

// ParsePusherSubscribe reads pusher:subscribe's data: an object, or a
// string holding one.
func ParsePusherSubscribe(data json.RawMessage) (PusherSubscribeData, error) {
	var s PusherSubscribeData
	if err := json.Unmarshal(unquoteJSON(data), &s); err != nil {
		return s, fmt.Errorf("subscribe data is not an object {channel, auth, channel_data}: %v", err)
	}
	return s, ValidPusherChannel(s.Channel)
}

// ParsePusherMember reads a presence channel's channel_data.
func ParsePusherMember(channelData string) (PusherMember, error) {
	var m struct {
		UserID   json.RawMessage `json:"user_id"`
		UserInfo json.RawMessage `json:"user_info"`
	}
	if err := json.Unmarshal([]byte(channelData), &m); err != nil {
		return PusherMember{}, fmt.Errorf("channel_data is not a JSON object: %v", err)
	}
	var id string
	switch {
	case len(m.UserID) == 0 || string(m.UserID) == "null":
		return PusherMember{}, errors.New("channel_data has no user_id")
	case m.UserID[0] == '"':
		if err := json.Unmarshal(m.UserID, &id); err != nil {
			return PusherMember{}, fmt.Errorf("channel_data user_id: %v", err)
		}
	case m.UserID[0] == '-' || m.UserID[0] >= '0' && m.UserID[0] <= '9':
		id = string(m.UserID) // a number, as written
	default:
		return PusherMember{}, errors.New("channel_data user_id must be a string or a number")
	}
	if err := ValidName("user_id", id); err != nil || len(id) > MaxPusherUserID {
		return PusherMember{}, fmt.Errorf("channel_data user_id must be 1 to %d characters without control characters", MaxPusherUserID)
	}
	if string(m.UserInfo) == "null" {
		m.UserInfo = nil
	}
	return PusherMember{UserID: id, UserInfo: m.UserInfo}, nil
}

// PusherAuth is the auth string of a private (channelData "") or presence
// channel subscription: key + ":" + hex HMAC-SHA256 of
// "socket_id:channel" (":channel_data" appended for presence channels).
func PusherAuth(key, secret, socketID, channel, channelData string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(socketID + ":" + channel))
	if channelData != "" {
		mac.Write([]byte(":" + channelData))
	}
	return key + ":" + hex.EncodeToString(mac.Sum(nil))
}

// CheckPusherAuth compares auth with the expected string in constant time.
func CheckPusherAuth(auth, key, secret, socketID, channel, channelData string) bool {
	want := PusherAuth(key, secret, socketID, channel, channelData)
	return hmac.Equal([]byte(auth), []byte(want))
}

// PusherDataString is data as Pusher sends it: a JSON string stays what it
// holds, anything else is its JSON text; absent data is "".
func PusherDataString(data json.RawMessage) string {
	if len(data) == 0 {
		return ""
	}
	if data[0] == '"' {
		var s string
		if json.Unmarshal(data, &s) == nil {
			return s
		}
	}
	return string(data)
}

// EncodePusher encodes a server frame whose data is sent as a string.
func EncodePusher(event, channel, data, userID string) []byte {
	d, _ := json.Marshal(data)
	b, _ := json.Marshal(PusherFrame{Event: event, Channel: channel, Data: d, UserID: userID})
	return b
}

// EncodePusherError encodes pusher:error; code 0 is sent as null.
func EncodePusherError(code int, message, channel string) []byte {
	var c any
	if code != 0 {
		c = code
	}
	d, _ := json.Marshal(map[string]any{"code": c, "message": message})
	b, _ := json.Marshal(PusherFrame{Event: PusherError, Channel: channel, Data: d})
	return b
}

// unquoteJSON turns a JSON string holding JSON into that JSON.
func unquoteJSON(data json.RawMessage) []byte {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if json.Unmarshal(data, &s) == nil {
			return []byte(s)
		}
	}
	return data
}

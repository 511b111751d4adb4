package protocol

import (
	"encoding/json"

	"github.com/vmihailenco/msgpack/v5"
)

// Frame types (the "type" field).
const (
	TypeWelcome  = "welcome"
	TypeMessage  = "message"
	TypeReply    = "reply"
	TypePong     = "pong"
	TypeGap      = "gap"
	TypeRedirect = "redirect"
	TypeClose    = "close" // the last frame of an SSE or HTTP streaming connection
	TypeError    = "error"
	TypeExpiring = "expiring"
	TypeJoined   = "joined" // (v3) a connection entered a room's presence
	TypeLeft     = "left"   // (v3) a connection left a room's presence

	TypePing    = "ping"
	TypeAck     = "ack"
	TypeJoin    = "join"
	TypeLeave   = "leave"
	TypePublish = "publish"
	TypeSend    = "send" // (v2) to the business through the upstream sink
	TypeRPC     = "rpc"  // (v2) a request answered by WSGATE_RPC_URL
	TypeRefresh = "refresh"
	// TypePresence asks for a room's presence (v3, contract 19); the
	// reply's result is the object of GET /api/v1/rooms/{room}/presence.
	TypePresence = "presence"
	// TypeHistory reads a reliable room's kept messages (v3, contract
	// 19); the reply's result is the object of GET
	// /api/v1/rooms/{room}/history.
	TypeHistory = "history"
)

// ExpiringNotice is how long before the token's exp the server sends the
// expiring frame.
const ExpiringNotice = 30 // seconds

// Error codes of error frames and refused replies.
const (
	ErrBadFrame    = "bad_frame"
	ErrUnknownType = "unknown_type"
	ErrForbidden   = "forbidden"
	ErrRateLimited = "rate_limited"
	ErrUnavailable = "unavailable"
	// ErrUnauthorized refuses a refresh whose token is invalid or is for
	// another user.
	ErrUnauthorized = "unauthorized"
)

// Target types.
const (
	TargetUser      = "user"
	TargetRoom      = "room"
	TargetBroadcast = "broadcast"
)

// Target names the recipients of a message.
type Target struct {
	Type string `json:"type" msgpack:"type"`
	ID   string `json:"id" msgpack:"id"`
}

// Welcome is the first server frame of every connection.
type Welcome struct {
	Type           string `json:"type" msgpack:"type"`
	ConnID         string `json:"conn_id" msgpack:"conn_id"`
	Node           string `json:"node" msgpack:"node"`
	User           string `json:"user" msgpack:"user"`
	PingIntervalMS int64  `json:"ping_interval_ms" msgpack:"ping_interval_ms"`
	InboxSeq       int64  `json:"inbox_seq" msgpack:"inbox_seq"`
	Device         string `json:"device" msgpack:"device"`
	// Rooms maps each reliable room the user is a member of to the room's
	// highest seq (v2).
	Rooms map[string]int64 `json:"rooms,omitempty" msgpack:"rooms,omitempty"`
	// Session and Transport are set on the HTTP transports only (v3,
	// contract 18): the secret that authorizes POST /v1/conn/{conn_id},
	// and "sse" or "stream".
	Session   string `json:"session,omitempty" msgpack:"session,omitempty"`
	Transport string `json:"transport,omitempty" msgpack:"transport,omitempty"`
}

// StreamClose is the last frame of an SSE or HTTP streaming connection
// (v3, contract 18): what a WebSocket would carry in its close frame.
type StreamClose struct {
	Type   string `json:"type" msgpack:"type"`
	Code   int    `json:"code" msgpack:"code"`
	Reason string `json:"reason" msgpack:"reason"`
}

// ErrorBody is the {code,message} pair of error frames, refused replies and
// HTTP error answers.
type ErrorBody struct {
	Code    string `json:"code" msgpack:"code"`
	Message string `json:"message" msgpack:"message"`
}

// Reply answers a client frame that carried an id.
type Reply struct {
	Type  string     `json:"type" msgpack:"type"`
	ID    string     `json:"id" msgpack:"id"`
	OK    bool       `json:"ok" msgpack:"ok"`
	Error *ErrorBody `json:"error,omitempty" msgpack:"error,omitempty"`
	Seq   int64      `json:"seq,omitempty" msgpack:"seq,omitempty"`
	// Result is an rpc answer's result (JSON; see EncodeReply).
	Result json.RawMessage `json:"result,omitempty" msgpack:"-"`
}

// Pong answers a ping.
type Pong struct {
	Type string  `json:"type" msgpack:"type"`
	TS   float64 `json:"ts" msgpack:"ts"`
}

// Gap tells a resuming client that reliable messages From..To are gone.
type Gap struct {
	Type   string `json:"type" msgpack:"type"`
	From   int64  `json:"from" msgpack:"from"`
	To     int64  `json:"to" msgpack:"to"`
	Missed int64  `json:"missed" msgpack:"missed"`
	// Target is {type:"room",id} for a reliable room's history (v2);
	// absent for the user's inbox.
	Target *Target `json:"target,omitempty" msgpack:"target,omitempty"`
}

// Redirect asks the client to reconnect to URL; close 4001 follows.
type Redirect struct {
	Type         string `json:"type" msgpack:"type"`
	URL          string `json:"url" msgpack:"url"`
	Reason       string `json:"reason" msgpack:"reason"`
	RetryAfterMS int64  `json:"retry_after_ms" msgpack:"retry_after_ms"`
}

// Expiring tells the client that its token expires at Exp (Unix s), 30 s
// ahead, once per token: a refresh frame with a new token avoids the close
// with 4401 at Exp.
type Expiring struct {
	Type string `json:"type" msgpack:"type"`
	Exp  int64  `json:"exp" msgpack:"exp"`
}

// ErrorFrame refuses a client frame.
type ErrorFrame struct {
	Type    string `json:"type" msgpack:"type"`
	Code    string `json:"code" msgpack:"code"`
	Message string `json:"message" msgpack:"message"`
}

// Message is a pushed message. Data is the published JSON value; Seq is
// non-zero exactly for reliable user messages.
type Message struct {
	ID     string          `json:"id"`
	Event  string          `json:"event"`
	Data   json.RawMessage `json:"data"`
	TS     int64           `json:"ts"`
	Target Target          `json:"target"`
	Seq    int64           `json:"seq,omitempty"`
	// From is the user id of the client whose publish frame sent the
	// message, set by the server (contract 4.1 v1.1); empty for API
	// publishes. Nothing a client writes into its frame or data sets it.
	From string `json:"from,omitempty"`
}

// ClientFrame is any frame a client sends; which fields matter depends on
// Type.
type ClientFrame struct {
	Type   string          `json:"type" msgpack:"type"`
	ID     string          `json:"id" msgpack:"id"`
	Seq    int64           `json:"seq" msgpack:"seq"`
	Room   string          `json:"room" msgpack:"room"`
	Since  *int64          `json:"since" msgpack:"since"` // join: replay a reliable room after this seq (v2)
	Target *Target         `json:"target" msgpack:"target"`
	Event  string          `json:"event" msgpack:"event"`
	Method string          `json:"method" msgpack:"method"` // rpc
	Data   json.RawMessage `json:"data" msgpack:"-"`
	TS     *float64        `json:"ts" msgpack:"ts"`
	Token  string          `json:"token" msgpack:"token"` // refresh; join: a room token (v3)
	// history (v3): a page of a room's kept messages, after Since or,
	// with Reverse, before Before; at most Limit (1..1000, default 100).
	Before  *int64 `json:"before" msgpack:"before"`
	Limit   *int64 `json:"limit" msgpack:"limit"`
	Reverse bool   `json:"reverse" msgpack:"reverse"`
}

// PresenceEvent is a joined or left frame (v3, contract 19): the
// connection ConnID of User entered or left Room's presence. Info (joined
// only) is the connection's info: its token's info claim, or what the
// join proxy answered.
type PresenceEvent struct {
	Type   string          `json:"type"`
	Room   string          `json:"room"`
	User   string          `json:"user"`
	ConnID string          `json:"conn_id"`
	Info   json.RawMessage `json:"info,omitempty"`
}

// EncodePresenceEvent encodes a joined or left frame.
func EncodePresenceEvent(f Format, e *PresenceEvent) ([]byte, error) {
	if f == JSON {
		return json.Marshal(e)
	}
	obj := map[string]any{"type": e.Type, "room": e.Room, "user": e.User, "conn_id": e.ConnID}
	if len(e.Info) > 0 {
		info, err := JSONToMsgpack(e.Info)
		if err != nil {
			return nil, err
		}
		obj["info"] = msgpack.RawMessage(info)
	}
	return msgpack.Marshal(obj)
}

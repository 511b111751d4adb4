// Package upstream carries what clients and connections produce to the
// business: client `send` frames and lifecycle events become Records, and
// a Sink (Redis Streams, NATS JetStream, Kafka or an HTTP webhook, picked
// by the scheme of WSGATE_UPSTREAM_URL) accepts them (contract section 13).
package upstream

import (
	"context"
	"encoding/json"
)

// Record is one JSON object sent upstream. The common fields are on every
// record; the others belong to some types only (contract section 13).
type Record struct {
	Type   string `json:"type"` // message, connect, disconnect, online, offline, join, leave, ack, undelivered
	ID     string `json:"id"`   // unique per record
	User   string `json:"user"`
	ConnID string `json:"conn_id,omitempty"`
	Node   string `json:"node,omitempty"`
	Device string `json:"device,omitempty"`
	TS     int64  `json:"ts"` // Unix ms

	ClientMsgID string          `json:"client_msg_id,omitempty"` // message
	Event       string          `json:"event,omitempty"`         // message, undelivered
	Data        json.RawMessage `json:"data,omitempty"`          // message
	Info        json.RawMessage `json:"info,omitempty"`          // message, connect
	IP          string          `json:"ip,omitempty"`            // connect
	Code        int             `json:"code,omitempty"`          // disconnect
	Reason      string          `json:"reason,omitempty"`        // disconnect
	DurationMS  *int64          `json:"duration_ms,omitempty"`   // disconnect
	V           int64           `json:"v,omitempty"`             // online, offline
	Room        string          `json:"room,omitempty"`          // join, leave
	Seq         int64           `json:"seq,omitempty"`           // ack, undelivered
	MessageID   string          `json:"message_id,omitempty"`    // undelivered
}

// Sink accepts records for the business.
type Sink interface {
	// Write returns nil only once the sink accepted every record (XADD
	// returned, JetStream or Kafka ack, webhook 2xx), or the first error.
	// Records of one Write keep their order, and so do one user's records
	// across Writes made one after the other. It returns when ctx ends.
	Write(ctx context.Context, recs []Record) error
	Close() error
}

package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// Pusher-format webhooks (WSGATE_PUSHER_WEBHOOK_URL; docs/pusher.md): the
// records of a Pusher app's channels, POSTed as Pusher posts them, so an
// application's existing Pusher webhook endpoint (e.g. the `webhook()`
// check of a Pusher server library) takes them unchanged.
//
// The record types are Pusher's event names, with Room the channel:
// channel_occupied and channel_vacated; member_added and member_removed
// (User the user_id); client_event (Event the client event's name, Data
// its data as a JSON string, ConnID the sender's socket_id, User its
// user_id on a presence channel).
const (
	PusherChannelOccupied = "channel_occupied"
	PusherChannelVacated  = "channel_vacated"
	PusherMemberAdded     = "member_added"
	PusherMemberRemoved   = "member_removed"
	PusherClientEvent     = "client_event"
)

// Headers of a Pusher webhook: the app key, and the hex HMAC-SHA256 of the
// body with the app secret.
const (
	PusherKeyHeader       = "X-Pusher-Key"
	PusherSignatureHeader = "X-Pusher-Signature"
)

// PusherWebhookEvent is one event of a Pusher webhook's body.
type PusherWebhookEvent struct {
	Name     string  `json:"name"`
	Channel  string  `json:"channel"`
	UserID   string  `json:"user_id,omitempty"`
	Event    string  `json:"event,omitempty"`
	Data     *string `json:"data,omitempty"`
	SocketID string  `json:"socket_id,omitempty"`
}

// PusherWebhookBody is a Pusher webhook's body.
type PusherWebhookBody struct {
	TimeMS int64                `json:"time_ms"`
	Events []PusherWebhookEvent `json:"events"`
}

// pusherWebhook POSTs batches of records, as Pusher webhooks, to one URL.
type pusherWebhook struct {
	url, key, secret string
	hc               *http.Client
}

// NewPusherWebhook is the sink of Pusher-format webhooks to url, signed
// with the app's key and secret.
func NewPusherWebhook(url, key, secret string, hc *http.Client) Sink {
	if hc == nil {
		hc = &http.Client{}
	}
	return &pusherWebhook{url: url, key: key, secret: secret, hc: hc}
}

// PusherWebhookEventOf is the webhook event of a record.
func PusherWebhookEventOf(r Record) PusherWebhookEvent {
	ev := PusherWebhookEvent{Name: r.Type, Channel: r.Room}
	switch r.Type {
	case PusherMemberAdded, PusherMemberRemoved:
		ev.UserID = r.User
	case PusherClientEvent:
		ev.Event, ev.SocketID, ev.UserID = r.Event, r.ConnID, r.User
		var d string
		if json.Unmarshal(r.Data, &d) != nil {
			d = string(r.Data)
		}
		ev.Data = &d
	}
	return ev
}

// Write posts the records in batches of at most WebhookBatch events,
// retried as the webhook sink's (60 s of backoff, or until ctx ends).
func (s *pusherWebhook) Write(ctx context.Context, recs []Record) error {
	for len(recs) > 0 {
		n := min(len(recs), WebhookBatch)
		body := PusherWebhookBody{TimeMS: time.Now().UnixMilli(), Events: make([]PusherWebhookEvent, 0, n)}
		for _, r := range recs[:n] {
			body.Events = append(body.Events, PusherWebhookEventOf(r))
		}
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		if err := retryPost(ctx, func(ctx context.Context) (int, error) { return s.post(ctx, b) }); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

func (s *pusherWebhook) post(ctx context.Context, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(PusherKeyHeader, s.key)
	req.Header.Set(PusherSignatureHeader, PusherSign(s.secret, body))
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, nil
}

// PusherSign is X-Pusher-Signature: the hex HMAC-SHA256 of body with secret.
func PusherSign(secret string, body []byte) string { return hmacHex(secret, body) }

func (s *pusherWebhook) Close() error {
	s.hc.CloseIdleConnections()
	return nil
}

package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/upstream"
	"github.com/wsgate/wsgate/protocol"
)

// Pusher-format webhooks (WSGATE_PUSHER_WEBHOOK_URL; docs/pusher.md), on
// the upstream machinery of the lifecycle events: records go through a
// bounded upstream.Buffer (never waited for, retried with backoff, counted
// in wsgate_upstream_*) to a sink that POSTs them as Pusher does
// (upstream.NewPusherWebhook). Each change is reported once, by the node
// that made it (a dead node's, by the survivor that swept its presence):
// channel_occupied and channel_vacated when a channel's first
// subscription comes and its last goes (room presence: every Pusher
// subscription, and wsgate members of presence rooms), member_added and
// member_removed when a presence channel's user arrives with its first
// socket and leaves with its last, client_event for each client event
// published.
type pusherHooks struct {
	n   *Node
	buf *upstream.Buffer
}

// enablePusherHooks sends the node's Pusher webhooks to sink.
func (n *Node) enablePusherHooks(sink upstream.Sink) {
	h := &pusherHooks{n: n, buf: upstream.NewBuffer(sink, upstream.BufferOptions{Metrics: &n.metrics.Upstream, Logger: n.log})}
	n.goFunc(h.buf.Run)
	n.pusherHooks, n.pusherSink = h, sink
}

func (h *pusherHooks) add(rec upstream.Record) {
	rec.ID, rec.Node, rec.TS = h.n.newID(), h.n.cfg.NodeID, time.Now().UnixMilli()
	h.buf.Add(rec, nil)
}

// presence reports a change of a room's presence (announcePresence).
func (h *pusherHooks) presence(ev presEvent, ch cluster.PresenceChange) {
	if h == nil {
		return
	}
	member := strings.HasPrefix(ev.room, pusherPresence)
	if ev.join {
		if ch.Counts.Conns == 1 {
			h.add(upstream.Record{Type: upstream.PusherChannelOccupied, Room: ev.room})
		}
		if member && ch.UserConns == 1 {
			h.add(upstream.Record{Type: upstream.PusherMemberAdded, Room: ev.room, User: ev.user})
		}
		return
	}
	if member && ch.UserConns == 0 {
		h.add(upstream.Record{Type: upstream.PusherMemberRemoved, Room: ev.room, User: ev.user})
	}
	if ch.Counts.Conns == 0 {
		h.add(upstream.Record{Type: upstream.PusherChannelVacated, Room: ev.room})
	}
}

// clientEvent reports a client event that was published: its data as
// the string Pusher clients get, its sender's socket_id and, on a presence
// channel, user_id.
func (h *pusherHooks) clientEvent(channel, event string, data json.RawMessage, socketID, userID string) {
	if h == nil {
		return
	}
	d, _ := json.Marshal(protocol.PusherDataString(data))
	h.add(upstream.Record{Type: upstream.PusherClientEvent, Room: channel, Event: event, Data: d, ConnID: socketID, User: userID})
}

// stop flushes what is queued, within ctx.
func (h *pusherHooks) stop(ctx context.Context) {
	if h != nil {
		h.buf.Close(ctx)
	}
}

package gateway

import (
	"context"
	"encoding/json"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

// History reads a reliable room's kept messages with seq > since, oldest
// first, at most limit (0: api.HistoryReadDefault), and the room's last seq:
// the operation behind both API transports.
func (n *Node) History(ctx context.Context, room string, since int64, limit int) (int64, []protocol.Message, error) {
	return n.HistoryPage(ctx, room, api.HistoryQuery{Since: since, Limit: limit})
}

// HistoryPage reads a reliable room's kept messages as q says, and the
// room's last seq.
func (n *Node) HistoryPage(ctx context.Context, room string, q api.HistoryQuery) (int64, []protocol.Message, error) {
	if err := protocol.ValidName("room", room); err != nil {
		return 0, nil, api.BadRequest("%v", err)
	}
	if q.Limit == 0 {
		q.Limit = api.HistoryReadDefault
	}
	if q.Since < 0 || q.Before < 0 || q.Limit < 0 || q.Limit > api.MaxHistoryRead {
		return 0, nil, api.BadRequest("since and before must be >= 0 and limit 1..%d", api.MaxHistoryRead)
	}
	if q.Before > 0 && !q.Reverse || q.Since > 0 && q.Reverse {
		return 0, nil, api.BadRequest("since reads forwards and before backwards: before needs reverse=true, since goes without it")
	}
	var rd cluster.InboxRead
	var err error
	if q.Reverse {
		rd, err = n.backend.ReadRoomBefore(ctx, room, q.Before, q.Limit, n.historyOpts(room))
	} else {
		rd, err = n.backend.ReadRoom(ctx, room, q.Since, q.Limit, n.historyOpts(room))
	}
	if err != nil {
		return 0, nil, api.Unavailable("room history", err)
	}
	msgs := make([]protocol.Message, 0, len(rd.Messages))
	for _, m := range rd.Messages {
		var msg protocol.Message
		if err := json.Unmarshal(m.Payload, &msg); err != nil {
			n.log.Warn("unreadable room history message skipped", "room", room, "seq", m.Seq, "err", err)
			continue
		}
		msg.Seq = m.Seq
		msgs = append(msgs, msg)
	}
	return rd.LastSeq, msgs, nil
}

// historyFrame answers a history frame (contract 19) of a member of the
// room, or of a connection whose token's rooms claim allows it to join,
// with the object the API gives.
func (c *conn) historyFrame(ctx context.Context, cf *protocol.ClientFrame) {
	if !c.n.hub.member(c.user, cf.Room) && !c.n.hub.connMember(c, cf.Room) && !auth.AllowRoom(c.claims(), cf.Room) {
		c.replyRefused(cf.ID, protocol.ErrForbidden, "not a member of room "+cf.Room+" and the token's rooms claim does not allow it")
		return
	}
	q := api.HistoryQuery{Reverse: cf.Reverse}
	if cf.Since != nil {
		q.Since = *cf.Since
	}
	if cf.Before != nil {
		q.Before = *cf.Before
	}
	if cf.Limit != nil {
		q.Limit = int(*cf.Limit)
	}
	top, msgs, err := c.n.HistoryPage(ctx, cf.Room, q)
	if err != nil {
		c.reply(cf.ID, err, 0)
		return
	}
	res, _ := json.Marshal(api.HistoryResult(top, msgs))
	b, err := protocol.EncodeReply(c.format, &protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, OK: true, Result: res})
	if err != nil {
		c.replyRefused(cf.ID, protocol.ErrUnavailable, "history: "+err.Error())
		return
	}
	c.send(c.dataFrame(b))
}

package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

// History reads of the server API: at most maxHistoryRead messages per
// call, historyReadDefault when the call names no limit.
const (
	historyReadDefault = 100
	maxHistoryRead     = 1000
)

// HistoryQuery is one history read (contract 5 and 19): forwards, the
// messages with seq > Since, oldest first; with Reverse, backwards, the
// messages with seq < Before (0: from the newest), newest first; at most
// Limit (0: historyReadDefault).
type HistoryQuery struct {
	Since, Before int64
	Limit         int
	Reverse       bool
}

// apiHistory answers GET /api/v1/rooms/{room}/history?since=N&limit=M
// (contract 5), and ?before=N&limit=M&reverse=true (contract 19): the kept
// messages of a reliable room after since oldest first, or before before
// newest first, at most M, each as the message frame members got, and
// the room's last seq.
func (n *Node) apiHistory(w http.ResponseWriter, r *http.Request) error {
	var q HistoryQuery
	var err error
	if q.Since, err = queryInt(r, "since", 0, 0, 1<<62); err != nil {
		return err
	}
	if q.Before, err = queryInt(r, "before", 0, 0, 1<<62); err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", historyReadDefault, 1, maxHistoryRead)
	if err != nil {
		return err
	}
	q.Limit = int(limit)
	switch v := r.URL.Query().Get("reverse"); v {
	case "", "false":
	case "true":
		q.Reverse = true
	default:
		return badRequest("reverse must be true or false, got %s", strconv.Quote(v))
	}
	if r.URL.Query().Has("since") && q.Reverse || r.URL.Query().Has("before") && !q.Reverse {
		return badRequest("since reads forwards and before backwards: before needs reverse=true, since goes without it")
	}
	top, msgs, err := n.HistoryPage(r.Context(), r.PathValue("room"), q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, historyResult(top, msgs))
	return nil
}

// historyResult is the answer of a history read, {"seq","messages"}, as
// the API and the history frame give it.
func historyResult(top int64, msgs []protocol.Message) map[string]any {
	out := make([]json.RawMessage, len(msgs))
	for i := range msgs {
		out[i] = protocol.AppendMessageJSON(nil, &msgs[i])
	}
	return map[string]any{"seq": top, "messages": out}
}

// History reads a reliable room's kept messages with seq > since, oldest
// first, at most limit (0: historyReadDefault), and the room's last seq:
// the operation behind both API transports.
func (n *Node) History(ctx context.Context, room string, since int64, limit int) (int64, []protocol.Message, error) {
	return n.HistoryPage(ctx, room, HistoryQuery{Since: since, Limit: limit})
}

// HistoryPage reads a reliable room's kept messages as q says, and the
// room's last seq.
func (n *Node) HistoryPage(ctx context.Context, room string, q HistoryQuery) (int64, []protocol.Message, error) {
	if err := protocol.ValidName("room", room); err != nil {
		return 0, nil, badRequest("%v", err)
	}
	if q.Limit == 0 {
		q.Limit = historyReadDefault
	}
	if q.Since < 0 || q.Before < 0 || q.Limit < 0 || q.Limit > maxHistoryRead {
		return 0, nil, badRequest("since and before must be >= 0 and limit 1..%d", maxHistoryRead)
	}
	if q.Before > 0 && !q.Reverse || q.Since > 0 && q.Reverse {
		return 0, nil, badRequest("since reads forwards and before backwards: before needs reverse=true, since goes without it")
	}
	var rd cluster.InboxRead
	var err error
	if q.Reverse {
		rd, err = n.backend.ReadRoomBefore(ctx, room, q.Before, q.Limit, n.historyOpts(room))
	} else {
		rd, err = n.backend.ReadRoom(ctx, room, q.Since, q.Limit, n.historyOpts(room))
	}
	if err != nil {
		return 0, nil, unavailable("room history", err)
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
	q := HistoryQuery{Reverse: cf.Reverse}
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
	res, _ := json.Marshal(historyResult(top, msgs))
	b, err := protocol.EncodeReply(c.format, &protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, OK: true, Result: res})
	if err != nil {
		c.replyRefused(cf.ID, protocol.ErrUnavailable, "history: "+err.Error())
		return
	}
	c.send(c.dataFrame(b))
}

// queryInt reads an integer query parameter in lo..hi, def when absent.
func queryInt(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, badRequest("%s must be an integer from %d to %d, got %s", name, lo, hi, strconv.Quote(s))
	}
	return v, nil
}

package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/wsgate/wsgate/protocol"
)

// History reads of the server API: at most maxHistoryRead messages per
// call, historyReadDefault when the call names no limit.
const (
	historyReadDefault = 100
	maxHistoryRead     = 1000
)

// apiHistory answers GET /api/v1/rooms/{room}/history?since=N&limit=M
// (contract 5): the kept messages of a reliable room with seq > N,
// oldest first, at most M, each as the message frame members got, and the
// room's last seq.
func (n *Node) apiHistory(w http.ResponseWriter, r *http.Request) error {
	since, err := queryInt(r, "since", 0, 0, 1<<62)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", historyReadDefault, 1, maxHistoryRead)
	if err != nil {
		return err
	}
	top, msgs, err := n.History(r.Context(), r.PathValue("room"), since, int(limit))
	if err != nil {
		return err
	}
	out := make([]json.RawMessage, len(msgs))
	for i := range msgs {
		out[i] = protocol.AppendMessageJSON(nil, &msgs[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"seq": top, "messages": out})
	return nil
}

// History reads a reliable room's kept messages with seq > since, oldest
// first, at most limit (0: historyReadDefault), and the room's last seq:
// the operation behind both API transports.
func (n *Node) History(ctx context.Context, room string, since int64, limit int) (int64, []protocol.Message, error) {
	if err := protocol.ValidName("room", room); err != nil {
		return 0, nil, badRequest("%v", err)
	}
	if limit == 0 {
		limit = historyReadDefault
	}
	if since < 0 || limit < 0 || limit > maxHistoryRead {
		return 0, nil, badRequest("since must be >= 0 and limit 1..%d", maxHistoryRead)
	}
	rd, err := n.backend.ReadRoom(ctx, room, since, limit, n.historyOpts(room))
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

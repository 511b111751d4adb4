package gateway

import (
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
	room := r.PathValue("room")
	if err := protocol.ValidName("room", room); err != nil {
		return badRequest("%v", err)
	}
	since, err := queryInt(r, "since", 0, 0, 1<<62)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", historyReadDefault, 1, maxHistoryRead)
	if err != nil {
		return err
	}
	rd, err := n.backend.ReadRoom(r.Context(), room, since, int(limit), n.historyOpts())
	if err != nil {
		return unavailable("room history", err)
	}
	msgs := make([]json.RawMessage, 0, len(rd.Messages))
	for _, m := range rd.Messages {
		var msg protocol.Message
		if err := json.Unmarshal(m.Payload, &msg); err != nil {
			n.log.Warn("unreadable room history message skipped", "room", room, "seq", m.Seq, "err", err)
			continue
		}
		msg.Seq = m.Seq
		msgs = append(msgs, protocol.AppendMessageJSON(nil, &msg))
	}
	writeJSON(w, http.StatusOK, map[string]any{"seq": rd.LastSeq, "messages": msgs})
	return nil
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

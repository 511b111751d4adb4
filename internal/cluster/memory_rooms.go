package cluster

import (
	"context"
	"slices"
)

// AppendRooms implements Backend: each message appended to its room's
// history in order, with the room's interested nodes.
func (m *Memory) AppendRooms(ctx context.Context, msgs []RoomAppend, opt InboxOptions) []RoomAppendOutcome {
	out := make([]RoomAppendOutcome, len(msgs))
	if err := m.lock(ctx); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	defer m.mu.Unlock()
	now := m.now()
	for i, a := range msgs {
		h := m.histories[a.Room]
		if h == nil {
			h = &memInbox{}
			m.histories[a.Room] = h
		}
		o := &out[i]
		if k, ok := h.keys[a.Key]; a.Key != "" && ok && now.Before(k.expires) {
			o.Seq, o.Existing = k.seq, true
		} else {
			h.seq++
			msg := memMessage{seq: h.seq, payload: slices.Clone(a.Payload)}
			if opt.TTL > 0 {
				msg.expires = now.Add(opt.TTL)
			}
			h.msgs = append(h.msgs, msg)
			h.trim(now, opt.Limit)
			if a.Key != "" {
				h.rememberKey(a.Key, h.seq, now)
			}
			o.Seq = h.seq
		}
		o.Nodes = m.roomNodesLocked(a.Room)
	}
	return out
}

// ReadRoom implements Backend.
func (m *Memory) ReadRoom(ctx context.Context, room string, since int64, most int, opt InboxOptions) (InboxRead, error) {
	if err := m.lock(ctx); err != nil {
		return InboxRead{}, err
	}
	defer m.mu.Unlock()
	h := m.historyLocked(room, opt)
	if h == nil {
		return InboxRead{}, nil
	}
	out := InboxRead{LastSeq: h.seq}
	var first int64
	if len(h.msgs) > 0 {
		first = h.msgs[0].seq
	}
	out.GapFrom, out.GapTo = inboxGap(since, 0, first, h.seq)
	for _, msg := range h.msgs {
		if msg.seq > since && (most <= 0 || len(out.Messages) < most) {
			out.Messages = append(out.Messages, InboxMessage{Seq: msg.seq, Payload: slices.Clone(msg.payload)})
		}
	}
	return out, nil
}

// ReadRoomBefore implements Backend.
func (m *Memory) ReadRoomBefore(ctx context.Context, room string, before int64, most int, opt InboxOptions) (InboxRead, error) {
	if err := m.lock(ctx); err != nil {
		return InboxRead{}, err
	}
	defer m.mu.Unlock()
	h := m.historyLocked(room, opt)
	if h == nil {
		return InboxRead{}, nil
	}
	out := InboxRead{LastSeq: h.seq}
	for i := len(h.msgs) - 1; i >= 0 && (most <= 0 || len(out.Messages) < most); i-- {
		if msg := h.msgs[i]; before <= 0 || msg.seq < before {
			out.Messages = append(out.Messages, InboxMessage{Seq: msg.seq, Payload: slices.Clone(msg.payload)})
		}
	}
	return out, nil
}

// historyLocked is room's history trimmed to opt (nil: the room never had
// a reliable message).
func (m *Memory) historyLocked(room string, opt InboxOptions) *memInbox {
	h := m.histories[room]
	if h != nil {
		h.trim(m.now(), opt.Limit)
	}
	return h
}

// RoomSeqs implements Backend.
func (m *Memory) RoomSeqs(ctx context.Context, rooms []string) ([]int64, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := make([]int64, len(rooms))
	for i, r := range rooms {
		if h := m.histories[r]; h != nil {
			out[i] = h.seq
		}
	}
	return out, nil
}

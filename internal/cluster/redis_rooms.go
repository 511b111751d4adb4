package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// AppendRooms implements Backend with the inbox's append script
// (scriptAppend) on the room's keys, which share one slot: the room's seq
// key stands for both seq and ack (history is not acknowledged), its
// history for the inbox and its interest hash for the routes. The appends
// join the inbox append pipeline (one round trip for a whole batch, and
// for concurrent publishes); with RedisOptions.Replicas > 0 each is
// followed by WAIT, one room's messages one after the other.
func (r *Redis) AppendRooms(ctx context.Context, msgs []RoomAppend, opt InboxOptions) []RoomAppendOutcome {
	out := make([]RoomAppendOutcome, len(msgs))
	if len(msgs) == 0 {
		return out
	}
	now := time.Now()
	if r.opt.Replicas > 0 {
		for i, m := range msgs {
			out[i].RoomAppendResult, out[i].Err = r.appendRoomAndWait(ctx, m, opt, now)
		}
		return out
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	reqs := make([]*appendReq, len(msgs))
	for i, m := range msgs {
		reqs[i] = r.newRoomAppendReq(m, opt, now)
		reqs[i].reqBase = newReqBase(ctx)
	}
	if err := r.appends.add(r.appendBatch, reqs...); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	for i, q := range reqs {
		if out[i].Err = q.wait("append room"); out[i].Err == nil {
			out[i].RoomAppendResult, out[i].Err = decodeRoomAppend(q.reply, now)
		}
	}
	return out
}

func (r *Redis) appendRoomAndWait(ctx context.Context, m RoomAppend, opt InboxOptions, now time.Time) (RoomAppendResult, error) {
	q := r.newRoomAppendReq(m, opt, now)
	var reply []any
	var acked int64
	err := r.do(ctx, "append room", false, func(ctx context.Context) (err error) {
		q.reqBase = newReqBase(ctx)
		keys, args := appendKeysArgs([]*appendReq{q}, time.Now())
		reply, acked, err = r.appendAndWait(ctx, keys, args)
		return err
	})
	if err != nil {
		return RoomAppendResult{}, err
	}
	res, err := decodeRoomAppend(reply, now)
	if err == nil && acked < int64(r.opt.Replicas) {
		err = fmt.Errorf("%w: room append of seq %d confirmed by %d of %d replicas", ErrNotReplicated, res.Seq, acked, r.opt.Replicas)
	}
	return res, err
}

// newRoomAppendReq is newAppendReq for a room: keys seq, seq (for ack),
// history, interest hash, idempotency record.
func (r *Redis) newRoomAppendReq(a RoomAppend, opt InboxOptions, now time.Time) *appendReq {
	q := r.newAppendReq(InboxAppend{Payload: a.Payload}, opt, now)
	seq := r.k.roomSeq(a.Room)
	q.keys = []string{seq, seq, r.k.roomHist(a.Room), r.k.roomNodes(a.Room), seq}
	if a.Key != "" {
		q.keys[4], q.keyMs = r.k.roomIdem(a.Room, a.Key), KeyLifetime.Milliseconds()
	}
	return q
}

// decodeRoomAppend reads one message's part of scriptAppend's reply run on
// a room: the seq and the interest hash (node, expiresAtMs, ...), keeping
// the nodes whose interest has not expired.
func decodeRoomAppend(parts []any, now time.Time) (RoomAppendResult, error) {
	ar, err := decodeAppend("", parts, now)
	if err != nil {
		return RoomAppendResult{}, err
	}
	flat, _ := parts[1].([]any)
	res := RoomAppendResult{Seq: ar.Seq, Existing: ar.Existing}
	nowMs := now.UnixMilli()
	for i := 0; i+1 < len(flat); i += 2 {
		node, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		if exp, err := strconv.ParseInt(v, 10, 64); err == nil && exp > nowMs {
			res.Nodes = append(res.Nodes, node)
		}
	}
	slices.Sort(res.Nodes)
	return res, nil
}

// ReadRoom implements Backend with the inbox's read script (scriptRead)
// on the room's keys: trim, last seq, first kept seq and the messages
// after since.
func (r *Redis) ReadRoom(ctx context.Context, room string, since int64, most int, opt InboxOptions) (InboxRead, error) {
	since = max(since, 0)
	seq := r.k.roomSeq(room)
	keys := []string{seq, seq, r.k.roomHist(room)}
	mark := r.markRead(ctx, r.k.roomConfirm(room))
	var reply []any
	err := r.do(ctx, "read room", true, func(ctx context.Context) (err error) {
		args := []any{time.Now().UnixMilli(), since, max(opt.Limit, 0)}
		reply, err = scriptRead.Run(ctx, r.c, keys, args...).Slice()
		return err
	})
	if err != nil {
		return InboxRead{}, err
	}
	if len(reply) != 4 {
		return InboxRead{}, fmt.Errorf("cluster: redis read room: unexpected reply of %d parts", len(reply))
	}
	last, _ := reply[0].(int64)
	first, _ := reply[2].(int64)
	members, _ := reply[3].([]any)
	if (len(members) > 0 || (since > 0 && last >= since)) && r.opt.Replicas > 0 {
		// As for the inbox (confirmReplicated): a message whose append
		// was answered ErrNotReplicated is visible here at once, and a
		// failover could give its seq to another message. Also a read
		// that finds nothing after since confirms that since itself is
		// replicated (a stream started at an unconfirmed seq, RoomSeqs).
		if err := r.confirmKey(ctx, r.k.roomConfirm(room), mark, "history read of room "+room); err != nil {
			return InboxRead{}, err
		}
	}
	out := InboxRead{LastSeq: last}
	out.GapFrom, out.GapTo = inboxGap(since, 0, first, last)
	if out.Messages, err = decodeInboxMembers(members, most); err != nil {
		return InboxRead{}, err
	}
	return out, nil
}

// ReadRoomBefore implements Backend with one script (scriptReadBefore):
// trim, last seq, and a reverse range read of the history with a LIMIT.
func (r *Redis) ReadRoomBefore(ctx context.Context, room string, before int64, most int, opt InboxOptions) (InboxRead, error) {
	keys := []string{r.k.roomSeq(room), r.k.roomHist(room)}
	mark := r.markRead(ctx, r.k.roomConfirm(room))
	var reply []any
	err := r.do(ctx, "read room", true, func(ctx context.Context) (err error) {
		args := []any{time.Now().UnixMilli(), max(before, 0), max(opt.Limit, 0), max(most, 0)}
		reply, err = scriptReadBefore.Run(ctx, r.c, keys, args...).Slice()
		return err
	})
	if err != nil {
		return InboxRead{}, err
	}
	if len(reply) != 2 {
		return InboxRead{}, fmt.Errorf("cluster: redis read room before: unexpected reply of %d parts", len(reply))
	}
	last, _ := reply[0].(int64)
	members, _ := reply[1].([]any)
	if len(members) > 0 && r.opt.Replicas > 0 {
		// As ReadRoom: what is returned must be replicated.
		if err := r.confirmKey(ctx, r.k.roomConfirm(room), mark, "history read of room "+room); err != nil {
			return InboxRead{}, err
		}
	}
	out := InboxRead{LastSeq: last}
	if out.Messages, err = decodeInboxMembers(members, 0); err != nil {
		return InboxRead{}, err
	}
	return out, nil
}

// RoomSeqs implements Backend: one GET per room, pipelined. With
// RedisOptions.Replicas > 0 the seqs read are confirmed replicated as a
// history read is (a connection starts a room at its seq: an unreplicated
// seq lost in a failover would be given to the next message, which the
// connection would take for a duplicate): once for a single master, per
// room on Redis Cluster. When the replicas do not confirm them, the seqs
// read come with an ErrNotReplicated error: the caller may start from
// them as long as it delivers nothing of those rooms before a read of
// their history (ReadRoom, which confirms) succeeds.
func (r *Redis) RoomSeqs(ctx context.Context, rooms []string) ([]int64, error) {
	keys := make([]string, len(rooms))
	for i, room := range rooms {
		keys[i] = r.k.roomSeq(room)
	}
	var marks []readMark
	if r.opt.Replicas > 0 {
		marks = make([]readMark, len(rooms))
		for i, room := range rooms {
			marks[i] = r.markRead(ctx, r.k.roomConfirm(room))
		}
	}
	seqs, err := r.getInts(ctx, "room seqs", keys)
	if err != nil || r.opt.Replicas == 0 {
		return seqs, err
	}
	_, perRoom := r.c.(*redis.ClusterClient)
	for i, room := range rooms {
		if seqs[i] == 0 {
			continue
		}
		if err := r.confirmKey(ctx, r.k.roomConfirm(room), marks[i], "seq read of room "+room); err != nil {
			if errors.Is(err, ErrNotReplicated) {
				return seqs, err
			}
			return nil, err
		}
		if !perRoom {
			break
		}
	}
	return seqs, nil
}

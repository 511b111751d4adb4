package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// waitTimeout bounds WAIT after an append when RedisOptions.Replicas > 0.
const waitTimeout = time.Second

// AppendInbox implements Backend with one script (scriptAppend): INCR seq,
// ZADD, trim to the limit, PEXPIRE and HGETALL of the routes, pipelined
// with concurrent appends (several messages per script call). With
// RedisOptions.Replicas > 0, WAIT follows in the same pipeline, on the
// connection that wrote. Limit <= 0 keeps any number of messages; TTL <= 0
// keeps them (and the seq) until acknowledged.
//
// The seq and ack keys live max(TTL, 7 days) after the last append (see
// minSeqLifetime): seqs are never reused while a message or a client's
// memory of one could be around.
func (r *Redis) AppendInbox(ctx context.Context, user string, payload []byte, opt InboxOptions) (AppendResult, error) {
	return r.appendOne(ctx, InboxAppend{User: user, Payload: payload}, opt)
}

func (r *Redis) appendOne(ctx context.Context, a InboxAppend, opt InboxOptions) (AppendResult, error) {
	now := time.Now()
	q := r.newAppendReq(a, opt, now)
	var reply []any
	var acked int64 = -1
	// Not idempotent: a repeat after a lost reply would store the message
	// twice under two seqs.
	var err error
	if r.opt.Replicas == 0 {
		// On a timeout the append may still run (unless its script finds
		// the deadline passed); the caller answers 503 and a retry with
		// the same idempotency key is safe.
		err = r.appends.call(ctx, r, "append inbox", r.appendBatch, q)
		reply = q.reply
	} else {
		err = r.do(ctx, "append inbox", false, func(ctx context.Context) (err error) {
			q.reqBase = newReqBase(ctx)
			keys, args := appendKeysArgs([]*appendReq{q}, time.Now())
			reply, acked, err = r.appendAndWait(ctx, keys, args)
			return err
		})
	}
	if err != nil {
		return AppendResult{}, err
	}
	res, err := decodeAppend(a.User, reply, now)
	if err != nil {
		return AppendResult{}, err
	}
	if r.opt.Replicas > 0 && acked < int64(r.opt.Replicas) {
		return res, fmt.Errorf("%w: append of seq %d confirmed by %d of %d replicas", ErrNotReplicated, res.Seq, acked, r.opt.Replicas)
	}
	return res, nil
}

// AppendInboxes implements Backend. Without WAIT the appends join the
// append pipeline together (appendBatch: on standalone Redis and Sentinel
// one script call carries them all); with Replicas > 0 each user's
// messages are appended one after the other by AppendInbox, different
// users in parallel.
func (r *Redis) AppendInboxes(ctx context.Context, msgs []InboxAppend, opt InboxOptions) []AppendOutcome {
	out := make([]AppendOutcome, len(msgs))
	if len(msgs) == 0 {
		return out
	}
	if r.opt.Replicas > 0 {
		appendEachUser(ctx, msgs, out, func(ctx context.Context, m InboxAppend) (AppendResult, error) {
			return r.appendOne(ctx, m, opt)
		})
		return out
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	now := time.Now()
	reqs := make([]*appendReq, len(msgs))
	for i, m := range msgs {
		reqs[i] = r.newAppendReq(m, opt, now)
		reqs[i].reqBase = newReqBase(ctx)
	}
	if err := r.appends.add(r.appendBatch, reqs...); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	for i, q := range reqs {
		// As in AppendInbox: on a timeout the append may still run.
		if out[i].Err = q.wait("append inbox"); out[i].Err == nil {
			out[i].AppendResult, out[i].Err = decodeAppend(msgs[i].User, q.reply, now)
		}
	}
	return out
}

// appendEachUser runs one append per message: a user's messages one after
// the other in order, different users in parallel (at most 64 at once).
func appendEachUser(ctx context.Context, msgs []InboxAppend, out []AppendOutcome, one func(context.Context, InboxAppend) (AppendResult, error)) {
	groups := map[string][]int{}
	var users []string
	for i, m := range msgs {
		if _, ok := groups[m.User]; !ok {
			users = append(users, m.User)
		}
		groups[m.User] = append(groups[m.User], i)
	}
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for _, u := range users {
		idx := groups[u]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, i := range idx {
				out[i].AppendResult, out[i].Err = one(ctx, msgs[i])
			}
		})
	}
	wg.Wait()
}

// appendAndWait runs scriptAppend and WAIT in one pipeline on one
// connection to the master of the user's slot, so that WAIT counts the
// replicas that have this write.
func (r *Redis) appendAndWait(ctx context.Context, keys []string, args []any) (reply []any, acked int64, err error) {
	c, err := r.masterFor(ctx, keys[0])
	if err != nil {
		return nil, 0, err
	}
	run := func(eval bool) (*redis.Cmd, *redis.IntCmd, error) {
		pipe := c.Pipeline()
		var cmd *redis.Cmd
		if eval {
			cmd = scriptAppend.Eval(ctx, pipe, keys, args...)
		} else {
			cmd = scriptAppend.EvalSha(ctx, pipe, keys, args...)
		}
		wait := redis.NewIntCmd(ctx, "wait", r.opt.Replicas, waitTimeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		_, err := pipe.Exec(ctx)
		return cmd, wait, err
	}
	cmd, wait, err := run(false)
	if err != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd, wait, err = run(true)
	}
	if err != nil {
		if rc, ok := r.c.(*redis.ClusterClient); ok && redis.HasErrorPrefix(cmd.Err(), "MOVED") {
			rc.ReloadState(ctx) // so that the retry finds the slot's new master
		}
		return nil, 0, err
	}
	reply, _ = cmd.Val().([]any)
	return reply, wait.Val(), nil
}

// decodeAppend reads one message's part of scriptAppend's reply.
func decodeAppend(user string, parts []any, now time.Time) (AppendResult, error) {
	if len(parts) != 2 {
		return AppendResult{}, fmt.Errorf("cluster: redis append: unexpected reply of %d parts", len(parts))
	}
	seq, ok := parts[0].(int64)
	if msg, isErr := parts[1].(string); ok && seq == 0 && isErr {
		if msg == "past deadline" {
			return AppendResult{}, errPastDeadline
		}
		return AppendResult{}, fmt.Errorf("cluster: redis append inbox: %s", msg)
	}
	flat, ok2 := parts[1].([]any)
	if !ok || !ok2 || seq == 0 {
		return AppendResult{}, fmt.Errorf("cluster: redis append: unexpected reply %v", parts)
	}
	// A negative seq: the message's idempotency key had stored it.
	return AppendResult{Seq: max(seq, -seq), Existing: seq < 0, Routes: decodeRoutesFlat(user, flat, now)}, nil
}

// decodeRoutesFlat is decodeRoutes on a flat HGETALL reply (field, value,
// ...), keeping only the live routes.
func decodeRoutesFlat(user string, flat []any, now time.Time) []Route {
	if len(flat) < 2 {
		return nil
	}
	live := make([]Route, 0, len(flat)/2)
	nowMs := now.UnixMilli()
	for i := 0; i+1 < len(flat); i += 2 {
		conn, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		if strings.HasPrefix(conn, "i:") {
			continue // a route's info (infoField)
		}
		if rt, exp, ok := decodeRoute(v); ok && exp > nowMs {
			rt.User, rt.ConnID = user, conn
			live = append(live, rt)
		}
	}
	sortRoutes(live)
	return live
}

// ReadInbox implements Backend with one script (scriptRead): trim, then
// last seq, ack, first kept seq and the messages after since.
func (r *Redis) ReadInbox(ctx context.Context, user string, since int64, opt InboxOptions) (InboxRead, error) {
	since = max(since, 0)
	keys := []string{r.k.seq(user), r.k.ack(user), r.k.inbox(user)}
	mark := r.markRead(ctx, r.k.confirm(user))
	var reply []any
	err := r.do(ctx, "read inbox", true, func(ctx context.Context) (err error) {
		args := []any{time.Now().UnixMilli(), since, max(opt.Limit, 0)}
		reply, err = scriptRead.Run(ctx, r.c, keys, args...).Slice()
		return err
	})
	if err != nil {
		return InboxRead{}, err
	}
	if len(reply) != 4 {
		return InboxRead{}, fmt.Errorf("cluster: redis read inbox: unexpected reply of %d parts", len(reply))
	}
	if members, _ := reply[3].([]any); len(members) > 0 && r.opt.Replicas > 0 {
		if err := r.confirmReplicated(ctx, user, mark); err != nil {
			return InboxRead{}, err
		}
	}
	last, _ := reply[0].(int64)
	acked, _ := reply[1].(int64)
	first, _ := reply[2].(int64)
	members, _ := reply[3].([]any)
	out := InboxRead{LastSeq: last, Acked: acked}
	out.GapFrom, out.GapTo = inboxGap(since, acked, first, last)
	if out.Messages, err = decodeInboxMembers(members, 0); err != nil {
		return InboxRead{}, err
	}
	return out, nil
}

// decodeInboxMembers parses a script's members (decodeInboxMember), at
// most most of them (0: all).
func decodeInboxMembers(members []any, most int) ([]InboxMessage, error) {
	if most > 0 && len(members) > most {
		members = members[:most]
	}
	var out []InboxMessage
	for _, m := range members {
		s, _ := m.(string)
		msg, err := decodeInboxMember(s)
		if err != nil {
			return nil, err
		}
		out = append(out, msg)
	}
	return out, nil
}

// decodeInboxMember parses "seq:expiresAtMs:payload".
func decodeInboxMember(s string) (InboxMessage, error) {
	seqStr, rest, ok1 := strings.Cut(s, ":")
	_, payload, ok2 := strings.Cut(rest, ":")
	seq, err := strconv.ParseInt(seqStr, 10, 64)
	if !ok1 || !ok2 || err != nil {
		return InboxMessage{}, fmt.Errorf("cluster: redis inbox: malformed member %.40q", s)
	}
	return InboxMessage{Seq: seq, Payload: []byte(payload)}, nil
}

// Ack implements Backend with one script (scriptAck), pipelined across
// callers: the acks of many users share a round trip.
func (r *Redis) Ack(ctx context.Context, user, device string, seq int64, opt InboxOptions) error {
	win, keep := deviceWindow(opt)
	return r.acks.call(ctx, r, "ack", r.ackBatch, &ackReq{
		keys: []string{r.k.seq(user), r.k.ack(user), r.k.inbox(user), r.k.devices(user)},
		args: []any{seq, deviceOf(device), time.Now().UnixMilli(), win, keep, MaxDevices},
	})
}

type ackReq struct {
	reqBase
	keys []string
	args []any // scriptAck's ARGV
}

// ackBatcher pipelines concurrent Ack calls.
type ackBatcher struct{ batcher[*ackReq] }

// ackBatch sends a batch of acks as one pipeline. Acks are idempotent
// (cumulative, never backwards), so the whole batch is sent again after a
// connection error or a transient error reply.
func (r *Redis) ackBatch(batch []*ackReq) {
	ctx, cancel := batchCtx(batch)
	defer cancel()
	cmds, err := r.evalEach(ctx, "ack", true, scriptAck, len(batch), func(i int) ([]string, []any) {
		return batch[i].keys, batch[i].args
	})
	for i, q := range batch {
		qerr := err
		if qerr == nil && cmds[i].Err() != nil {
			qerr = r.wrap("ack", cmds[i].Err())
		}
		q.finish(qerr)
	}
}

// LastSeq implements Backend: GET of the seq key.
func (r *Redis) LastSeq(ctx context.Context, user string) (int64, error) {
	var seq int64
	err := r.do(ctx, "last seq", true, func(ctx context.Context) (err error) {
		seq, err = r.c.Get(ctx, r.k.seq(user)).Int64()
		if err == redis.Nil {
			seq, err = 0, nil
		}
		return err
	})
	return seq, err
}

// LastSeqs implements Backend: one GET per user, pipelined.
func (r *Redis) LastSeqs(ctx context.Context, users []string) ([]int64, error) {
	keys := make([]string, len(users))
	for i, u := range users {
		keys[i] = r.k.seq(u)
	}
	return r.getInts(ctx, "last seqs", keys)
}

// getInts reads integer keys in one pipeline (0 for a missing key).
func (r *Redis) getInts(ctx context.Context, op string, keys []string) ([]int64, error) {
	out := make([]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	err := r.do(ctx, op, true, func(ctx context.Context) error {
		cmds := make([]*redis.StringCmd, len(keys))
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = p.Get(ctx, k)
			}
			return nil
		})
		if err != nil && err != redis.Nil {
			return err
		}
		for i, c := range cmds {
			v, err := c.Int64()
			if err != nil && err != redis.Nil {
				return err
			}
			out[i] = v
		}
		return nil
	})
	return out, err
}

// masterFor is a client of the master that holds key (for WAIT, which
// counts the replicas of one connection's writes).
func (r *Redis) masterFor(ctx context.Context, key string) (*redis.Client, error) {
	switch rc := r.c.(type) {
	case *redis.Client:
		return rc, nil
	case *redis.ClusterClient:
		return rc.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("cluster: redis client %T cannot WAIT", r.c)
}

// confirmReplicated makes sure that what a read of the user's inbox saw
// on the master is on RedisOptions.Replicas replicas too, before it is
// delivered. An append whose WAIT failed (answered 503) is visible on the
// master at once; had it been delivered and then lost in a failover, its
// seq would be assigned again on the new master, to another message that
// the client would take for a duplicate. Replication is one ordered
// stream per master, so a write made now (to a key of the user's slot)
// and confirmed by WAIT covers every write the read saw, if the read was
// made on that master (mark, from markRead before the read: see
// confirmKey).
func (r *Redis) confirmReplicated(ctx context.Context, user string, mark readMark) error {
	return r.confirmKey(ctx, r.k.confirm(user), mark, "inbox read of "+user)
}

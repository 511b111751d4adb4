package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// waitTimeout bounds WAIT after an append when RedisOptions.Replicas > 0.
const waitTimeout = time.Second

// AppendInbox implements Backend with one script (scriptAppend): INCR seq,
// ZADD, trim, PEXPIRE and HGETALL of the routes in one round trip. With
// RedisOptions.Replicas > 0, WAIT follows in the same pipeline, on the
// connection that wrote. Limit <= 0 keeps any number of messages; TTL <= 0
// keeps them (and the seq) until acknowledged.
//
// The seq and ack keys live max(TTL, 7 days) after the last append (see
// minSeqLifetime): seqs are never reused while a message or a client's
// memory of one could be around.
func (r *Redis) AppendInbox(ctx context.Context, user string, payload []byte, opt InboxOptions) (AppendResult, error) {
	keys := []string{r.k.seq(user), r.k.ack(user), r.k.inbox(user), r.k.routes(user)}
	now := time.Now()
	var ttl, keep int64
	if opt.TTL > 0 {
		ttl = max(opt.TTL.Milliseconds(), 1)
		keep = max(opt.TTL, minSeqLifetime).Milliseconds()
	}
	args := []any{now.UnixMilli(), ttl, max(opt.Limit, 0), keep, payload}

	var reply any
	var acked int64 = -1
	// Not idempotent: a repeat after a lost reply would store the message
	// twice under two seqs.
	var err error
	if r.opt.Replicas == 0 {
		reply, err = r.appends.run(ctx, r, keys, args)
	} else {
		err = r.do(ctx, "append inbox", false, func(ctx context.Context) (err error) {
			reply, acked, err = r.appendAndWait(ctx, keys, args)
			return err
		})
	}
	if err != nil {
		return AppendResult{}, err
	}
	res, err := decodeAppend(user, reply, now)
	if err != nil {
		return AppendResult{}, err
	}
	if r.opt.Replicas > 0 && acked < int64(r.opt.Replicas) {
		return res, fmt.Errorf("%w: append of seq %d confirmed by %d of %d replicas", ErrNotReplicated, res.Seq, acked, r.opt.Replicas)
	}
	return res, nil
}

// appendAndWait runs scriptAppend and WAIT in one pipeline on one
// connection to the master of the user's slot, so that WAIT counts the
// replicas that have this write.
func (r *Redis) appendAndWait(ctx context.Context, keys []string, args []any) (reply any, acked int64, err error) {
	var c *redis.Client
	switch rc := r.c.(type) {
	case *redis.Client:
		c = rc
	case *redis.ClusterClient:
		if c, err = rc.MasterForKey(ctx, keys[0]); err != nil {
			return nil, 0, err
		}
	default:
		return nil, 0, fmt.Errorf("cluster: redis client %T cannot WAIT", r.c)
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
	return cmd.Val(), wait.Val(), nil
}

func decodeAppend(user string, reply any, now time.Time) (AppendResult, error) {
	parts, ok := reply.([]any)
	if !ok || len(parts) != 2 {
		return AppendResult{}, fmt.Errorf("cluster: redis append: unexpected reply %T", reply)
	}
	seq, ok := parts[0].(int64)
	flat, ok2 := parts[1].([]any)
	if !ok || !ok2 {
		return AppendResult{}, fmt.Errorf("cluster: redis append: unexpected reply %v", reply)
	}
	fields := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		fields[k] = v
	}
	routes, _ := decodeRoutes(user, fields, now)
	return AppendResult{Seq: seq, Routes: routes}, nil
}

// ReadInbox implements Backend with one script (scriptRead): trim, then
// last seq, ack, first kept seq and the messages after since.
func (r *Redis) ReadInbox(ctx context.Context, user string, since int64, opt InboxOptions) (InboxRead, error) {
	since = max(since, 0)
	keys := []string{r.k.seq(user), r.k.ack(user), r.k.inbox(user)}
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
	last, _ := reply[0].(int64)
	acked, _ := reply[1].(int64)
	first, _ := reply[2].(int64)
	members, _ := reply[3].([]any)
	out := InboxRead{LastSeq: last, Acked: acked}
	out.GapFrom, out.GapTo = inboxGap(since, acked, first, last)
	for _, m := range members {
		s, _ := m.(string)
		msg, err := decodeInboxMember(s)
		if err != nil {
			return InboxRead{}, err
		}
		out.Messages = append(out.Messages, msg)
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

// Ack implements Backend with one script (scriptAck).
func (r *Redis) Ack(ctx context.Context, user string, seq int64) error {
	keys := []string{r.k.seq(user), r.k.ack(user), r.k.inbox(user)}
	return r.do(ctx, "ack", true, func(ctx context.Context) error {
		return scriptAck.Run(ctx, r.c, keys, seq).Err()
	})
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

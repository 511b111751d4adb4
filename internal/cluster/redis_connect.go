package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// connectReq is one Connect waiting for its batch.
type connectReq struct {
	reqBase
	route Route
	ttl   time.Duration
	since int64
	opt   InboxOptions
	lim   ConnLimit
	res   ConnectResult
}

// connectBatcher pipelines concurrent Connect calls: under a connect
// storm hundreds of connects share a round trip.
type connectBatcher struct{ batcher[*connectReq] }

// Connect implements Backend with scriptConnect, pipelined across callers.
func (r *Redis) Connect(ctx context.Context, route Route, ttl time.Duration, since int64, opt InboxOptions, lim ConnLimit) (ConnectResult, error) {
	q := &connectReq{route: route, ttl: ttl, since: max(since, -1), opt: opt, lim: lim}
	if err := r.connects.call(ctx, r, "connect", r.connectBatch, q); err != nil {
		return ConnectResult{}, err
	}
	return q.res, nil
}

func (r *Redis) connectBatch(batch []*connectReq) {
	ctx, cancel := batchCtx(batch)
	defer cancel()
	keysArgs := func(q *connectReq) ([]string, []any) {
		u := q.route.User
		now := time.Now()
		win, keep := deviceWindow(q.opt)
		args := []any{q.route.ConnID, encodeRoute(q.route, now.Add(q.ttl).UnixMilli()), (q.ttl + keySlack).Milliseconds(),
			now.UnixMilli(), q.since, max(q.opt.Limit, 0), sendDeadline(q.ctx, now), max(q.lim.Max, 0),
			deviceOf(q.route.Device), win, keep, MaxDevices, q.route.Info}
		if q.lim.Max > 0 {
			args = append(args, toAny(q.lim.IgnoreNodes)...)
		}
		return []string{r.k.routes(u), r.k.userRooms(u), r.k.seq(u), r.k.ack(u), r.k.inbox(u), r.k.devices(u)}, args
	}
	var marks []readMark
	if r.opt.Replicas > 0 {
		marks = make([]readMark, len(batch))
		for i, q := range batch {
			marks[i] = r.markRead(ctx, r.k.confirm(q.route.User))
		}
	}
	// Every call is idempotent (a route HSET and reads), so the batch may
	// be sent again after a connection error.
	cmds, err := r.evalEach(ctx, "connect", true, scriptConnect, len(batch), func(i int) ([]string, []any) {
		return keysArgs(batch[i])
	})
	errs := make([]error, len(batch))
	var confirms sync.WaitGroup
	for i, q := range batch {
		switch {
		case err != nil:
			errs[i] = err
		case cmds[i].Err() != nil:
			errs[i] = r.wrap("connect", cmds[i].Err())
		default:
			q.res, errs[i] = decodeConnect(max(q.since, 0), cmds[i].Val())
			if errs[i] == nil && len(q.res.Inbox.Messages) > 0 && r.opt.Replicas > 0 {
				// What the replay would deliver must survive a failover
				// (see confirmReplicated). The batch's reads join one
				// round of confirmation per master; one the replicas
				// did not confirm connects without its replay, which
				// the caller reads again (ConnectResult.Unconfirmed).
				confirms.Go(func() {
					if cerr := r.confirmReplicated(ctx, q.route.User, marks[i]); cerr != nil {
						q.res.Unconfirmed = true
						q.res.Inbox.Messages, q.res.Inbox.GapFrom, q.res.Inbox.GapTo = nil, 0, 0
					}
				})
			}
		}
	}
	confirms.Wait()
	for i, q := range batch {
		q.finish(errs[i])
	}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// deviceWindow is what the device scripts take from opt: how long a
// device seen counts (the inbox TTL, 0 = always) and the lifetime of the
// devices key (that of the seq key, 0 = persist), in ms.
func deviceWindow(opt InboxOptions) (win, keep int64) {
	if opt.TTL <= 0 {
		return 0, 0
	}
	return max(opt.TTL.Milliseconds(), 1), max(opt.TTL, minSeqLifetime).Milliseconds()
}

// decodeConnect reads scriptConnect's reply; since is the caller's (0
// when it gave none): the gap starts after it or the device's ack.
func decodeConnect(since int64, reply any) (ConnectResult, error) {
	if v, ok := reply.(int64); ok {
		if v == 1 {
			return ConnectResult{}, ErrConnLimit
		}
		return ConnectResult{}, errPastDeadline
	}
	parts, ok := reply.([]any)
	if !ok || len(parts) != 5 {
		return ConnectResult{}, fmt.Errorf("cluster: redis connect: unexpected reply %T", reply)
	}
	last, _ := parts[0].(int64)
	acked, _ := parts[1].(int64)
	first, _ := parts[2].(int64)
	members, _ := parts[3].([]any)
	out := ConnectResult{Inbox: InboxRead{LastSeq: last, Acked: acked}}
	out.Inbox.GapFrom, out.Inbox.GapTo = inboxGap(since, acked, first, last)
	for _, m := range members {
		s, _ := m.(string)
		msg, err := decodeInboxMember(s)
		if err != nil {
			return ConnectResult{}, err
		}
		out.Inbox.Messages = append(out.Inbox.Messages, msg)
	}
	rooms, _ := parts[4].([]any)
	for _, x := range rooms {
		if s, ok := x.(string); ok {
			out.Rooms = append(out.Rooms, s)
		}
	}
	return out, nil
}

// RemoveRoutes implements Backend: one HDEL per route, pipelined in
// batches (each HDEL removes exactly that connection's field).
func (r *Redis) RemoveRoutes(ctx context.Context, routes []Route) error {
	for batch := range slices.Chunk(routes, routeBatch) {
		err := r.do(ctx, "remove routes", true, func(ctx context.Context) error {
			_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, rt := range batch {
					p.HDel(ctx, r.k.routes(rt.User), rt.ConnID, infoField(rt.ConnID))
				}
				return nil
			})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

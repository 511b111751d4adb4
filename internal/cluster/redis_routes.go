package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// routeBatch is how many routes one pipeline round trip carries (2 commands
// each). Redis Cluster pipelines are split by slot by go-redis itself.
const routeBatch = 1000

// AddRoutes implements Backend: per route HSET of its field and PEXPIRE of
// the user's key, pipelined, one round trip per routeBatch routes.
func (r *Redis) AddRoutes(ctx context.Context, routes []Route, ttl time.Duration) error {
	if len(routes) == 0 {
		return nil
	}
	now := time.Now()
	value := func(rt Route) string { return encodeRoute(rt, now.Add(ttl).UnixMilli()) }
	keyTTL := ttl + keySlack
	for batch := range slices.Chunk(routes, routeBatch) {
		err := r.do(ctx, "add routes", true, func(ctx context.Context) error {
			_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, rt := range batch {
					key := r.k.routes(rt.User)
					if len(rt.Info) > 0 {
						p.HSet(ctx, key, rt.ConnID, value(rt), infoField(rt.ConnID), rt.Info)
					} else {
						p.HSet(ctx, key, rt.ConnID, value(rt))
					}
					p.PExpire(ctx, key, keyTTL)
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

// RemoveRoute implements Backend: HDEL of exactly that field.
func (r *Redis) RemoveRoute(ctx context.Context, user, connID string) error {
	return r.do(ctx, "remove route", true, func(ctx context.Context) error {
		return r.c.HDel(ctx, r.k.routes(user), connID, infoField(connID)).Err()
	})
}

// UserRoutes implements Backend: HGETALL, then HDEL of the expired fields
// (when there are any).
func (r *Redis) UserRoutes(ctx context.Context, user string) ([]Route, error) {
	var fields map[string]string
	err := r.do(ctx, "user routes", true, func(ctx context.Context) (err error) {
		fields, err = r.c.HGetAll(ctx, r.k.routes(user)).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	routes, expired := decodeRoutes(user, fields, time.Now())
	r.hdelIfSame(ctx, r.k.routes(user), fields, expired)
	return routes, nil
}

// UsersRoutes implements Backend: one HGETALL per user in one pipeline,
// then (rarely) HDEL of expired fields as UserRoutes does.
func (r *Redis) UsersRoutes(ctx context.Context, users []string) ([][]Route, error) {
	out := make([][]Route, len(users))
	for start := 0; start < len(users); start += routeBatch {
		batch := users[start:min(start+routeBatch, len(users))]
		cmds := make([]*redis.MapStringStringCmd, len(batch))
		err := r.do(ctx, "user routes", true, func(ctx context.Context) error {
			_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, u := range batch {
					cmds[i] = p.HGetAll(ctx, r.k.routes(u))
				}
				return nil
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		now := time.Now()
		for i, u := range batch {
			fields := cmds[i].Val()
			routes, expired := decodeRoutes(u, fields, now)
			out[start+i] = routes
			r.hdelIfSame(ctx, r.k.routes(u), fields, expired)
		}
	}
	return out, nil
}

// encodeRoute is the value of a route field: "node|connectedAtMs|expiresAtMs".
// encodeRoute is "node|connectedAtMs|expiresAtMs", then "|@device" for a
// named device (the default device's value is the v1 one, which nodes of
// the previous version read).
func encodeRoute(rt Route, expiresAt int64) string {
	v := rt.Node + "|" + strconv.FormatInt(rt.ConnectedAt, 10) + "|" + strconv.FormatInt(expiresAt, 10)
	if d := deviceOf(rt.Device); d != DefaultDevice {
		v += "|@" + d
	}
	return v
}

// decodeRoute parses encodeRoute's value from the right, so node ids may
// contain '|' (a device holds none, and a number no '@').
func decodeRoute(v string) (rt Route, expiresAt int64, ok bool) {
	rt.Device = DefaultDevice
	if i := strings.LastIndexByte(v, '|'); i >= 0 && strings.HasPrefix(v[i+1:], "@") {
		v, rt.Device = v[:i], v[i+2:]
	}
	i := strings.LastIndexByte(v, '|')
	if i < 0 {
		return Route{}, 0, false
	}
	j := strings.LastIndexByte(v[:i], '|')
	if j < 0 {
		return Route{}, 0, false
	}
	var err1, err2 error
	rt.ConnectedAt, err1 = strconv.ParseInt(v[j+1:i], 10, 64)
	expiresAt, err2 = strconv.ParseInt(v[i+1:], 10, 64)
	rt.Node = v[:j]
	return rt, expiresAt, err1 == nil && err2 == nil
}

// infoField is the field of a route's info in the user's routes hash,
// beside the route's own (a connection id holds no ':'). A node of an
// earlier version reads it as a route that does not parse and removes
// it: presence then lacks that info, and nothing else changes.
func infoField(connID string) string { return "i:" + connID }

// decodeRoutes turns a routes hash into the live routes (sorted like
// Memory's), with their info, and the fields that expired or do not
// parse (an info field whose route is not live among them).
func decodeRoutes(user string, fields map[string]string, now time.Time) (live []Route, expired []string) {
	live = make([]Route, 0, len(fields))
	nowMs := now.UnixMilli()
	for conn, v := range fields {
		if strings.HasPrefix(conn, "i:") {
			continue
		}
		rt, exp, ok := decodeRoute(v)
		if !ok || exp <= nowMs {
			expired = append(expired, conn)
			continue
		}
		rt.User, rt.ConnID = user, conn
		if info, ok := fields[infoField(conn)]; ok {
			rt.Info = info
		}
		live = append(live, rt)
	}
	for f := range fields {
		if id, ok := strings.CutPrefix(f, "i:"); ok && !slices.ContainsFunc(live, func(rt Route) bool { return rt.ConnID == id }) {
			expired = append(expired, f)
		}
	}
	sortRoutes(live)
	return live, expired
}

// JoinRoom implements Backend. The user's step (scriptJoinRoom: the bound,
// the user's rooms, the routes) and the room's (SADD to its members, GET
// of its seq) are two slots; concurrent joins share one pipeline for both
// (see joinBatcher). A refused join's member SADD is undone after. The two
// slots are not atomic together: a crash between them leaves the user in
// one of the two sets; repeating the join repairs it and is never refused.
func (r *Redis) JoinRoom(ctx context.Context, room, user string, maxRooms int) (Joined, error) {
	q := &joinReq{room: room, user: user, bound: max(maxRooms, 0)}
	mark := r.markRead(ctx, r.k.roomConfirm(room))
	if err := r.joins.call(ctx, r, "join room", r.joinBatch, q); err != nil {
		return Joined{}, err
	}
	if q.res.RoomSeq > 0 && r.opt.Replicas > 0 {
		// As RoomSeqs: the seq a follower starts from must survive a failover.
		if err := r.confirmKey(ctx, r.k.roomConfirm(room), mark, "seq read of room "+room); err != nil {
			return Joined{}, err
		}
	}
	return q.res, nil
}

// joinReq is one JoinRoom waiting for its batch.
type joinReq struct {
	reqBase
	room, user string
	bound      int
	res        Joined
}

// joinBatcher pipelines concurrent JoinRoom calls, as connectBatcher does
// connects: a reconnect storm's joins share round trips.
type joinBatcher struct{ batcher[*joinReq] }

func (r *Redis) joinBatch(batch []*joinReq) {
	ctx, cancel := batchCtx(batch)
	defer cancel()
	added := make([]*redis.IntCmd, len(batch))
	seqs := make([]*redis.Cmd, len(batch))
	// Every command is idempotent (SADD, reads), so the batch may be sent again.
	cmds, err := r.evalEachWith(ctx, "join room", true, scriptJoinRoom, len(batch), func(i int) ([]string, []any) {
		q := batch[i]
		return []string{r.k.userRooms(q.user), r.k.routes(q.user)}, []any{q.room, q.bound}
	}, func(p redis.Pipeliner, i int) {
		added[i] = p.SAdd(ctx, r.k.roomMembers(batch[i].room), batch[i].user)
		seqs[i] = scriptJoinSeq.Eval(ctx, p, []string{r.k.roomSeq(batch[i].room), r.k.roomJoins(batch[i].room)}, batch[i].user)
	})
	now := time.Now()
	var undo []*joinReq
	for i, q := range batch {
		if err != nil {
			q.finish(err)
			continue
		}
		if e := cmds[i].Err(); e != nil {
			q.finish(r.wrap("join room", e))
			continue
		}
		if e := added[i].Err(); e != nil {
			q.finish(r.wrap("join room", e))
			continue
		}
		parts, _ := cmds[i].Val().([]any)
		if len(parts) == 0 {
			q.finish(fmt.Errorf("cluster: redis join room: unexpected reply %v", cmds[i].Val()))
			continue
		}
		if v, _ := parts[0].(int64); v == 1 {
			if added[i].Val() == 1 {
				undo = append(undo, q)
			} else {
				q.finish(ErrRoomLimit)
			}
			continue
		}
		seq, e := seqs[i].Int64()
		if e != nil {
			q.finish(r.wrap("join room", e))
			continue
		}
		flat, _ := parts[1].([]any)
		q.res = Joined{Routes: decodeRoutesFlat(q.user, flat, now), RoomSeq: seq}
		q.finish(nil)
	}
	if len(undo) == 0 {
		return
	}
	// Answered once undone: a refused join leaves nothing on either side.
	err = r.do(ctx, "join room", true, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, q := range undo {
				p.SRem(ctx, r.k.roomMembers(q.room), q.user)
				p.HDel(ctx, r.k.roomJoins(q.room), q.user)
			}
			return nil
		})
		return err
	})
	for _, q := range undo {
		q.finish(cmp.Or(err, ErrRoomLimit))
	}
}

// LeaveRoom implements Backend, like JoinRoom with SREM.
func (r *Redis) LeaveRoom(ctx context.Context, room, user string) error {
	return r.do(ctx, "leave room", true, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.SRem(ctx, r.k.roomMembers(room), user)
			p.SRem(ctx, r.k.userRooms(user), room)
			p.HDel(ctx, r.k.roomJoins(room), user)
			return nil
		})
		return err
	})
}

// JoinSeqs implements Backend: HGET of each room's joins, in one
// pipeline.
func (r *Redis) JoinSeqs(ctx context.Context, user string, rooms []string) ([]int64, error) {
	out := make([]int64, len(rooms))
	if len(rooms) == 0 {
		return out, nil
	}
	err := r.do(ctx, "join seqs", true, func(ctx context.Context) error {
		cmds := make([]*redis.StringCmd, len(rooms))
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, room := range rooms {
				cmds[i] = p.HGet(ctx, r.k.roomJoins(room), user)
			}
			return nil
		})
		if err != nil && err != redis.Nil {
			return err
		}
		for i, c := range cmds {
			v, err := c.Int64()
			switch {
			case err == redis.Nil:
				v = -1
			case err != nil:
				return err
			}
			out[i] = v
		}
		return nil
	})
	return out, err
}

// RoomMembers implements Backend, sorted.
func (r *Redis) RoomMembers(ctx context.Context, room string) ([]string, error) {
	return r.sortedSet(ctx, "room members", r.k.roomMembers(room))
}

// UserRooms implements Backend, sorted.
func (r *Redis) UserRooms(ctx context.Context, user string) ([]string, error) {
	return r.sortedSet(ctx, "user rooms", r.k.userRooms(user))
}

func (r *Redis) sortedSet(ctx context.Context, op, key string) ([]string, error) {
	var out []string
	err := r.do(ctx, op, true, func(ctx context.Context) (err error) {
		out, err = r.c.SMembers(ctx, key).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// SetRoomInterest implements Backend: per room HSET node -> expiry and
// PEXPIRE of the room's key, plus SADD of the rooms to the node's set, all
// in one pipeline.
func (r *Redis) SetRoomInterest(ctx context.Context, node string, rooms []string, ttl time.Duration) error {
	if len(rooms) == 0 {
		return nil
	}
	exp := strconv.FormatInt(time.Now().Add(ttl).UnixMilli(), 10)
	keyTTL := ttl + keySlack
	for batch := range slices.Chunk(rooms, routeBatch) {
		err := r.do(ctx, "set room interest", true, func(ctx context.Context) error {
			_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, room := range batch {
					p.HSet(ctx, r.k.roomNodes(room), node, exp)
					p.PExpire(ctx, r.k.roomNodes(room), keyTTL)
				}
				p.SAdd(ctx, r.k.nodeRooms(node), toAny(batch)...)
				p.PExpire(ctx, r.k.nodeRooms(node), keyTTL)
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

// DropRoomInterest implements Backend: HDEL per room and SREM from the
// node's set, in one pipeline.
func (r *Redis) DropRoomInterest(ctx context.Context, node string, rooms []string) error {
	if len(rooms) == 0 {
		return nil
	}
	for batch := range slices.Chunk(rooms, routeBatch) {
		err := r.do(ctx, "drop room interest", true, func(ctx context.Context) error {
			_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, room := range batch {
					p.HDel(ctx, r.k.roomNodes(room), node)
				}
				p.SRem(ctx, r.k.nodeRooms(node), toAny(batch)...)
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

// RoomNodes implements Backend: HGETALL, skipping (and then deleting)
// expired entries.
func (r *Redis) RoomNodes(ctx context.Context, room string) ([]string, error) {
	var fields map[string]string
	err := r.do(ctx, "room nodes", true, func(ctx context.Context) (err error) {
		fields, err = r.c.HGetAll(ctx, r.k.roomNodes(room)).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	out := make([]string, 0, len(fields))
	var expired []string
	for node, v := range fields {
		if exp, err := strconv.ParseInt(v, 10, 64); err != nil || exp <= now {
			expired = append(expired, node)
			continue
		}
		out = append(out, node)
	}
	r.hdelIfSame(ctx, r.k.roomNodes(room), fields, expired)
	slices.Sort(out)
	return out, nil
}

// hdelIfSame deletes the expired fields of a hash that still hold the value
// read (see scriptHDelIfSame). Best effort: readers skip expired fields
// anyway, so an error is ignored.
func (r *Redis) hdelIfSame(ctx context.Context, key string, read map[string]string, expired []string) {
	if len(expired) == 0 {
		return
	}
	args := make([]any, 0, 2*len(expired))
	for _, f := range expired {
		args = append(args, f, read[f])
	}
	_ = r.do(ctx, "expire entries", true, func(ctx context.Context) error {
		return scriptHDelIfSame.Run(ctx, r.c, []string{key}, args...).Err()
	})
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

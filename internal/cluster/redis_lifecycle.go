package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var _ Lifecycle = (*Redis)(nil)

// Lifecycle keys (see redis_keys.go for the rest of the layout):
//
//	{P:u:USER}:live          hash conn id -> "node|connectedAtMs|online v"
//	{P:u:USER}:pv            string, the user's presence counter v (INCR)
//	{P:u:USER}:ended:CONN    string "claimer|node|connectedAtMs|offline v",
//	                         the claim of the connection's end; PX endedTTL
//	{P:u:USER}:evack         string, highest acknowledged seq (undelivered
//	                         checks); PX ackedTTL
//	{P:nodes}:conns:NODE     set "user\nconn id" of NODE's live connections
//	{P:nodes}:lcnodes        set of nodes that have such a set
//	{P:events}:due           zset member = JSON Due, score = due Unix ms
//
// live, pv and ended share the user's slot, so that ConnUp and ConnDown
// are one script each: whether a connection is the user's first or last,
// and who reports an end, is decided once.
func (k redisKeys) live(user string) string        { return k.user(user, "live") }
func (k redisKeys) presenceV(user string) string   { return k.user(user, "pv") }
func (k redisKeys) ended(user, conn string) string { return k.user(user, "ended:"+conn) }
func (k redisKeys) evAck(user string) string       { return k.user(user, "evack") }
func (k redisKeys) nodeConns(node string) string   { return "{" + k.p + ":nodes}:conns:" + node }
func (k redisKeys) lifecycleNodes() string         { return "{" + k.p + ":nodes}:lcnodes" }
func (k redisKeys) due() string                    { return "{" + k.p + ":events}:due" }
func nodeConnMember(user, conn string) string      { return user + "\n" + conn }

const (
	// endedTTL is how long the claim of an end is kept: longer than any
	// retry of a ConnDown or ConnUp for that connection.
	endedTTL = time.Hour
	// ackedTTL bounds the undelivered checks' view of acknowledgements.
	ackedTTL = 7 * 24 * time.Hour
)

var scriptConnUp = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then return tonumber(string.match(cur, '([^|]*)$')) end
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local online = 0
if redis.call('HLEN', KEYS[1]) == 0 then online = redis.call('INCR', KEYS[2]) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|' .. ARGV[3] .. '|' .. online)
return online
`)

var scriptConnDown = redis.NewScript(`
local e = redis.call('GET', KEYS[3])
if e then
  local claimer, node, at, off = string.match(e, '^(.*)|([^|]*)|([^|]*)|([^|]*)$')
  if claimer == ARGV[2] then return {1, node, tonumber(at), tonumber(off)} end
  return {0}
end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return {0} end
redis.call('HDEL', KEYS[1], ARGV[1])
local node, at = string.match(cur, '^([^|]*)|([^|]*)|')
local off = 0
if redis.call('HLEN', KEYS[1]) == 0 then off = redis.call('INCR', KEYS[2]) end
redis.call('SET', KEYS[3], ARGV[2] .. '|' .. node .. '|' .. at .. '|' .. off, 'PX', ARGV[3])
return {1, node, tonumber(at), off}
`)

var scriptClaimDue = redis.NewScript(`
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, m in ipairs(items) do redis.call('ZADD', KEYS[1], ARGV[2], m) end
return items
`)

var scriptAcked = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > cur then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
`)

func (r *Redis) evalOne(ctx context.Context, op string, script *redis.Script, keys []string, args ...any) (any, error) {
	cmds, err := r.evalEach(ctx, op, true, script, 1, func(int) ([]string, []any) { return keys, args })
	if err != nil {
		return nil, err
	}
	v, err := cmds[0].Result()
	if err != nil {
		return nil, r.wrap(op, err)
	}
	return v, nil
}

// ConnUp implements Lifecycle: the node's list first, then the user's
// script (a node that dies between the two leaves an entry that claims
// nothing).
func (r *Redis) ConnUp(ctx context.Context, route Route) (int64, error) {
	err := r.do(ctx, "lifecycle", true, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.SAdd(ctx, r.k.nodeConns(route.Node), nodeConnMember(route.User, route.ConnID))
			p.SAdd(ctx, r.k.lifecycleNodes(), route.Node)
			return nil
		})
		return err
	})
	if err != nil {
		return 0, err
	}
	v, err := r.evalOne(ctx, "lifecycle", scriptConnUp,
		[]string{r.k.live(route.User), r.k.presenceV(route.User), r.k.ended(route.User, route.ConnID)},
		route.ConnID, route.Node, route.ConnectedAt)
	if err != nil {
		return 0, err
	}
	online, _ := v.(int64)
	return online, nil
}

// ConnDown implements Lifecycle; the claimer also takes the connection
// off its node's list.
func (r *Redis) ConnDown(ctx context.Context, user, connID, claimer string) (ConnEnd, error) {
	v, err := r.evalOne(ctx, "lifecycle", scriptConnDown,
		[]string{r.k.live(user), r.k.presenceV(user), r.k.ended(user, connID)},
		connID, claimer, endedTTL.Milliseconds())
	if err != nil {
		return ConnEnd{}, err
	}
	parts, _ := v.([]any)
	if len(parts) == 0 {
		return ConnEnd{}, fmt.Errorf("cluster: redis conn down: unexpected reply %T", v)
	}
	if c, _ := parts[0].(int64); c != 1 || len(parts) != 4 {
		return ConnEnd{}, nil
	}
	node, _ := parts[1].(string)
	at, _ := parts[2].(int64)
	off, _ := parts[3].(int64)
	end := ConnEnd{Claimed: true, Route: Route{User: user, ConnID: connID, Node: node, ConnectedAt: at}, Offline: off}
	err = r.do(ctx, "lifecycle", true, func(ctx context.Context) error {
		return r.c.SRem(ctx, r.k.nodeConns(node), nodeConnMember(user, connID)).Err()
	})
	return end, err
}

// NodeConns implements Lifecycle.
func (r *Redis) NodeConns(ctx context.Context, node string) ([]Route, error) {
	var members []string
	err := r.do(ctx, "lifecycle", true, func(ctx context.Context) error {
		var err error
		members, err = r.c.SMembers(ctx, r.k.nodeConns(node)).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Route, 0, len(members))
	for _, m := range members {
		user, conn, ok := strings.Cut(m, "\n")
		if ok {
			out = append(out, Route{User: user, ConnID: conn, Node: node})
		}
	}
	return out, nil
}

// DropNodeConns implements Lifecycle.
func (r *Redis) DropNodeConns(ctx context.Context, node string) error {
	return r.do(ctx, "lifecycle", true, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, r.k.nodeConns(node))
			p.SRem(ctx, r.k.lifecycleNodes(), node)
			return nil
		})
		return err
	})
}

// LifecycleNodes implements Lifecycle.
func (r *Redis) LifecycleNodes(ctx context.Context) ([]string, error) {
	var out []string
	err := r.do(ctx, "lifecycle", true, func(ctx context.Context) error {
		var err error
		out, err = r.c.SMembers(ctx, r.k.lifecycleNodes()).Result()
		return err
	})
	return out, err
}

func dueMember(d Due) string {
	b, _ := json.Marshal(d)
	return string(b)
}

// AddDue implements Lifecycle.
func (r *Redis) AddDue(ctx context.Context, ds ...Due) error {
	if len(ds) == 0 {
		return nil
	}
	zs := make([]redis.Z, len(ds))
	for i, d := range ds {
		zs[i] = redis.Z{Score: float64(d.Due), Member: dueMember(d)}
	}
	return r.do(ctx, "lifecycle", true, func(ctx context.Context) error {
		return r.c.ZAdd(ctx, r.k.due(), zs...).Err()
	})
}

// ClaimDue implements Lifecycle: one script moves the due checks a lease
// ahead and returns them; then the users' acknowledgements are read.
func (r *Redis) ClaimDue(ctx context.Context, now time.Time, lease time.Duration, max int) ([]Due, error) {
	v, err := r.evalOne(ctx, "lifecycle", scriptClaimDue, []string{r.k.due()},
		now.UnixMilli(), now.Add(lease).UnixMilli(), max)
	if err != nil {
		return nil, err
	}
	items, _ := v.([]any)
	out := make([]Due, 0, len(items))
	for _, it := range items {
		s, _ := it.(string)
		var d Due
		if json.Unmarshal([]byte(s), &d) != nil {
			continue
		}
		d.member = s
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.StringCmd, len(out))
	err = r.do(ctx, "lifecycle", true, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, d := range out {
				cmds[i] = p.Get(ctx, r.k.evAck(d.User))
			}
			return nil
		})
		if err == redis.Nil {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Acked, _ = strconv.ParseInt(cmds[i].Val(), 10, 64)
	}
	return out, nil
}

// DoneDue implements Lifecycle.
func (r *Redis) DoneDue(ctx context.Context, d Due) error {
	m := d.member
	if m == "" {
		m = dueMember(d)
	}
	return r.do(ctx, "lifecycle", true, func(ctx context.Context) error {
		return r.c.ZRem(ctx, r.k.due(), m).Err()
	})
}

// Acked implements Lifecycle.
func (r *Redis) Acked(ctx context.Context, user string, seq int64) error {
	_, err := r.evalOne(ctx, "lifecycle", scriptAcked, []string{r.k.evAck(user)}, seq, ackedTTL.Milliseconds())
	return err
}

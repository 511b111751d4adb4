package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

var _ Presence = (*Redis)(nil)

// Presence keys (see redis_keys.go for the rest of the layout):
//
//	{P:r:ROOM}:pres        hash conn id -> "seq|" + JSON entry
//	{P:r:ROOM}:pusers      hash user -> connections present
//	{P:r:ROOM}:pseq        string, the room's presence seq (INCR)
//	{P:pres:NODE}:conns    set "room\nuser\nconn id" of NODE's entries
//	{P:pres}:nodes         set of nodes that have such a set
//	{P:pres}:rooms         zset (all scores 0: in name order) of rooms with a presence
//	{P:pres}:rgens         hash room -> {P:pres}:rgen (INCR) at its last entry
//
// The room index is written after each entry's add and cleaned by a
// compare-and-delete of a room found empty (its score unchanged since it
// was read): an add that races the cleaning writes its room again.
//
// A room's three keys share its slot: an add or a remove, the counts and
// the seq are one script. The node's set is written before the room's
// hash on an add and after it on a remove, so that a node dying between
// the two leaves its set with an entry too many (removing it again
// changes nothing), never a room entry that no list names.
func (k redisKeys) roomPres(room string) string      { return "{" + k.p + ":r:" + room + "}:pres" }
func (k redisKeys) roomPresUsers(room string) string { return "{" + k.p + ":r:" + room + "}:pusers" }
func (k redisKeys) roomPresSeq(room string) string   { return "{" + k.p + ":r:" + room + "}:pseq" }
func (k redisKeys) nodePres(node string) string      { return "{" + k.p + ":pres:" + node + "}:conns" }
func (k redisKeys) presNodes() string                { return "{" + k.p + ":pres}:nodes" }
func (k redisKeys) presRooms() string                { return "{" + k.p + ":pres}:rooms" }
func (k redisKeys) presRoomsGen() string             { return "{" + k.p + ":pres}:rgen" }
func (k redisKeys) presRoomsGens() string            { return "{" + k.p + ":pres}:rgens" }

var scriptPresenceIndex = redis.NewScript(`
redis.call('ZADD', KEYS[1], 0, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], redis.call('INCR', KEYS[2]))
return 1
`)

var scriptPresenceUnindex = redis.NewScript(`
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return 1
`)

// Both scripts answer {changed, seq, users, connections, user's
// connections, removal seq}.
var scriptPresenceAdd = redis.NewScript(`
local floor = tonumber(ARGV[5])
if floor > tonumber(redis.call('GET', KEYS[3]) or '0') then redis.call('SET', KEYS[3], floor) end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  return {0, tonumber(string.match(cur, '^(%d+)|')), redis.call('HLEN', KEYS[2]), redis.call('HLEN', KEYS[1]), tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0'), 0}
end
local seq = tonumber(ARGV[4])
if seq > 0 then
  if seq > tonumber(redis.call('GET', KEYS[3]) or '0') then redis.call('SET', KEYS[3], seq) end
else
  seq = redis.call('INCR', KEYS[3])
end
redis.call('HSET', KEYS[1], ARGV[1], seq .. '|' .. ARGV[3])
local uc = redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
return {1, seq, redis.call('HLEN', KEYS[2]), redis.call('HLEN', KEYS[1]), uc, 0}
`)

var scriptPresenceRemove = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then
  return {0, 0, redis.call('HLEN', KEYS[2]), redis.call('HLEN', KEYS[1]), tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0'), 0}
end
redis.call('HDEL', KEYS[1], ARGV[1])
local uc = redis.call('HINCRBY', KEYS[2], ARGV[2], -1)
if uc <= 0 then redis.call('HDEL', KEYS[2], ARGV[2]); uc = 0 end
local at = redis.call('INCR', KEYS[3])
return {1, tonumber(string.match(cur, '^(%d+)|')), redis.call('HLEN', KEYS[2]), redis.call('HLEN', KEYS[1]), uc, at}
`)

var scriptPresenceSnapshot = redis.NewScript(`
return {tonumber(redis.call('GET', KEYS[2]) or '0'), redis.call('HGETALL', KEYS[1])}
`)

func presenceChange(v any) (PresenceChange, error) {
	parts, _ := v.([]any)
	if len(parts) != 6 {
		return PresenceChange{}, fmt.Errorf("cluster: redis presence: unexpected reply %v", v)
	}
	n := make([]int64, 6)
	for i, p := range parts {
		n[i], _ = p.(int64)
	}
	return PresenceChange{Changed: n[0] == 1, Seq: n[1], Counts: PresenceCounts{Users: n[2], Conns: n[3]}, UserConns: n[4], At: n[5]}, nil
}

// AddPresence implements Presence.
func (r *Redis) AddPresence(ctx context.Context, room string, e PresenceEntry) (PresenceChange, error) {
	err := r.do(ctx, "presence", true, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.SAdd(ctx, r.k.nodePres(e.Node), nodePresenceMember(room, e.User, e.ConnID))
			p.SAdd(ctx, r.k.presNodes(), e.Node)
			return nil
		})
		return err
	})
	if err != nil {
		return PresenceChange{}, err
	}
	body, err := json.Marshal(e)
	if err != nil {
		return PresenceChange{}, err
	}
	v, err := r.evalOne(ctx, "presence", scriptPresenceAdd,
		[]string{r.k.roomPres(room), r.k.roomPresUsers(room), r.k.roomPresSeq(room)}, e.ConnID, e.User, body, e.Seq, e.Floor)
	if err != nil {
		return PresenceChange{}, err
	}
	ch, err := presenceChange(v)
	if err != nil || !ch.Changed {
		return ch, err
	}
	_, err = r.evalOne(ctx, "presence", scriptPresenceIndex, []string{r.k.presRooms(), r.k.presRoomsGen(), r.k.presRoomsGens()}, room)
	return ch, err
}

// unindexIfEmpty takes room out of the room index when it has no
// presence, unless an add indexed it again meanwhile.
func (r *Redis) unindexIfEmpty(ctx context.Context, room string) error {
	var gen *redis.StringCmd
	var conns *redis.IntCmd
	err := r.do(ctx, "presence", true, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			gen = p.HGet(ctx, r.k.presRoomsGens(), room)
			conns = p.HLen(ctx, r.k.roomPres(room))
			return nil
		})
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		return err
	})
	if err != nil || gen.Err() != nil || conns.Val() > 0 {
		return err
	}
	_, err = r.evalOne(ctx, "presence", scriptPresenceUnindex, []string{r.k.presRooms(), r.k.presRoomsGens()}, room, gen.Val())
	return err
}

// RemovePresence implements Presence.
func (r *Redis) RemovePresence(ctx context.Context, room string, e PresenceEntry) (PresenceChange, error) {
	v, err := r.evalOne(ctx, "presence", scriptPresenceRemove,
		[]string{r.k.roomPres(room), r.k.roomPresUsers(room), r.k.roomPresSeq(room)}, e.ConnID, e.User)
	if err != nil {
		return PresenceChange{}, err
	}
	ch, err := presenceChange(v)
	if err != nil {
		return ch, err
	}
	err = r.do(ctx, "presence", true, func(ctx context.Context) error {
		return r.c.SRem(ctx, r.k.nodePres(e.Node), nodePresenceMember(room, e.User, e.ConnID)).Err()
	})
	if err == nil && ch.Changed && ch.Counts.Conns == 0 {
		err = r.unindexIfEmpty(ctx, room)
	}
	return ch, err
}

// PresenceRooms implements Presence.
func (r *Redis) PresenceRooms(ctx context.Context, prefix, cursor string, limit int) ([]RoomCounts, error) {
	min := "[" + prefix
	if cursor != "" && cursor >= prefix {
		min = "(" + cursor
	}
	max := "+"
	if prefix != "" {
		max = "[" + prefix + "\xff" // above every byte of UTF-8
	}
	out := []RoomCounts{}
	for len(out) < limit {
		var names []string
		err := r.do(ctx, "presence", true, func(ctx context.Context) error {
			var err error
			names, err = r.c.ZRangeByLex(ctx, r.k.presRooms(), &redis.ZRangeBy{Min: min, Max: max, Count: int64(limit - len(out))}).Result()
			return err
		})
		if err != nil || len(names) == 0 {
			return out, err
		}
		users := make([]*redis.IntCmd, len(names))
		conns := make([]*redis.IntCmd, len(names))
		err = r.do(ctx, "presence", true, func(ctx context.Context) error {
			_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, room := range names {
					users[i] = p.HLen(ctx, r.k.roomPresUsers(room))
					conns[i] = p.HLen(ctx, r.k.roomPres(room))
				}
				return nil
			})
			return err
		})
		if err != nil {
			return out, err
		}
		for i, room := range names {
			if conns[i].Val() == 0 {
				_ = r.unindexIfEmpty(ctx, room) // emptied: listed no more
				continue
			}
			out = append(out, RoomCounts{Room: room, PresenceCounts: PresenceCounts{Users: users[i].Val(), Conns: conns[i].Val()}})
		}
		min = "(" + names[len(names)-1]
	}
	return out, nil
}

// RoomPresence implements Presence: the cursor is HSCAN's.
func (r *Redis) RoomPresence(ctx context.Context, room, cursor string, limit int) (PresenceCounts, []PresenceEntry, string, error) {
	var users, conns *redis.IntCmd
	var scan *redis.ScanCmd
	var cur uint64
	if cursor != "" {
		var err error
		if cur, err = strconv.ParseUint(cursor, 10, 64); err != nil {
			return PresenceCounts{}, nil, "", fmt.Errorf("%w: bad cursor %q", ErrBadCursor, cursor)
		}
	}
	err := r.do(ctx, "presence", true, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			users = p.HLen(ctx, r.k.roomPresUsers(room))
			conns = p.HLen(ctx, r.k.roomPres(room))
			if limit > 0 {
				scan = p.HScan(ctx, r.k.roomPres(room), cur, "", int64(limit))
			}
			return nil
		})
		return err
	})
	if err != nil {
		return PresenceCounts{}, nil, "", err
	}
	counts := PresenceCounts{Users: users.Val(), Conns: conns.Val()}
	if scan == nil {
		return counts, nil, "", nil
	}
	kv, next := scan.Val()
	out := parsePresence(room, kv)
	nextCursor := ""
	if next != 0 {
		nextCursor = strconv.FormatUint(next, 10)
	}
	return counts, out, nextCursor, nil
}

// parsePresence reads HSCAN's or HGETALL's field-value list of a room's
// presence hash.
func parsePresence(room string, kv []string) []PresenceEntry {
	out := make([]PresenceEntry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		seq, body, ok := strings.Cut(kv[i+1], "|")
		var e PresenceEntry
		if !ok || json.Unmarshal([]byte(body), &e) != nil {
			continue // not written by AddPresence: skip rather than fail the list
		}
		e.Room = room
		e.Seq, _ = strconv.ParseInt(seq, 10, 64)
		out = append(out, e)
	}
	return out
}

// PresenceSnapshot implements Presence.
func (r *Redis) PresenceSnapshot(ctx context.Context, room string) (int64, []PresenceEntry, error) {
	v, err := r.evalOne(ctx, "presence", scriptPresenceSnapshot, []string{r.k.roomPres(room), r.k.roomPresSeq(room)})
	if err != nil {
		return 0, nil, err
	}
	parts, _ := v.([]any)
	if len(parts) != 2 {
		return 0, nil, fmt.Errorf("cluster: redis presence snapshot: unexpected reply %T", v)
	}
	seq, _ := parts[0].(int64)
	raw, _ := parts[1].([]any)
	kv := make([]string, 0, len(raw))
	for _, x := range raw {
		s, _ := x.(string)
		kv = append(kv, s)
	}
	return seq, parsePresence(room, kv), nil
}

// NodePresence implements Presence.
func (r *Redis) NodePresence(ctx context.Context, node string) ([]PresenceEntry, error) {
	var members []string
	err := r.do(ctx, "presence", true, func(ctx context.Context) error {
		var err error
		members, err = r.c.SMembers(ctx, r.k.nodePres(node)).Result()
		return err
	})
	out := make([]PresenceEntry, 0, len(members))
	for _, m := range members {
		e := parseNodePresence(m)
		e.Node = node
		out = append(out, e)
	}
	return out, err
}

// PresenceNodes implements Presence.
func (r *Redis) PresenceNodes(ctx context.Context) ([]string, error) {
	var ids []string
	err := r.do(ctx, "presence", true, func(ctx context.Context) error {
		var err error
		ids, err = r.c.SMembers(ctx, r.k.presNodes()).Result()
		return err
	})
	return ids, err
}

// DropNodePresence implements Presence.
func (r *Redis) DropNodePresence(ctx context.Context, node string) error {
	return r.do(ctx, "presence", true, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, r.k.nodePres(node))
			p.SRem(ctx, r.k.presNodes(), node)
			return nil
		})
		return err
	})
}

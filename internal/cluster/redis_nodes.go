package cluster

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RegisterNode implements Backend: one script writes the node's hash,
// refreshes its TTL (RedisOptions.NodeTTL) and adds it to the index.
// A zero Heartbeat is set to now.
func (r *Redis) RegisterNode(ctx context.Context, n NodeInfo) error {
	_, err := r.putNode(ctx, "register node", n)
	if err == nil {
		r.mu.Lock()
		r.registered[n.ID] = true
		r.mu.Unlock()
		r.refreshBusMode(ctx)
	}
	return err
}

// Heartbeat implements Backend like RegisterNode. lost is true when the
// hash did not exist before the write (Redis lost its data, or the record
// expired or was removed) and the node had registered through this backend
// before.
func (r *Redis) Heartbeat(ctx context.Context, n NodeInfo) (bool, error) {
	existed, err := r.putNode(ctx, "heartbeat", n)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	lost := !existed && r.registered[n.ID]
	r.registered[n.ID] = true
	r.mu.Unlock()
	r.refreshBusMode(ctx)
	return lost, nil
}

func (r *Redis) putNode(ctx context.Context, op string, n NodeInfo) (existed bool, err error) {
	if n.Heartbeat == 0 {
		n.Heartbeat = time.Now().UnixMilli()
	}
	args := append([]any{r.opt.NodeTTL.Milliseconds(), n.ID}, encodeNode(n)...)
	args = append(args, r.nodeBusField()...)
	keys := []string{r.k.node(n.ID), r.k.nodeIndex()}
	// Not idempotent: a repeat after a lost reply would hide "lost".
	err = r.do(ctx, op, false, func(ctx context.Context) error {
		v, err := scriptPutNode.Run(ctx, r.c, keys, args...).Int64()
		existed = v == 1
		return err
	})
	return existed, err
}

// RemoveNode implements Backend: reads the node's declared rooms, then one
// pipeline deletes its interest in each room, its hash, its index entry and
// its set of rooms.
func (r *Redis) RemoveNode(ctx context.Context, id string) error {
	var rooms []string
	err := r.do(ctx, "remove node", true, func(ctx context.Context) (err error) {
		rooms, err = r.c.SMembers(ctx, r.k.nodeRooms(id)).Result()
		return err
	})
	if err != nil {
		return err
	}
	return r.do(ctx, "remove node", true, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, room := range rooms {
				p.HDel(ctx, r.k.roomNodes(room), id)
			}
			p.Del(ctx, r.k.node(id))
			p.SRem(ctx, r.k.nodeIndex(), id)
			p.Del(ctx, r.k.nodeRooms(id))
			return nil
		})
		return err
	})
}

// Nodes implements Backend: one script reads the index and every hash and
// drops ids whose hash expired.
func (r *Redis) Nodes(ctx context.Context) ([]NodeInfo, error) {
	var reply []any
	err := r.do(ctx, "nodes", true, func(ctx context.Context) (err error) {
		reply, err = scriptNodes.Run(ctx, r.c, []string{r.k.nodeIndex()}, r.k.nodePrefix()).Slice()
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]NodeInfo, 0, len(reply))
	for _, h := range reply {
		flat, ok := h.([]any)
		if !ok {
			return nil, fmt.Errorf("cluster: redis nodes: unexpected reply %T", h)
		}
		out = append(out, decodeNode(flat))
	}
	return out, nil
}

// encodeNode lists the hash fields of a node record.
func encodeNode(n NodeInfo) []any {
	return []any{
		"id", n.ID,
		"url", n.URL,
		"api_url", n.APIURL,
		"status", string(n.Status),
		"weight", strconv.Itoa(n.Weight),
		"connections", strconv.Itoa(n.Connections),
		"load", strconv.FormatFloat(n.Load, 'g', -1, 64),
		"started_at", strconv.FormatInt(n.StartedAt, 10),
		"heartbeat", strconv.FormatInt(n.Heartbeat, 10),
		"version", n.Version,
		"id_prefix", n.IDPrefix,
		"published", strconv.FormatInt(n.Published, 10),
		"delivered", strconv.FormatInt(n.Delivered, 10),
	}
}

// decodeNode reads a flat HGETALL reply; unknown fields are ignored (a
// newer node may write more).
func decodeNode(flat []any) NodeInfo {
	var n NodeInfo
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		switch k {
		case "id":
			n.ID = v
		case "url":
			n.URL = v
		case "api_url":
			n.APIURL = v
		case "status":
			n.Status = NodeStatus(v)
		case "weight":
			n.Weight, _ = strconv.Atoi(v)
		case "connections":
			n.Connections, _ = strconv.Atoi(v)
		case "load":
			n.Load, _ = strconv.ParseFloat(v, 64)
		case "started_at":
			n.StartedAt, _ = strconv.ParseInt(v, 10, 64)
		case "heartbeat":
			n.Heartbeat, _ = strconv.ParseInt(v, 10, 64)
		case "version":
			n.Version = v
		case "id_prefix":
			n.IDPrefix = v
		case "published":
			n.Published, _ = strconv.ParseInt(v, 10, 64)
		case "delivered":
			n.Delivered, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return n
}

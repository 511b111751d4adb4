package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// roomResume is what a new connection needs of its reliable rooms: their
// seqs for the welcome, each stream's starting position, and the replays
// that room_since asked for.
type roomResume struct {
	seqs  map[string]int64 // welcome.rooms: the reliable rooms and their seqs
	bases map[string]int64 // each reliable room's starting position
	reads map[string]roomRead
}

type roomRead struct {
	since       int64
	rd          cluster.InboxRead
	unconfirmed bool // the replicas did not confirm the read: rd is empty, catch-up reads it again
}

// resumeRooms reads the seqs of the user's rooms in one pipelined step and
// the history of each reliable one that room_since names (a room_since
// for a room the user is not a member of, or one that never had a
// reliable message, is ignored). A room_since above the room's seq means
// its history was lost: the stream starts at the room's seq, which the
// welcome tells the client (contract 12). Without room_since a stream
// starts at the room's seq: what comes after it comes live.
func (n *Node) resumeRooms(ctx context.Context, rooms []string, since map[string]int64) (roomResume, error) {
	var out roomResume
	if len(rooms) == 0 {
		return out, nil
	}
	start := time.Now()
	seqs, err := n.backend.RoomSeqs(ctx, rooms)
	n.observe("room_seqs", start, err)
	// Seqs the replicas did not confirm: the connection opens all the
	// same (contract 22), each reliable room's stream in catch-up from
	// its seq until a read of its history is confirmed.
	unconfirmed := errors.Is(err, cluster.ErrNotReplicated) && len(seqs) == len(rooms)
	if err != nil && !unconfirmed {
		return out, err
	}
	for i, room := range rooms {
		if seqs[i] == 0 {
			continue
		}
		if out.seqs == nil {
			out.seqs, out.bases = map[string]int64{}, map[string]int64{}
		}
		out.seqs[room], out.bases[room] = seqs[i], seqs[i]
		s, ok := since[room]
		if !ok || s >= seqs[i] {
			if unconfirmed {
				if out.reads == nil {
					out.reads = map[string]roomRead{}
				}
				out.reads[room] = roomRead{since: seqs[i], unconfirmed: true}
			}
			continue
		}
		start := time.Now()
		rd, err := n.backend.ReadRoom(ctx, room, s, 0, n.historyOpts(room))
		n.observe("room_history", start, err)
		if out.reads == nil {
			out.reads = map[string]roomRead{}
		}
		switch {
		case errors.Is(err, cluster.ErrNotReplicated):
			// Connected all the same (contract 22): the stream starts at
			// since and its catch-up reads the replay again until the
			// replicas confirm it.
			out.reads[room] = roomRead{since: s, unconfirmed: true}
		case err != nil:
			return out, err
		default:
			out.reads[room] = roomRead{since: s, rd: rd}
		}
		out.bases[room] = s
	}
	return out, nil
}

// queueLocked starts the connection's room streams and queues the
// replays, before anything live.
func (r roomResume) queueLocked(c *conn) {
	for room, base := range r.bases {
		s := c.sess.ResumeRoom(room, base)
		if rr, ok := r.reads[room]; ok {
			c.replayLocked(s, rr.since, rr.rd, rr.unconfirmed)
		}
	}
}

// replayRoom queues the room's kept messages above the position of the
// stream a join frame with since started (changeMembership), before the
// join's reply (contract 4.2). A stream the connection had already (the
// room's messages came live meanwhile) keeps its position.
func (c *conn) replayRoom(room string, since int64) {
	c.mu.Lock()
	s := c.sess.Follow(room, since)
	c.mu.Unlock()
	c.resync(s)
}

// forgetRoom makes the user's local connections stop following a room
// the user left.
func (n *Node) forgetRoom(user, room string) {
	for _, c := range n.hub.userConns(user) {
		c.mu.Lock()
		c.sess.Forget(room)
		c.mu.Unlock()
	}
}

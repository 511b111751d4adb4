package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

// codeTooManyRooms is the API's code of a join beyond
// WSGATE_MAX_ROOMS_PER_USER; a join frame gets forbidden instead.
const codeTooManyRooms = "too_many_rooms"

// JoinRoom makes user a member of room cluster-wide (refused with 409
// too_many_rooms beyond WSGATE_MAX_ROOMS_PER_USER): the membership is
// stored first, then every node holding the user's connections declares
// interest in the room (done here, so a publish right after the answer
// finds them) and updates its local index through the bus.
func (n *Node) JoinRoom(ctx context.Context, room, user string) error {
	_, err := n.changeMembership(ctx, room, user, true, nil, nil)
	return err
}

// LeaveRoom ends user's membership of room.
func (n *Node) LeaveRoom(ctx context.Context, room, user string) error {
	_, err := n.changeMembership(ctx, room, user, false, nil, nil)
	return err
}

// followLocal starts the streams of the user's connections here for a
// reliable room joined at seq (the room's seq when the membership was
// stored: they get what comes after it, contract 4.2). It runs before the
// local index has the membership: a room message delivered to a member
// without a stream, or a catch-up check finding one, takes the room for
// one that was plain when the member followed it and starts at 0, which
// is right only once every join path has started its streams. The
// connection whose join frame this is (except) starts from the frame's
// since when it has one. Nothing starts for a room still plain (seq 0):
// its first reliable message starts the streams at 0. A connection that
// follows the room already keeps its position.
func (n *Node) followLocal(user, room string, seq int64, except *conn, since *int64) {
	for _, c := range n.hub.userConns(user) {
		base := seq
		if c == except && since != nil {
			base = *since
		} else if seq <= 0 {
			continue
		}
		c.mu.Lock()
		c.sess.Follow(room, base)
		c.mu.Unlock()
	}
}

// resyncLocal makes the user's connections here read the room's history
// from their streams' positions (a stream not started yet starts at base):
// messages appended after the join but before this node's index had the
// membership did not come live. skip (the connection whose join frame
// has a since) reads on its own, before the frame's reply.
func (n *Node) resyncLocal(user, room string, base int64, skip *conn) {
	for _, c := range n.hub.userConns(user) {
		if c == skip {
			continue
		}
		c.mu.Lock()
		s := c.sess.Follow(room, base)
		c.mu.Unlock()
		n.goFunc(func() { c.resync(s) })
	}
}

// changeMembership answers, for a join, the room's seq read when the
// membership was stored: the user's connections follow the room from
// there, but for except, the connection whose join frame this is, when
// the frame has a since (it follows from it).
func (n *Node) changeMembership(ctx context.Context, room, user string, join bool, except *conn, since *int64) (roomSeq int64, err error) {
	if err := protocol.ValidName("room", room); err != nil {
		return 0, api.BadRequest("%v", err)
	}
	if err := protocol.ValidName("user", user); err != nil {
		return 0, api.BadRequest("%v", err)
	}
	defer n.hub.beginChange(user)() // the backend has it before the index (roomconverge.go)
	start := time.Now()
	// A join reads, in the same step, the user's routes (after the
	// membership is stored; a connect stores its route before it reads
	// the user's rooms: one of the two always sees the other) and the
	// room's seq.
	var routes []cluster.Route
	if join {
		var j cluster.Joined
		j, err = n.backend.JoinRoom(ctx, room, user, n.cfg.MaxRoomsPerUser)
		routes, roomSeq = j.Routes, j.RoomSeq
	} else {
		err = n.backend.LeaveRoom(ctx, room, user)
	}
	if errors.Is(err, cluster.ErrRoomLimit) {
		n.observe("rooms", start, nil) // an answer, not a backend failure
		return 0, &api.Error{Status: http.StatusConflict, Code: codeTooManyRooms,
			Message: fmt.Sprintf("user %s is a member of %d rooms, the limit (WSGATE_MAX_ROOMS_PER_USER)", user, n.cfg.MaxRoomsPerUser)}
	}
	n.observe("rooms", start, err)
	if err != nil {
		return 0, api.Unavailable("room membership", err)
	}
	n.events.membership(user, room, join)
	if !join {
		start = time.Now()
		routes, err = n.backend.UserRoutes(ctx, user)
		n.observe("route", start, err)
		if err != nil {
			return 0, api.Unavailable("routes", err)
		}
	}
	var remote []string
	for _, id := range routeNodes(routes) {
		if id == n.cfg.NodeID {
			if join {
				n.followLocal(user, room, roomSeq, except, since)
				added, _ := n.hub.join(user, room)
				if !added {
					n.presenceEnterUser(user, room)
				}
				if added {
					// The first local member: what was appended between
					// the join and the interest did not come to this node.
					// Read the seq again, after the interest, and fetch
					// those from the history. (With another local member,
					// the room's messages came meanwhile; one that missed
					// this user shows as a hole at the next one, or to the
					// catch-up checks.)
					n.declareInterest([]string{room}) // a failure is repaired by the heartbeat's
					// Entered after the interest: the joined of a later
					// entry is sent to the room's nodes read after it.
					n.presenceEnterUser(user, room)
					start = time.Now()
					seqs, err := n.backend.RoomSeqs(ctx, []string{room})
					n.observe("room_seqs", start, err)
					if err != nil {
						return 0, api.Unavailable("room seq", err)
					}
					if seqs[0] > roomSeq {
						var skip *conn
						if since != nil {
							skip = except
						}
						n.resyncLocal(user, room, roomSeq, skip)
					}
				}
			} else {
				if n.hub.leave(user, room) {
					n.dropInterest([]string{room})
				}
				n.presenceLeaveUser(user, room)
				n.forgetRoom(user, room)
			}
			continue
		}
		remote = append(remote, id)
		if join {
			if err := n.backend.SetRoomInterest(ctx, id, []string{room}, n.cfg.RouteTTL); err != nil {
				return 0, api.Unavailable("room interest", err)
			}
		}
	}
	if len(remote) > 0 {
		e := envelope{Kind: kindMembership, User: user, Room: room, Join: join}
		if join {
			e.RoomSeq = &roomSeq
		}
		env := encodeEnvelope(e, nil)
		if err := n.backend.Send(ctx, remote, env); err != nil {
			return 0, api.Unavailable("bus", err)
		}
	}
	return roomSeq, nil
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

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
	_, err := n.changeMembership(ctx, room, user, true, nil)
	return err
}

// LeaveRoom ends user's membership of room.
func (n *Node) LeaveRoom(ctx context.Context, room, user string) error {
	_, err := n.changeMembership(ctx, room, user, false, nil)
	return err
}

// followLocal makes the user's connections here follow a reliable room
// from seq (nothing for a room still plain: see deliverLocked), except
// the one whose join frame this is (it follows from its own since).
func (n *Node) followLocal(user, room string, seq int64, except *conn) {
	if seq <= 0 {
		return
	}
	for _, c := range n.hub.userConns(user) {
		if c == except {
			continue
		}
		c.mu.Lock()
		c.roomStreamLocked(room, seq)
		c.mu.Unlock()
	}
}

// changeMembership answers, for a join, the room's last seq read after
// this node's interest in the room was declared: the user's connections
// follow the room from there, but for except, the connection whose join
// frame this is (it follows from its own since).
func (n *Node) changeMembership(ctx context.Context, room, user string, join bool, except *conn) (roomSeq int64, err error) {
	if err := protocol.ValidName("room", room); err != nil {
		return 0, badRequest("%v", err)
	}
	if err := protocol.ValidName("user", user); err != nil {
		return 0, badRequest("%v", err)
	}
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
		return 0, &APIError{Status: http.StatusConflict, Code: codeTooManyRooms,
			Message: fmt.Sprintf("user %s is a member of %d rooms, the limit (WSGATE_MAX_ROOMS_PER_USER)", user, n.cfg.MaxRoomsPerUser)}
	}
	n.observe("rooms", start, err)
	if err != nil {
		return 0, unavailable("room membership", err)
	}
	n.events.membership(user, room, join)
	if !join {
		start = time.Now()
		routes, err = n.backend.UserRoutes(ctx, user)
		n.observe("route", start, err)
		if err != nil {
			return 0, unavailable("routes", err)
		}
	}
	var remote []string
	for _, id := range routeNodes(routes) {
		if id == n.cfg.NodeID {
			if join {
				if added, _ := n.hub.join(user, room); added {
					// The first local member: the seq read above came
					// before the interest; read it again after, so that
					// nothing appended in between goes unnoticed.
					n.declareInterest([]string{room}) // a failure is repaired by the heartbeat's
					start = time.Now()
					seqs, err := n.backend.RoomSeqs(ctx, []string{room})
					n.observe("room_seqs", start, err)
					if err != nil {
						return 0, unavailable("room seq", err)
					}
					roomSeq = seqs[0]
				}
				n.followLocal(user, room, roomSeq, except)
			} else {
				if n.hub.leave(user, room) {
					n.dropInterest([]string{room})
				}
				n.forgetRoom(user, room)
			}
			continue
		}
		remote = append(remote, id)
		if join {
			if err := n.backend.SetRoomInterest(ctx, id, []string{room}, n.cfg.RouteTTL); err != nil {
				return 0, unavailable("room interest", err)
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
			return 0, unavailable("bus", err)
		}
	}
	return roomSeq, nil
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/rooms"
	"github.com/wsgate/wsgate/internal/upstream"
	"github.com/wsgate/wsgate/protocol"
)

// joinProxyTimeout bounds a join proxy's answer (contract 19).
const joinProxyTimeout = 5 * time.Second

var joinProxyClient = &http.Client{Timeout: joinProxyTimeout}

// Codes of refused joins (contract 19).
const codeFull = "full"

// joinFrame handles a client join: allowed by a room token, else by the
// namespace's join proxy, else by the token's rooms claim; bounded by the
// namespace's max_members; then a membership of the user (scope user) or
// of the connection alone (scope connection). A refused join registers
// nothing.
func (c *conn) joinFrame(ctx context.Context, cf *protocol.ClientFrame) {
	n, room := c.n, cf.Room
	ns := n.ns(room)
	var info json.RawMessage
	switch {
	case cf.Token != "":
		if err := n.checkRoomToken(cf.Token, c.user, room); err != nil {
			c.replyRefused(cf.ID, protocol.ErrForbidden, "room token: "+err.Error())
			return
		}
	case ns.JoinProxy != "":
		var code, msg string
		info, code, msg = n.askJoinProxy(ctx, ns.JoinProxy, c, room, cf.Data)
		if code != "" {
			c.replyRefused(cf.ID, code, msg)
			return
		}
	case !auth.AllowRoom(c.claims(), room):
		c.replyRefused(cf.ID, protocol.ErrForbidden, "the token's rooms claim does not allow room "+room)
		return
	}
	if err := n.checkFull(ctx, ns, c, room); err != nil {
		c.reply(cf.ID, err, 0)
		return
	}
	if info != nil {
		c.mu.Lock()
		x := c.extra()
		if x.presInfo == nil {
			x.presInfo = map[string]json.RawMessage{}
		}
		x.presInfo[room] = info
		c.mu.Unlock()
	}
	if ns.Scope == rooms.ScopeConnection {
		c.reply(cf.ID, n.joinConnRoom(ctx, c, room, cf.Since), 0)
		return
	}
	_, err := n.changeMembership(ctx, room, c.user, true, c, cf.Since)
	if ae, ok := err.(*api.Error); ok && ae.Code == codeTooManyRooms {
		c.replyRefused(cf.ID, protocol.ErrForbidden, ae.Message)
		return
	}
	if err == nil && cf.Since != nil {
		c.replayRoom(room, *cf.Since)
	}
	if err == nil {
		n.presenceFlush(ctx, c) // answered once the room's presence has the connection
	}
	c.reply(cf.ID, err, 0)
}

// leaveFrame ends the connection's own membership of a room (scope
// connection), or its user's.
func (c *conn) leaveFrame(ctx context.Context, cf *protocol.ClientFrame) {
	if c.n.hub.connMember(c, cf.Room) {
		c.n.leaveConnRoom(c, cf.Room)
		c.n.presenceFlush(ctx, c)
		c.reply(cf.ID, nil, 0)
		return
	}
	err := c.n.LeaveRoom(ctx, cf.Room, c.user)
	c.n.presenceFlush(ctx, c) // answered once the room's presence no longer has it
	c.reply(cf.ID, err, 0)
}

// publishFrame handles a client publish: to a room, as its namespace's
// publish mode says (the token's pub claim, any member, or nobody), not
// back to the sender with echo off; to a user, by the pub claim.
func (c *conn) publishFrame(ctx context.Context, cf *protocol.ClientFrame) {
	req := api.PublishRequest{Target: *cf.Target, Event: cf.Event, Data: cf.Data, Class: "chat", From: c.user}
	// The sender is the verified user: a "from" in the frame or its data
	// is never read.
	allowed := auth.AllowPublish(c.claims(), cf.Target.Type, cf.Target.ID)
	if cf.Target.Type == protocol.TargetRoom {
		ns := c.n.ns(cf.Target.ID)
		switch ns.Publish {
		case rooms.PublishNone:
			c.replyRefused(cf.ID, protocol.ErrForbidden, "no client may publish to room "+cf.Target.ID+" (its namespace has publish: none)")
			return
		case rooms.PublishMembers:
			allowed = c.n.hub.member(c.user, cf.Target.ID) || c.n.hub.connMember(c, cf.Target.ID)
			if !allowed {
				c.replyRefused(cf.ID, protocol.ErrForbidden, "only members may publish to room "+cf.Target.ID)
				return
			}
		}
		if !ns.Echo {
			req.Except = c.connID()
		}
	}
	if !allowed {
		c.replyRefused(cf.ID, protocol.ErrForbidden, "the token's pub claim does not allow "+cf.Target.Type+":"+cf.Target.ID)
		return
	}
	_, err := c.n.Publish(ctx, req)
	c.reply(cf.ID, err, 0)
}

// checkRoomToken verifies a room token: signed as client tokens are, for
// this user, naming this room.
func (n *Node) checkRoomToken(tok, user, room string) error {
	if n.gate.Verifier() == nil {
		return fmt.Errorf("the node has no token keys (WSGATE_JWT_SECRET, WSGATE_JWT_PUBLIC_KEY_FILE or WSGATE_JWKS_URL)")
	}
	cl, err := n.gate.Verifier().Verify(tok, time.Time{})
	switch {
	case err != nil:
		return err
	case cl.Subject != user:
		return fmt.Errorf("its sub %q is not the connection's user", cl.Subject)
	case cl.Room != room:
		return fmt.Errorf("its room claim %q is not %q", cl.Room, room)
	}
	return nil
}

// askJoinProxy asks the namespace's join proxy whether the connection may
// join room; code is "" when it may, with the info its answer gave.
func (n *Node) askJoinProxy(ctx context.Context, url string, c *conn, room string, data json.RawMessage) (info json.RawMessage, code, msg string) {
	body, _ := json.Marshal(map[string]any{"user": c.user, "conn_id": c.connID(), "room": room, "info": json.RawMessage(orNull(c.presenceInfo())), "data": json.RawMessage(orNull(data))})
	ctx, cancel := context.WithTimeout(ctx, joinProxyTimeout)
	defer cancel()
	start := time.Now()
	status, answer, err := upstream.PostSigned(ctx, joinProxyClient, url, n.cfg.UpstreamSecret, upstream.NewRequestID(), body)
	n.metrics.BackendLatency.WithLabelValues("join_proxy").Observe(time.Since(start).Seconds())
	switch {
	case err != nil && status == 0:
		return nil, protocol.ErrUnavailable, "join proxy unavailable: " + err.Error()
	case status == http.StatusForbidden:
		return nil, protocol.ErrForbidden, "refused by the join proxy"
	case status != http.StatusOK:
		return nil, protocol.ErrUnavailable, "join proxy unavailable: status " + strconv.Itoa(status)
	case err != nil:
		return nil, protocol.ErrUnavailable, "join proxy unavailable: reading the answer: " + err.Error()
	}
	var a struct {
		Info json.RawMessage `json:"info"`
	}
	if len(answer) > 0 && json.Unmarshal(answer, &a) != nil {
		return nil, protocol.ErrUnavailable, "join proxy unavailable: its answer is not a JSON object"
	}
	if string(a.Info) == "null" {
		a.Info = nil
	}
	return a.Info, "", ""
}

func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// checkFull refuses a join beyond the namespace's max_members: counted in
// users (scope user) or connections (scope connection) present, or, for a
// room without presence, in stored members.
func (n *Node) checkFull(ctx context.Context, ns *rooms.Namespace, c *conn, room string) error {
	if ns.MaxMembers <= 0 {
		return nil
	}
	var count int64
	if n.tracksPresence(room) {
		p, _, _, err := n.pres.RoomPresence(ctx, room, "", 0)
		if err != nil {
			return api.Unavailable("room presence", err)
		}
		count = p.Users
		if ns.Scope == rooms.ScopeConnection {
			count = p.Conns
		}
	} else if ns.Scope == rooms.ScopeUser {
		members, err := n.backend.RoomMembers(ctx, room)
		if err != nil {
			return api.Unavailable("room members", err)
		}
		for _, m := range members {
			if m == c.user {
				return nil // a member already: never refused
			}
		}
		count = int64(len(members))
	}
	if count >= int64(ns.MaxMembers) {
		return &api.Error{Status: http.StatusConflict, Code: codeFull, Message: fmt.Sprintf("room %s is full (max_members %d)", room, ns.MaxMembers)}
	}
	return nil
}

// joinConnRoom subscribes the connection alone to room (scope
// connection): its node's interest first, then the reliable room's
// stream from the room's seq (or since), then presence.
func (n *Node) joinConnRoom(ctx context.Context, c *conn, room string, since *int64) error {
	if n.hub.connRoomCount(c) >= n.cfg.MaxRoomsPerUser && !n.hub.connMember(c, room) {
		return &api.Error{Status: http.StatusForbidden, Code: protocol.ErrForbidden,
			Message: fmt.Sprintf("the connection is in %d rooms, the limit (WSGATE_MAX_ROOMS_PER_USER)", n.cfg.MaxRoomsPerUser)}
	}
	added, joined := n.hub.joinConn(c, room)
	if added {
		if err := n.declareInterestCtx(ctx, []string{room}); err != nil {
			n.leaveConnRoom(c, room)
			return api.Unavailable("room interest", err)
		}
	}
	if joined {
		n.events.membership(c.user, room, true)
	}
	start := time.Now()
	seqs, err := n.backend.RoomSeqs(ctx, []string{room})
	n.observe("room_seqs", start, err)
	if err != nil {
		n.leaveConnRoom(c, room)
		return api.Unavailable("room seq", err)
	}
	switch {
	case since != nil:
		c.replayRoom(room, *since)
	case seqs[0] > 0:
		c.mu.Lock()
		c.sess.Follow(room, seqs[0])
		c.mu.Unlock()
	}
	if n.tracksPresence(room) || (c.tp == tpPusher && n.pres != nil) {
		// A Pusher channel is always in presence: its member lists, and
		// the occupied channels of the Pusher HTTP API.
		n.presenceEnter(c, room)
		n.presenceFlush(ctx, c) // answered once the room's presence has the connection
	}
	return nil
}

// leaveConnRoom ends the connection's own membership of room.
func (n *Node) leaveConnRoom(c *conn, room string) {
	emptied, left := n.hub.leaveConn(c, room)
	if !left {
		return
	}
	if emptied {
		n.dropInterest([]string{room})
	}
	c.mu.Lock()
	c.sess.Forget(room)
	c.mu.Unlock()
	n.presenceLeave(c, room)
	n.events.membership(c.user, room, false)
}

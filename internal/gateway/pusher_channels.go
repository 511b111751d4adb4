package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

// Pusher channels (contract 21). A channel is the wsgate room of the same
// name, subscribed by the connection alone (scope connection: joinConnRoom),
// so a publish to the room reaches Pusher subscribers and wsgate members
// alike. Every Pusher subscription is in the room's presence (the HTTP
// API's occupied channels and counts come from it); on a presence-*
// channel the entry's user is the channel_data's user_id and its info the
// user_info, and the members get member_added and member_removed per user
// (a user with two sockets is one member), built on each member's view of
// the room's presence (presence.go).

// pusherClientRate is the client events one connection may send per
// second (Pusher's limit); beyond it an event gets pusher:error 4301.
const pusherClientRate = 10

const (
	pusherPrivate  = "private-"
	pusherPresence = "presence-"
)

// pusherPresenceChannel reports whether room is a Pusher presence channel.
func (n *Node) pusherPresenceChannel(room string) bool {
	return n.cfg.TransportOn("pusher") && strings.HasPrefix(room, pusherPresence)
}

// joinLeave reports whether the members of room are told of each change
// of its presence: its namespace's join_leave, and Pusher presence
// channels.
func (n *Node) joinLeave(room string) bool {
	return n.ns(room).JoinLeave || n.pusherPresenceChannel(room)
}

// pusherHandle runs one client frame of a Pusher connection (its inbound
// goroutine, in order).
func (c *conn) pusherHandle(ctx context.Context, cf *protocol.ClientFrame) {
	switch {
	case cf.Type == protocol.PusherSubscribe:
		c.pusherSubscribe(ctx, cf)
	case cf.Type == protocol.PusherUnsubscribe:
		c.pusherUnsubscribe(cf)
	case cf.Type == protocol.PusherPong:
	case cf.Type == protocol.PusherPing: // behind other frames (pusherMessage)
		c.sendPusher(pusherPong)
	case strings.HasPrefix(cf.Type, "client-"):
		c.pusherClientEvent(ctx, cf)
	default:
		c.sendPusher(protocol.EncodePusherError(0, "unknown event "+cf.Type, cf.Room))
	}
}

func (c *conn) pusherSubscribe(ctx context.Context, cf *protocol.ClientFrame) {
	n := c.n
	s, err := protocol.ParsePusherSubscribe(cf.Data)
	if err != nil {
		c.sendPusher(protocol.EncodePusherError(protocol.PusherErrClientEvent, err.Error(), s.Channel))
		return
	}
	ch := s.Channel
	var as *presAs
	switch {
	case strings.HasPrefix(ch, pusherPrivate):
		if !protocol.CheckPusherAuth(s.Auth, n.cfg.PusherKey, n.cfg.PusherSecret, c.user, ch, "") {
			c.sendPusher(protocol.EncodePusherError(protocol.PusherErrUnauthorized, "Invalid signature: the auth of "+ch+" is not key:HMAC-SHA256(secret, socket_id:channel)", ch))
			return
		}
	case strings.HasPrefix(ch, pusherPresence):
		if !protocol.CheckPusherAuth(s.Auth, n.cfg.PusherKey, n.cfg.PusherSecret, c.user, ch, s.ChannelData) {
			c.sendPusher(protocol.EncodePusherError(protocol.PusherErrUnauthorized, "Invalid signature: the auth of "+ch+" is not key:HMAC-SHA256(secret, socket_id:channel:channel_data)", ch))
			return
		}
		m, err := protocol.ParsePusherMember(s.ChannelData)
		if err != nil {
			c.sendPusher(protocol.EncodePusherError(protocol.PusherErrClientEvent, err.Error(), ch))
			return
		}
		as = &presAs{user: m.UserID, info: m.UserInfo}
	}
	if n.hub.connMember(c, ch) {
		c.pusherSubscribedAgain(ch, as != nil)
		return
	}
	if as != nil {
		c.mu.Lock()
		x := c.extra()
		if x.presAs == nil {
			x.presAs = map[string]presAs{}
		}
		x.presAs[ch] = *as
		c.mu.Unlock()
	}
	if err := n.checkFull(ctx, n.ns(ch), c, ch); err != nil {
		c.pusherSubscribeFailed(ch, err)
		return
	}
	if err := n.joinConnRoom(ctx, c, ch, nil); err != nil {
		c.pusherSubscribeFailed(ch, err)
		return
	}
	if as == nil || n.pres == nil {
		// A presence channel's answer carries its members: it goes out
		// once the connection's entry is in (pusherSnapshotLocked).
		c.sendPusher(protocol.EncodePusher(protocol.PusherSubscriptionSucceeded, ch, "{}", ""))
	}
}

// pusherSubscribeFailed answers a subscription that could not be made.
func (c *conn) pusherSubscribeFailed(ch string, err error) {
	c.mu.Lock()
	if c.x != nil {
		delete(c.x.presAs, ch)
	}
	c.mu.Unlock()
	code := protocol.PusherErrClientEvent
	if ae, ok := err.(*api.Error); ok && ae.Status >= 500 {
		code = protocol.PusherErrReconnect
	}
	c.sendPusher(protocol.EncodePusherError(code, "subscription to "+ch+" failed: "+err.Error(), ch))
}

// pusherSubscribedAgain answers a subscribe to a channel the connection
// is subscribed to already: succeeded again (a presence channel's with
// its members as they are now).
func (c *conn) pusherSubscribedAgain(ch string, presence bool) {
	data := "{}"
	if presence && c.n.pres != nil {
		snap, err := c.n.presenceSnapshot(ch)
		if err != nil {
			c.sendPusher(protocol.EncodePusherError(protocol.PusherErrReconnect, "room presence unavailable", ch))
			return
		}
		data = pusherPresenceData(snap)
	}
	c.sendPusher(protocol.EncodePusher(protocol.PusherSubscriptionSucceeded, ch, data, ""))
}

func (c *conn) pusherUnsubscribe(cf *protocol.ClientFrame) {
	s, err := protocol.ParsePusherSubscribe(cf.Data)
	if err != nil {
		c.sendPusher(protocol.EncodePusherError(protocol.PusherErrClientEvent, err.Error(), ""))
		return
	}
	c.n.leaveConnRoom(c, s.Channel)
}

// pusherClientEvent publishes a client-* event to the channel's other
// subscribers: on private and presence channels the connection is
// subscribed to, at most pusherClientRate a second.
func (c *conn) pusherClientEvent(ctx context.Context, cf *protocol.ClientFrame) {
	n, ch := c.n, cf.Room
	switch {
	case !strings.HasPrefix(ch, pusherPrivate) && !strings.HasPrefix(ch, pusherPresence):
		c.sendPusher(protocol.EncodePusherError(protocol.PusherErrClientEvent, "Client event rejected: only private and presence channels take client events", ch))
		return
	case !n.hub.connMember(c, ch):
		c.sendPusher(protocol.EncodePusherError(protocol.PusherErrClientEvent, "Client event rejected: not subscribed to "+ch, ch))
		return
	}
	v, _ := n.pusherRates.LoadOrStore(c, new(auth.Bucket))
	if !v.(*auth.Bucket).Take(pusherClientRate, time.Now().UnixNano()) {
		c.sendPusher(protocol.EncodePusherError(protocol.PusherErrClientRate, "Client event rejected due to rate limit (10 per second)", ch))
		return
	}
	data := cf.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	req := api.PublishRequest{Target: protocol.Target{Type: protocol.TargetRoom, ID: ch}, Event: cf.Type, Data: data, Class: "chat", Except: c.connID()}
	if strings.HasPrefix(ch, pusherPresence) {
		c.mu.Lock()
		if c.x != nil && c.x.pres[ch] != nil {
			req.From = c.x.pres[ch].user
		}
		c.mu.Unlock()
	}
	if _, err := n.Publish(ctx, req); err != nil {
		c.sendPusher(protocol.EncodePusherError(protocol.PusherErrClientEvent, "Client event rejected: "+err.Error(), ch))
		return
	}
	n.pusherHooks.clientEvent(ch, cf.Type, data, c.user, req.From)
}

// pusherPresenceData is a presence channel's subscription_succeeded data:
// {"presence":{"ids","hash","count"}}, one member per user.
func pusherPresenceData(snap []cluster.PresenceEntry) string {
	ids := []string{}
	hash := map[string]json.RawMessage{}
	for _, e := range snap {
		if _, ok := hash[e.User]; ok {
			continue
		}
		ids = append(ids, e.User)
		info := e.Info
		if len(info) == 0 {
			info = json.RawMessage("null")
		}
		hash[e.User] = info
	}
	slices.Sort(ids)
	b, _ := json.Marshal(map[string]any{"presence": map[string]any{"ids": ids, "hash": hash, "count": len(ids)}})
	return string(b)
}

// pusherSnapshotLocked is applySnapshotLocked for a Pusher connection on a
// presence channel: the first snapshot (taken after its own entry went
// in) is its subscription_succeeded; a later one (after the bus lost
// messages) tells the members that came and went meanwhile.
func (c *conn) pusherSnapshotLocked(room string, cp *connPres, snap []cluster.PresenceEntry) {
	self := c.connID()
	if !cp.told {
		cp.told = true
		for _, e := range snap {
			if e.ConnID != self {
				cp.view[e.ConnID] = e.User
			}
		}
		c.sendPusherLocked(protocol.EncodePusher(protocol.PusherSubscriptionSucceeded, room, pusherPresenceData(snap), ""))
		return
	}
	now := map[string]cluster.PresenceEntry{}
	for _, e := range snap {
		if e.ConnID != self {
			now[e.ConnID] = e
		}
	}
	for id, user := range cp.view {
		if _, ok := now[id]; !ok {
			c.pusherPresenceLocked(cp, presEvent{room: room, user: user, conn: id})
		}
	}
	slices.SortFunc(snap, func(a, b cluster.PresenceEntry) int { return int(a.Seq - b.Seq) })
	for _, e := range snap {
		if _, ok := cp.view[e.ConnID]; !ok && e.ConnID != self {
			c.pusherPresenceLocked(cp, presEvent{room: room, user: e.User, conn: e.ConnID, join: true, info: e.Info})
		}
	}
}

// pusherPresenceLocked applies one change of a presence channel to the
// member's view: member_added when the change brings a user none of
// whose connections was there (the member's own user counts as there),
// member_removed when it takes the user's last one away.
func (c *conn) pusherPresenceLocked(cp *connPres, ev presEvent) {
	_, seen := cp.view[ev.conn]
	switch {
	case ev.join && !seen:
		present := c.pusherUserPresentLocked(cp, ev.user)
		cp.view[ev.conn] = ev.user
		if !present {
			d, _ := json.Marshal(protocol.PusherMember{UserID: ev.user, UserInfo: ev.info})
			c.sendPusherLocked(protocol.EncodePusher(protocol.PusherMemberAdded, ev.room, string(d), ""))
		}
	case !ev.join && seen:
		delete(cp.view, ev.conn)
		if !c.pusherUserPresentLocked(cp, ev.user) {
			d, _ := json.Marshal(map[string]string{"user_id": ev.user})
			c.sendPusherLocked(protocol.EncodePusher(protocol.PusherMemberRemoved, ev.room, string(d), ""))
		}
	}
}

// pusherUserPresentLocked reports whether user is a member in the view of
// cp: the connection's own user, or one of the others' (presence
// channels are small: Pusher allows 100 members).
func (c *conn) pusherUserPresentLocked(cp *connPres, user string) bool {
	if cp.user == user {
		return true
	}
	for _, u := range cp.view {
		if u == user {
			return true
		}
	}
	return false
}

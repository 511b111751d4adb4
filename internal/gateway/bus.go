package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// Bus envelopes: one JSON header line, then (for messages) the message
// object exactly as clients receive it, so the receiving node neither
// re-encodes nor parses the payload for JSON connections.
const (
	kindMessage    = "m"
	kindKick       = "kick"  // close the user's connections (disconnect API, single device policy)
	kindMembership = "room"  // the user joined or left a room
	kindDrain      = "drain" // this node must drain
)

type envelope struct {
	Kind   string `json:"k"`
	TType  string `json:"t,omitempty"`
	TID    string `json:"i,omitempty"`
	Class  uint8  `json:"c,omitempty"`
	Seq    int64  `json:"s,omitempty"`
	PubAt  int64  `json:"p,omitempty"`
	Origin string `json:"o,omitempty"`

	User   string `json:"u,omitempty"`
	Room   string `json:"r,omitempty"`
	Join   bool   `json:"j,omitempty"`
	Except string `json:"x,omitempty"`    // kick: spare this connection
	Conn   string `json:"conn,omitempty"` // kick: only this connection
	Code   int    `json:"code,omitempty"`
	Reason string `json:"why,omitempty"`
}

func encodeEnvelope(e envelope, body []byte) []byte {
	h, _ := json.Marshal(e)
	out := make([]byte, 0, len(h)+1+len(body))
	out = append(out, h...)
	out = append(out, '\n')
	return append(out, body...)
}

// onBus handles one envelope from the cluster bus, in arrival order. It
// must not block: backend calls it needs are made in goroutines.
func (n *Node) onBus(payload []byte) {
	i := bytes.IndexByte(payload, '\n')
	if i < 0 {
		n.log.Warn("malformed bus envelope ignored", "bytes", len(payload))
		return
	}
	var e envelope
	if err := json.Unmarshal(payload[:i], &e); err != nil {
		n.log.Warn("malformed bus envelope ignored", "err", err)
		return
	}
	body := payload[i+1:]
	n.metrics.BusReceived.WithLabelValues(busKindName(e.Kind)).Inc()
	switch e.Kind {
	case kindMessage:
		if e.TType == protocol.TargetBroadcast && e.Origin == n.cfg.NodeID {
			return // delivered locally at publish time
		}
		n.deliverLocal(protocol.Target{Type: e.TType, ID: e.TID}, newDelivery(body, class(e.Class), e.Seq, e.PubAt))
	case kindKick:
		for _, c := range n.hub.userConns(e.User) {
			if id := c.connID(); id != e.Except && (e.Conn == "" || id == e.Conn) {
				c.close(e.Code, e.Reason)
			}
		}
	case kindMembership:
		n.applyMembership(e.User, e.Room, e.Join)
	case kindDrain:
		go n.Drain("api")
	default:
		n.log.Warn("unknown bus envelope ignored", "kind", e.Kind)
	}
}

// applyMembership updates the local index after a join or leave and
// declares or drops this node's interest in the room. The node that
// handled the join declared interest for this node already; if the user
// has no connection here any more (it closed meanwhile) and no other local
// member has the room, that declaration is withdrawn.
func (n *Node) applyMembership(user, room string, join bool) {
	if join {
		added, present := n.hub.join(user, room)
		switch {
		case added:
			n.goFunc(func() { n.declareInterest([]string{room}) })
		case !present:
			n.goFunc(func() { n.dropInterest([]string{room}) })
		}
		return
	}
	if n.hub.leave(user, room) {
		n.goFunc(func() { n.dropInterest([]string{room}) })
	}
}

// declareInterest and dropInterest write this node's room interest. They
// run one at a time and re-check the local index under the lock, so that
// a declaration and a withdrawal racing each other (a join and a close)
// always leave the backend as the index is now.
func (n *Node) declareInterest(rooms []string) {
	ctx, cancel := context.WithTimeout(n.ctx, 4*time.Second)
	defer cancel()
	_ = n.declareInterestCtx(ctx, rooms)
}

func (n *Node) declareInterestCtx(ctx context.Context, rooms []string) error {
	n.interestMu.Lock()
	defer n.interestMu.Unlock()
	rooms = n.hub.filterRooms(rooms, true)
	if len(rooms) == 0 {
		return nil
	}
	start := time.Now()
	err := n.backend.SetRoomInterest(ctx, n.cfg.NodeID, rooms, n.cfg.RouteTTL)
	n.observe("rooms", start, err)
	return err
}

func (n *Node) dropInterest(rooms []string) {
	n.interestMu.Lock()
	defer n.interestMu.Unlock()
	rooms = n.hub.filterRooms(rooms, false)
	if len(rooms) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(n.ctx), 4*time.Second)
	defer cancel()
	start := time.Now()
	err := n.backend.DropRoomInterest(ctx, n.cfg.NodeID, rooms)
	n.observe("rooms", start, err)
}

func busKindName(k string) string {
	switch k {
	case kindMessage:
		return "message"
	case kindKick, kindMembership, kindDrain:
		return k
	}
	return "unknown"
}

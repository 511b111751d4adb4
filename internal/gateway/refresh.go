package gateway

import (
	"context"
	"strconv"
	"sync"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/protocol"
)

// Token lifetime on a connection (contract section 15). The sweep (the
// node's one timer, sweep.go) sends the expiring frame ExpiringNotice
// seconds before exp and closes with 4401 at exp; a refresh frame replaces
// exp and the grants. No connection owns a timer: the state is the exp
// and warned fields the connection already has room for.

// refresh handles a refresh frame: a valid token for the connection's user
// replaces its exp, rooms, pub, send and info, answered ok; an invalid one,
// or one for another user, is answered unauthorized and changes nothing.
// It runs on the connection's inbound goroutine, which handles frames in
// order, so the frames after the refresh are judged by the new grants.
func (c *conn) refresh(ctx context.Context, cf *protocol.ClientFrame) {
	claims, err := c.n.gate.Verify(ctx, cf.Token, true)
	switch {
	case err != nil:
		c.n.metrics.TokenRefresh.WithLabelValues(metrics.RefreshInvalid).Inc()
		c.replyRefused(cf.ID, protocol.ErrUnauthorized, err.Error())
		return
	case claims.Subject != c.user:
		c.n.metrics.TokenRefresh.WithLabelValues(metrics.RefreshOtherUser).Inc()
		c.replyRefused(cf.ID, protocol.ErrUnauthorized, "the token is for another user")
		return
	}
	c.mu.Lock()
	x := c.extra()
	x.claims, x.refreshed = grants(claims), true
	c.exp = c.n.connExp(claims)
	c.warned = false
	c.mu.Unlock()
	c.n.metrics.TokenRefresh.WithLabelValues(metrics.RefreshOK).Inc()
	c.reply(cf.ID, nil, 0)
}

// connExp is when a connection with these claims ends (Unix s, 0: never,
// insecure mode): the token's exp plus WSGATE_JWT_LEEWAY, rounded up, as
// the handshake accepts a token until then.
func (n *Node) connExp(c *auth.Claims) int64 {
	if c.ExpiresAt.IsZero() {
		return 0
	}
	t := c.ExpiresAt.Add(n.cfg.JWTLeeway)
	if t.Nanosecond() > 0 {
		return t.Unix() + 1
	}
	return t.Unix()
}

// grants is what a connection keeps of its token's claims: nothing when
// the token grants nothing beyond the user id, which is most connections.
func grants(c *auth.Claims) *auth.Claims {
	if len(c.Rooms) == 0 && len(c.Pub) == 0 && c.Send == nil && c.Info == nil {
		return nil
	}
	return c
}

// warnExpiringLocked queues the expiring frame once per token, when exp
// is ExpiringNotice seconds away or nearer (the sweep calls it).
func (c *conn) warnExpiringLocked(now int64) {
	if c.exp == 0 || c.warned || now < c.exp-protocol.ExpiringNotice {
		return
	}
	c.warned = true
	if len(c.outq) >= c.n.cfg.SendQueue {
		return // a stuck client: the close at exp follows anyway
	}
	b, _ := protocol.Encode(c.format, protocol.Expiring{Type: protocol.TypeExpiring, Exp: c.exp})
	c.outq = append(c.outq, c.dataFrame(b))
	c.kickLocked()
}

// metaCache shares one connMeta among the connections whose tokens grant
// the same (rooms, pub and send claims; no info claim, the default
// device): where every token carries the same grants, as when a service
// lets every user join its rooms, an idle connection keeps none of its
// own. At most metaCacheMax grant sets are shared; others are not.
type metaCache struct {
	mu sync.Mutex
	m  map[string]*connMeta
}

const metaCacheMax = 4096

// get is the connMeta of a connection with grants g (nil: none) and
// device; nil when it needs none. A shared one is read-only, as every
// connMeta is.
func (mc *metaCache) get(g *auth.Claims, device string) *connMeta {
	switch {
	case g == nil && device == "":
		return nil
	case g == nil || g.Info != nil || device != "":
		return &connMeta{claims: g, device: device}
	}
	key := grantsKey(g)
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if m := mc.m[key]; m != nil {
		return m
	}
	m := &connMeta{claims: &auth.Claims{Rooms: g.Rooms, Pub: g.Pub, Send: g.Send}}
	if len(mc.m) < metaCacheMax {
		if mc.m == nil {
			mc.m = map[string]*connMeta{}
		}
		mc.m[key] = m
	}
	return m
}

// grantsKey encodes the grants of g, each pattern with its length (any
// byte may be in a claim), a nil send claim apart from an empty one.
func grantsKey(g *auth.Claims) string {
	var b []byte
	for _, list := range [][]string{g.Rooms, g.Pub, g.Send} {
		b = strconv.AppendInt(b, int64(len(list)), 10)
		for _, p := range list {
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(len(p)), 10)
			b = append(b, ':')
			b = append(b, p...)
		}
		b = append(b, ';')
	}
	if g.Send == nil {
		b = append(b, '-')
	}
	return string(b)
}

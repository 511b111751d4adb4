package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// In-band token refresh (contract section 15). With a Config.Token
// function, a connection refreshes its token by itself: when the server
// announces the expiry (the expiring frame, 30 s before exp) and, should
// that not come, refreshLead before the exp of the token it sent. Token is
// called for a new token, which goes in a refresh frame; the server
// answers ok and the connection lives on with the new exp. A refused
// refresh is logged; the server then closes with 4401 at exp and the
// reconnect calls Token again.

// refreshLead is how long before the token's exp a connection refreshes
// when no expiring frame came.
const refreshLead = 10 * time.Second

// minRefreshGap is the least time between two refreshes of a connection,
// so that a Token function that hands out nearly expired tokens cannot
// make it loop.
const minRefreshGap = time.Second

// tokenExp reads the exp claim of a JWT without verifying it (the client
// only schedules by it); zero when there is none.
func tokenExp(tok string) time.Time {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}
	}
	var c struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(b, &c) != nil {
		return time.Time{}
	}
	f, err := c.Exp.Float64()
	if err != nil || f <= 0 || f > 253402300799 {
		return time.Time{}
	}
	return time.Unix(int64(f), 0)
}

// refreshAt is when the connection refreshes unless an expiring frame
// comes first; zero for none.
func (s *session) refreshAt() time.Time {
	exp := s.c.tokenExp.Load()
	if s.c.cfg.Token == nil || exp == 0 {
		return time.Time{}
	}
	return time.Unix(exp, 0).Add(-refreshLead)
}

// startRefresh runs one refresh of the connection on a goroutine of its
// own (the reader must go on reading the reply), unless one is under way.
// Helper goroutine only.
func (s *session) startRefresh(ctx context.Context) {
	if s.c.cfg.Token == nil || s.refreshing {
		return
	}
	if since := s.c.now().Sub(s.lastRefresh); since < minRefreshGap {
		return
	}
	s.refreshing, s.lastRefresh = true, s.c.now()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ok := s.refresh(ctx)
		select {
		case s.refreshed <- ok:
		case <-s.done:
		}
	}()
}

// refresh gets a token and sends it in a refresh frame; it reports whether
// the server took it.
func (s *session) refresh(ctx context.Context) bool {
	c := s.c
	tok, err := c.cfg.Token(ctx)
	if err != nil {
		c.log.Warn("wsgate client: Token failed; the connection ends at exp", "err", err)
		return false
	}
	id := strconv.FormatUint(c.ids.Add(1), 10)
	ch, ok := s.register(id)
	if !ok {
		return false
	}
	if err := s.conn.WriteFrame(&protocol.ClientFrame{Type: protocol.TypeRefresh, ID: id, Token: tok}); err != nil {
		s.forget(id)
		return false
	}
	select {
	case a := <-ch:
		err = a.err
	case <-s.done:
		return false
	case <-ctx.Done():
		s.forget(id)
		return false
	}
	if err != nil {
		c.log.Warn("wsgate client: token refresh refused; the connection ends at exp", "err", err)
		return false
	}
	if exp := tokenExp(tok); !exp.IsZero() {
		c.tokenExp.Store(exp.Unix())
	}
	c.st.refreshes.Add(1)
	c.log.Debug("wsgate client: token refreshed", "exp", c.tokenExp.Load())
	return true
}

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// Publish sends a message to a user or a room (as the token's "pub" claim
// allows) and waits for the server's reply. data is marshalled to JSON
// (a json.RawMessage is sent as is).
//
// Publish, Join and Leave wait for a connection when there is none (until
// ctx ends). They return a *ReplyError when the server refuses (a reply
// with ok=false, or an error frame while this was the only request
// waiting), ErrConnectionLost when the connection ended before the reply
// (the request may have taken effect: it is not repeated), ErrClosed after
// Close. They must not be called from a handler and waited for there.
func (c *Client) Publish(ctx context.Context, target protocol.Target, event string, data any) error {
	if target.Type != protocol.TargetUser && target.Type != protocol.TargetRoom {
		return fmt.Errorf("client: Publish: target type must be user or room, got %q", target.Type)
	}
	if err := protocol.ValidName("target id", target.ID); err != nil {
		return fmt.Errorf("client: Publish: %w", err)
	}
	raw, err := marshalData(data)
	if err != nil {
		return fmt.Errorf("client: Publish: %w", err)
	}
	return c.request(ctx, &protocol.ClientFrame{Type: protocol.TypePublish, Target: &target, Event: event, Data: raw})
}

// Join makes the user join room (as the token's "rooms" claim allows):
// all the user's connections get its messages, now and after reconnects.
func (c *Client) Join(ctx context.Context, room string) error {
	if err := protocol.ValidName("room", room); err != nil {
		return fmt.Errorf("client: Join: %w", err)
	}
	return c.request(ctx, &protocol.ClientFrame{Type: protocol.TypeJoin, Room: room})
}

// JoinSince joins room as Join does and, the room being reliable, has the
// server first send this connection the room's kept messages above since
// (before the join's answer), so that the client reads what it missed
// (the room's history; a gap comes for what is gone). The client follows
// the room from there and resumes it on every reconnect.
func (c *Client) JoinSince(ctx context.Context, room string, since int64) error {
	if err := protocol.ValidName("room", room); err != nil {
		return fmt.Errorf("client: JoinSince: %w", err)
	}
	if since < 0 {
		return fmt.Errorf("client: JoinSince: since %d is negative", since)
	}
	c.seqMu.Lock()
	if pos, ok := c.roomSeq[room]; !ok || since < pos {
		c.roomSeq[room] = since
	}
	c.seqMu.Unlock()
	return c.request(ctx, &protocol.ClientFrame{Type: protocol.TypeJoin, Room: room, Since: &since})
}

// HistoryPage is one page of a reliable room's kept messages: Seq is the
// room's highest seq (0: the room never had a reliable message).
type HistoryPage struct {
	Seq      int64
	Messages []protocol.Message
}

// HistoryQuery says which page History reads: without Reverse the
// messages with seq > Since, oldest first; with Reverse those with seq <
// Before (0: from the newest), newest first. At most Limit (1 to 1000; 0:
// the server's default, 100).
type HistoryQuery struct {
	Since, Before int64
	Limit         int
	Reverse       bool
}

// History reads a page of room's kept history with the history frame
// (contract 19), without joining it: the user must be a member of the
// room, or the token's "rooms" claim must allow it to join (else a
// *ReplyError "forbidden"). For older pages call again with Before = the
// oldest seq received.
func (c *Client) History(ctx context.Context, room string, q HistoryQuery) (HistoryPage, error) {
	if err := protocol.ValidName("room", room); err != nil {
		return HistoryPage{}, fmt.Errorf("client: History: %w", err)
	}
	if q.Since < 0 || q.Before < 0 || q.Limit < 0 || q.Limit > protocol.MaxHistoryLimit {
		return HistoryPage{}, fmt.Errorf("client: History: since and before must be >= 0 and limit 0..%d", protocol.MaxHistoryLimit)
	}
	if q.Since > 0 && q.Reverse || q.Before > 0 && !q.Reverse {
		return HistoryPage{}, errors.New("client: History: before reads backwards (Reverse), since forwards")
	}
	f := &protocol.ClientFrame{Type: protocol.TypeHistory, Room: room, Reverse: q.Reverse}
	switch {
	case q.Before > 0:
		f.Before = &q.Before
	case q.Since > 0:
		f.Since = &q.Since
	}
	if q.Limit > 0 {
		limit := int64(q.Limit)
		f.Limit = &limit
	}
	res, err := c.requestResult(ctx, f)
	if err != nil {
		return HistoryPage{}, err
	}
	var page struct {
		Seq      int64              `json:"seq"`
		Messages []protocol.Message `json:"messages"`
	}
	if err := json.Unmarshal(res, &page); err != nil {
		return HistoryPage{}, fmt.Errorf("client: History: unreadable result: %w", err)
	}
	return HistoryPage{Seq: page.Seq, Messages: page.Messages}, nil
}

// Leave makes the user leave room.
func (c *Client) Leave(ctx context.Context, room string) error {
	if err := protocol.ValidName("room", room); err != nil {
		return fmt.Errorf("client: Leave: %w", err)
	}
	return c.request(ctx, &protocol.ClientFrame{Type: protocol.TypeLeave, Room: room})
}

// Ping sends a ping frame and returns the time until its pong, measured
// on this side. It waits for a connection like Publish.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	for {
		s, err := c.waitSession(ctx)
		if err != nil {
			return 0, err
		}
		ts, ch, ok := s.registerPing()
		if !ok {
			continue // that connection is ending; wait for the next
		}
		start := time.Now()
		if err := s.conn.WriteFrame(&protocol.ClientFrame{Type: protocol.TypePing, TS: &ts}); err != nil {
			s.forgetPing(ts)
			return 0, fmt.Errorf("%w: %w", ErrConnectionLost, err)
		}
		select {
		case err := <-ch:
			if err != nil {
				return 0, err
			}
			return time.Since(start), nil
		case <-ctx.Done():
			s.forgetPing(ts)
			return 0, ctx.Err()
		}
	}
}

// JoinOptions are the optional parts of a join (JoinWith).
type JoinOptions struct {
	// Token is a room token: a JWT signed as client tokens are, with sub =
	// the user and room = the room; it allows the join whatever the
	// token's rooms claim says.
	Token string
	// Data goes to the room's join proxy, if its namespace has one.
	Data any
}

// JoinWith joins room as Join does, with a room token or data for the
// room's join proxy.
func (c *Client) JoinWith(ctx context.Context, room string, o JoinOptions) error {
	if err := protocol.ValidName("room", room); err != nil {
		return fmt.Errorf("client: JoinWith: %w", err)
	}
	f := &protocol.ClientFrame{Type: protocol.TypeJoin, Room: room, Token: o.Token}
	if o.Data != nil {
		raw, err := marshalData(o.Data)
		if err != nil {
			return fmt.Errorf("client: JoinWith: %w", err)
		}
		f.Data = raw
	}
	return c.request(ctx, f)
}

// RoomPresence is a room's presence: its counts and the connections in it
// (the first page).
type RoomPresence struct {
	Users       int64 `json:"users"`
	Connections int64 `json:"connections"`
	Clients     []struct {
		User   string          `json:"user"`
		ConnID string          `json:"conn_id"`
		Node   string          `json:"node"`
		Device string          `json:"device"`
		Info   json.RawMessage `json:"info,omitempty"`
	} `json:"clients"`
	Cursor string `json:"cursor,omitempty"`
}

// Presence reads the presence of a room the connection is in (its
// namespace must have presence).
func (c *Client) Presence(ctx context.Context, room string) (RoomPresence, error) {
	var p RoomPresence
	if err := protocol.ValidName("room", room); err != nil {
		return p, fmt.Errorf("client: Presence: %w", err)
	}
	res, err := c.requestResult(ctx, &protocol.ClientFrame{Type: protocol.TypePresence, Room: room})
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(res, &p); err != nil {
		return p, fmt.Errorf("client: Presence: the reply's result: %w", err)
	}
	return p, nil
}

// request sends f with a fresh id on the live connection and waits for
// its answer.
func (c *Client) request(ctx context.Context, f *protocol.ClientFrame) error {
	_, err := c.requestResult(ctx, f)
	return err
}

// requestResult is request returning the reply's result.
func (c *Client) requestResult(ctx context.Context, f *protocol.ClientFrame) (json.RawMessage, error) {
	for {
		s, err := c.waitSession(ctx)
		if err != nil {
			return nil, err
		}
		f.ID = strconv.FormatUint(c.ids.Add(1), 10)
		ch, ok := s.register(f.ID)
		if !ok {
			continue // that connection is ending; nothing was sent yet
		}
		if err := s.conn.WriteFrame(f); err != nil {
			s.forget(f.ID)
			return nil, fmt.Errorf("%w: %w", ErrConnectionLost, err)
		}
		select {
		case a := <-ch:
			return a.result, a.err
		case <-ctx.Done():
			s.forget(f.ID)
			return nil, ctx.Err()
		}
	}
}

// marshalData turns a Publish payload into JSON.
func marshalData(v any) (json.RawMessage, error) {
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return nil, errors.New("data is not valid JSON")
		}
		return raw, nil
	}
	return json.Marshal(v)
}

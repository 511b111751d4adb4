package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

// --join ROOM: after its welcome every connection sends
// {"type":"join","id":"j","room":ROOM} and waits for the reply, as the
// shared load client does. The token the bench mints carries a rooms
// claim for exactly that room (a join is allowed by the token, never by
// the API key). The connect time of such a connection runs from the
// dial to the join's reply; the join alone is reported as join_time.

// joinID is the id of the join frame; its reply carries it back.
const joinID = "j"

// joinTimeout bounds the wait for the join's reply.
const joinTimeout = client.DefaultHandshakeTimeout

// joinScenarios are the scenarios whose connections may join a room.
var joinScenarios = map[string]bool{ScenarioConnect: true, ScenarioBroadcast: true, ScenarioSoak: true}

func (c Config) validateJoin() error {
	if c.Join == "" {
		return nil
	}
	if !joinScenarios[c.Scenario] {
		return fmt.Errorf("--join is for connect, broadcast and soak, not %s", c.Scenario)
	}
	if err := protocol.ValidName("room", c.Join); err != nil {
		return fmt.Errorf("--join: %v", err)
	}
	if c.JWTSecret == "" {
		return errors.New("--join needs --jwt-secret: a join frame is allowed by the token's rooms claim, which the bench mints")
	}
	return nil
}

// JoinError is a join answered with an error reply.
type JoinError struct{ Code, Message string }

func (e *JoinError) Error() string { return "join refused: " + e.Code + ": " + e.Message }

// earlyFrame is a server frame that came before the join's reply (a
// message published meanwhile), handled once the connection is set up.
type earlyFrame struct {
	format protocol.Format
	p      []byte
}

// join sends the join frame on a freshly dialled connection and reads
// until its reply; the frames before it are copied and returned in order.
// A refusal is a *JoinError; no reply within joinTimeout (or ctx ending)
// closes cc and fails with os.ErrDeadlineExceeded (or ctx's error).
func (s *slot) join(ctx context.Context, cc rawConn) ([]earlyFrame, error) {
	r := s.r
	start := time.Now()
	if err := cc.WriteFrame(&protocol.ClientFrame{Type: protocol.TypeJoin, ID: joinID, Room: r.cfg.Join}); err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	var timedOut atomic.Bool
	t := time.AfterFunc(joinTimeout, func() { timedOut.Store(true); cc.Close() })
	defer t.Stop()
	stop := context.AfterFunc(ctx, func() { cc.Close() })
	defer stop()
	var early []earlyFrame
	for {
		format, p, err := cc.ReadRaw()
		if err != nil {
			switch {
			case timedOut.Load():
				return nil, fmt.Errorf("join: no reply within %s: %w", joinTimeout, os.ErrDeadlineExceeded)
			case ctx.Err() != nil:
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("join: %w", err)
		}
		if pk, err := protocol.PeekServer(format, p); err == nil && (pk.Type != protocol.TypeReply || string(pk.ID) != joinID) {
			early = append(early, earlyFrame{format, append([]byte(nil), p...)})
			continue
		}
		f, err := protocol.DecodeServer(format, p)
		if err != nil || f.Type != protocol.TypeReply || f.ID != joinID {
			early = append(early, earlyFrame{format, append([]byte(nil), p...)})
			continue
		}
		if !f.OK {
			je := &JoinError{Code: "no_code"}
			if f.Error != nil {
				je.Code, je.Message = f.Error.Code, f.Error.Message
			}
			return nil, je
		}
		r.joinLat.Record(time.Since(start))
		return early, nil
	}
}

// retryable reports whether a client would try again after err: not
// after a 4xx refusal of the handshake, nor after a join refused for any
// other reason than the node being unable to serve it.
func retryable(err error) bool {
	var he *client.HandshakeError
	var je *JoinError
	switch {
	case errors.As(err, &he):
		return he.Retryable()
	case errors.As(err, &je):
		return je.Code == protocol.ErrUnavailable
	}
	return true
}

// handleEarly handles the frames that came before the join's reply, on
// the slot's goroutine before the connection's reader starts.
func (s *slot) handleEarly(c *wsConn, early []earlyFrame) {
	for _, f := range early {
		s.handle(c, f.format, f.p)
	}
}

package gateway

import (
	"context"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/protocol"
)

// runInbound handles the connection's queued frames one at a time, in
// order (an ack takes effect before the answer to the next frame). It
// runs only while there is work: no goroutine waits on an idle socket.
func (c *conn) runInbound() {
	for {
		c.mu.Lock()
		if c.x == nil || len(c.x.inq) == 0 {
			c.running = false
			c.dropIdleExtraLocked()
			c.mu.Unlock()
			return
		}
		cf := c.x.inq[0]
		c.x.inq[0] = nil
		c.x.inq = c.x.inq[1:]
		closing := c.state >= stClosing
		c.mu.Unlock()
		if closing {
			// The connection is ending (often the client's own close
			// right after its last ack): acks still take effect, the
			// rest has no one to answer to.
			if cf.Type == protocol.TypeAck {
				c.ack(cf.Seq)
			}
			continue
		}
		c.handle(cf)
	}
}

func (c *conn) ack(seq int64) error {
	ctx, cancel := c.n.bctx(c.n.ctx)
	defer cancel()
	start := time.Now()
	err := c.n.backend.Ack(ctx, c.user, c.device(), seq, c.n.inboxOpts())
	c.n.observe("inbox", start, err)
	if err != nil {
		c.logger().Warn("ack failed", "seq", seq, "err", err)
		return err
	}
	c.n.events.acked(ctx, c, seq)
	return nil
}

func (c *conn) handle(cf *protocol.ClientFrame) {
	ctx, cancel := c.n.bctx(c.n.ctx)
	defer cancel()
	if c.tp == tpPusher {
		c.pusherHandle(ctx, cf)
		return
	}
	switch cf.Type {
	case protocol.TypePing:
		c.send(c.pongFrame(cf))
	case protocol.TypeAck:
		err := c.ack(cf.Seq)
		if cf.ID != "" {
			c.reply(cf.ID, err, 0)
		}
	case protocol.TypeJoin:
		c.joinFrame(ctx, cf)
	case protocol.TypeLeave:
		c.leaveFrame(ctx, cf)
	case protocol.TypePublish:
		c.publishFrame(ctx, cf)
	case protocol.TypeSend:
		c.handleSend(cf)
	case protocol.TypeRPC:
		c.handleRPC(cf)
	case protocol.TypeRefresh:
		c.refresh(ctx, cf)
	case protocol.TypePresence:
		c.presenceFrame(ctx, cf)
	case protocol.TypeHistory:
		c.historyFrame(ctx, cf)
	}
}

func (c *conn) reply(id string, err error, seq int64) {
	if err != nil {
		code := protocol.ErrUnavailable
		if e, ok := err.(*api.Error); ok && e.Status < 500 {
			code = e.Code
		}
		c.replyRefused(id, code, err.Error())
		return
	}
	b, _ := protocol.Encode(c.format, protocol.Reply{Type: protocol.TypeReply, ID: id, OK: true, Seq: seq})
	c.send(c.dataFrame(b))
}

func (c *conn) replyRefused(id, code, msg string) {
	b, _ := protocol.Encode(c.format, protocol.Reply{Type: protocol.TypeReply, ID: id, OK: false, Error: &protocol.ErrorBody{Code: code, Message: msg}})
	c.send(c.dataFrame(b))
}

var _ = context.Background

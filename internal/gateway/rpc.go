package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/internal/upstream"
	"github.com/wsgate/wsgate/protocol"
)

// Bounds of rpc frames in flight: a connection past maxRPCPerConn, or a
// node past maxRPCPerNode, is answered unavailable at once.
const (
	maxRPCPerConn = 8
	maxRPCPerNode = 1024
)

// rpcRequest is the body POSTed to WSGATE_RPC_URL.
type rpcRequest struct {
	User   string          `json:"user"`
	ConnID string          `json:"conn_id"`
	Device string          `json:"device"`
	Method string          `json:"method"`
	Data   json.RawMessage `json:"data"`
	Info   json.RawMessage `json:"info"`
}

// rpcAnswer is what WSGATE_RPC_URL answers.
type rpcAnswer struct {
	Result json.RawMessage     `json:"result"`
	Error  *protocol.ErrorBody `json:"error"`
}

// newRPCClient is the HTTP client of rpc calls (and of the webhook sink):
// every call is bounded by its context.
func newRPCClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
	}}
}

// handleRPC starts an rpc frame's call; its reply comes when the endpoint
// answers (rpc replies may overtake each other: each names its id).
func (c *conn) handleRPC(cf *protocol.ClientFrame) {
	n := c.n
	if n.cfg.RPCURL == "" {
		c.replyRefused(cf.ID, protocol.ErrForbidden, "no rpc endpoint is configured (WSGATE_RPC_URL)")
		return
	}
	c.mu.Lock()
	x := c.extra()
	busy := x.rpcs >= maxRPCPerConn
	if !busy {
		x.rpcs++
	}
	c.mu.Unlock()
	if busy {
		n.metrics.RPC.WithLabelValues(metrics.RPCUnavailable).Inc()
		c.replyRefused(cf.ID, protocol.ErrUnavailable, "too many rpc calls in flight on this connection")
		return
	}
	done := func() {
		c.mu.Lock()
		c.x.rpcs--
		c.dropIdleExtraLocked()
		c.mu.Unlock()
	}
	select {
	case n.rpcSlots <- struct{}{}:
	default:
		done()
		n.metrics.RPC.WithLabelValues(metrics.RPCUnavailable).Inc()
		c.replyRefused(cf.ID, protocol.ErrUnavailable, "too many rpc calls in flight on this node")
		return
	}
	ok := n.goFunc(func() {
		defer func() { <-n.rpcSlots; done() }()
		c.callRPC(cf)
	})
	if !ok {
		<-n.rpcSlots
		done()
	}
}

func (c *conn) callRPC(cf *protocol.ClientFrame) {
	n := c.n
	ctx, cancel := context.WithTimeout(n.ctx, upstreamDeadline)
	defer cancel()
	body, _ := json.Marshal(rpcRequest{User: c.user, ConnID: c.connID(), Device: c.deviceName(), Method: cf.Method, Data: cf.Data, Info: c.info()})
	status, resp, err := upstream.PostSigned(ctx, n.hc, n.cfg.RPCURL, n.cfg.UpstreamSecret, upstream.NewRequestID(), body)
	var a rpcAnswer
	if err == nil {
		err = json.Unmarshal(resp, &a)
	}
	switch {
	case err == nil && a.Error != nil && a.Error.Code != "":
		n.metrics.RPC.WithLabelValues(metrics.RPCError).Inc()
		c.replyRefused(cf.ID, a.Error.Code, a.Error.Message)
	case err == nil && status >= 200 && status <= 299:
		n.metrics.RPC.WithLabelValues(metrics.RPCOK).Inc()
		if a.Result == nil {
			a.Result = json.RawMessage("null")
		}
		b, eerr := protocol.EncodeReply(c.format, &protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, OK: true, Result: a.Result})
		if eerr != nil {
			c.replyRefused(cf.ID, protocol.ErrUnavailable, "the rpc result cannot be encoded")
			return
		}
		c.send(c.dataFrame(b))
	default:
		n.metrics.RPC.WithLabelValues(metrics.RPCUnavailable).Inc()
		msg := "the rpc endpoint did not answer in time"
		if ctx.Err() == nil {
			msg = "the rpc endpoint gave no valid answer"
		}
		c.logger().Warn("rpc failed", "method", cf.Method, "status", status, "err", err)
		c.replyRefused(cf.ID, protocol.ErrUnavailable, msg)
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/upstream"
	"github.com/wsgate/wsgate/protocol"
)

// The connect proxy (WSGATE_CONNECT_URL, contract section 13): a handshake
// without a token (or any handshake when no JWT key is configured) is
// authorized by the business, from its cookies and headers, before the
// upgrade. The request is built in admit (on the event loop: no I/O) and
// made by askProxy on the handshake's own goroutine, signed as webhook and
// rpc requests are (upstream.PostSigned, contract section 22).

// connectProxyTimeout bounds one proxy call; no answer by then is 503.
const connectProxyTimeout = 5 * time.Second

type connectProxyRequest struct {
	IP      string            `json:"ip"`
	Headers map[string]string `json:"headers"`
	Query   map[string]string `json:"query"`
}

type connectProxyAnswer struct {
	User     string          `json:"user"`
	Rooms    []string        `json:"rooms"`
	Pub      []string        `json:"pub"`
	Send     []string        `json:"send"`
	Info     json.RawMessage `json:"info"`
	ExpireAt int64           `json:"expire_at"` // Unix s; 0 = no expiry
}

// useConnectProxy: with a JWT key configured, only handshakes without a
// token go to the proxy (a token is checked as always); without one, all.
func (n *Node) useConnectProxy(req *wsRequest) bool {
	if n.cfg.ConnectURL == "" {
		return false
	}
	return n.verifier == nil || n.token(req) == ""
}

func connectRequest(req *wsRequest) []byte {
	q := make(map[string]string, len(req.query))
	for k, v := range req.query {
		if len(v) > 0 {
			q[k] = v[0]
		}
	}
	b, _ := json.Marshal(connectProxyRequest{IP: req.ip, Query: q, Headers: map[string]string{
		"Cookie": req.cookie, "Authorization": req.authz, "Origin": req.origin, "User-Agent": req.userAgent,
	}})
	return b
}

var connectProxyClient = &http.Client{Timeout: connectProxyTimeout}

// askProxy makes the connect proxy call of an admission that needs it and
// sets its claims; nil when admitted (or when no call was needed).
func (n *Node) askProxy(ctx context.Context, a *admission) *refusal {
	if a.proxy == nil {
		return nil
	}
	unavailable := func(why string) *refusal {
		n.log.Warn("connect proxy did not admit a handshake", "ip", a.ip, "why", why)
		f := refuseWith(http.StatusServiceUnavailable, "unavailable", "connect proxy unavailable ("+why+")")
		f.retryAfter = 5 * time.Second
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, connectProxyTimeout)
	defer cancel()
	status, body, err := upstream.PostSigned(ctx, connectProxyClient, n.cfg.ConnectURL, n.cfg.UpstreamSecret, upstream.NewRequestID(), a.proxy)
	switch {
	case err != nil && status == 0:
		return unavailable("no answer: " + err.Error())
	case status == http.StatusUnauthorized:
		return refuseWith(http.StatusUnauthorized, "unauthorized", "refused by the connect proxy")
	case status == http.StatusForbidden:
		return refuseWith(http.StatusForbidden, protocol.ErrForbidden, "refused by the connect proxy")
	case status != http.StatusOK:
		return unavailable("status " + strconv.Itoa(status))
	case err != nil:
		return unavailable("reading the answer: " + err.Error())
	}
	c, err := parseConnectAnswer(body)
	if err != nil {
		return unavailable(err.Error())
	}
	if !c.ExpiresAt.IsZero() && !c.ExpiresAt.After(time.Now()) {
		return refuseWith(http.StatusUnauthorized, "unauthorized", "the connect proxy's expire_at has passed")
	}
	a.claims, a.proxy = c, nil
	return nil
}

// parseConnectAnswer reads a 200 answer's claims: a JSON object whose
// user is a valid name; the rest optional.
func parseConnectAnswer(body []byte) (*auth.Claims, error) {
	var ans connectProxyAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, fmt.Errorf("answer is not a claims object: %v", err)
	}
	if err := protocol.ValidName("user", ans.User); err != nil {
		return nil, fmt.Errorf("answer's %v", err)
	}
	for _, list := range [][]string{ans.Rooms, ans.Pub, ans.Send} {
		if len(list) > 10_000 {
			return nil, fmt.Errorf("answer has %d patterns in one claim (at most 10000)", len(list))
		}
	}
	c := &auth.Claims{Subject: ans.User, Rooms: ans.Rooms, Pub: ans.Pub, Send: ans.Send, Info: ans.Info}
	if string(c.Info) == "null" {
		c.Info = nil
	}
	if ans.ExpireAt != 0 {
		c.ExpiresAt = time.Unix(ans.ExpireAt, 0)
	}
	return c, nil
}

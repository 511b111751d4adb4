package admission

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
// upgrade. The request is built by Credentials (on the event loop: no I/O)
// and made by AskProxy on the handshake's own goroutine, signed as webhook and
// rpc requests are (upstream.PostSigned, contract section 22).

// ConnectProxyTimeout bounds one proxy call; no answer by then is 503.
const ConnectProxyTimeout = 5 * time.Second

// ConnectProxyRequest is the body POSTed to WSGATE_CONNECT_URL.
type ConnectProxyRequest struct {
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

// UsesProxy: with a JWT key configured, only handshakes without a
// token go to the proxy (a token is checked as always); without one, all.
func (g *Checker) UsesProxy(req *Request) bool {
	if g.connectURL == "" {
		return false
	}
	return g.verifier == nil || g.Token(req) == ""
}

func connectRequest(req *Request) []byte {
	q := make(map[string]string, len(req.Query))
	for k, v := range req.Query {
		if len(v) > 0 {
			q[k] = v[0]
		}
	}
	b, _ := json.Marshal(ConnectProxyRequest{IP: req.IP, Query: q, Headers: map[string]string{
		"Cookie": req.Cookie, "Authorization": req.Authz, "Origin": req.Origin, "User-Agent": req.UserAgent,
	}})
	return b
}

var connectProxyClient = &http.Client{Timeout: ConnectProxyTimeout}

// AskProxy makes the connect proxy call of an admission that needs it and
// sets its claims; nil when admitted (or when no call was needed).
func (g *Checker) AskProxy(ctx context.Context, a *Params) *Refusal {
	if a.Proxy == nil {
		return nil
	}
	unavailable := func(why string) *Refusal {
		g.log.Warn("connect proxy did not admit a handshake", "ip", a.IP, "why", why)
		f := Refuse(http.StatusServiceUnavailable, "unavailable", "connect proxy unavailable ("+why+")")
		f.RetryAfter = 5 * time.Second
		return f
	}
	ctx, cancel := context.WithTimeout(ctx, ConnectProxyTimeout)
	defer cancel()
	status, body, err := upstream.PostSigned(ctx, connectProxyClient, g.connectURL, g.secret, upstream.NewRequestID(), a.Proxy)
	switch {
	case err != nil && status == 0:
		return unavailable("no answer: " + err.Error())
	case status == http.StatusUnauthorized:
		return Refuse(http.StatusUnauthorized, "unauthorized", "refused by the connect proxy")
	case status == http.StatusForbidden:
		return Refuse(http.StatusForbidden, protocol.ErrForbidden, "refused by the connect proxy")
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
		return Refuse(http.StatusUnauthorized, "unauthorized", "the connect proxy's expire_at has passed")
	}
	a.Claims, a.Proxy = c, nil
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

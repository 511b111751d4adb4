package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/wsframe"
)

// POST /v1/conn/{conn_id} (contract 18): the client frames of an HTTP
// stream connection, sent to any node.
//
// The session secret of a connection is <node>.<mac>: the base64url of
// the owning node's id, and the base64url of the first 16 bytes of
// HMAC-SHA256(node's session key, conn id). The key is random per node
// process and never leaves it, so the session needs no storage (an idle
// connection holds nothing for it) and only the owner can check it, in
// constant time (hmac.Equal). The node part only routes: a forged one
// reaches a node whose check fails, or none.
//
// A node that is not the owner forwards the body on the bus (kindPost)
// and waits for the owner's status (kindPosted), sending again every
// askRetry until it comes (the owner answers a request id it has seen
// with the same status, without taking the frames twice), the owner is
// found dead (404), or 5 s have passed (503). The owner feeds the frames,
// in order, through the same handling as a WebSocket text frame (limits,
// message rate, replies on the stream); the frames posted to one
// connection are taken one request at a time (postMu).

const (
	maxPostBody   = 1 << 20 // bytes of one POST /v1/conn body
	maxPostFrames = 64      // frames in one body (the connection's inbound queue holds as many)
	postWait      = 5 * time.Second
)

// sessionMAC is the secret part of the session of connection connID.
func (n *Node) sessionMAC(connID string) []byte {
	m := hmac.New(sha256.New, n.sessionKey[:])
	m.Write([]byte(connID))
	return m.Sum(nil)[:16]
}

// session is the secret the welcome of an HTTP stream connection carries.
func (n *Node) session(connID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(n.cfg.NodeID)) + "." + base64.RawURLEncoding.EncodeToString(n.sessionMAC(connID))
}

// parseSession splits a session into the owner's node id and the mac.
func parseSession(s string) (node string, mac []byte, ok bool) {
	a, b, found := strings.Cut(s, ".")
	if !found || len(a) == 0 || len(a) > 512 || len(b) != 22 {
		return "", nil, false
	}
	nb, err := base64.RawURLEncoding.DecodeString(a)
	if err != nil {
		return "", nil, false
	}
	mac, err = base64.RawURLEncoding.DecodeString(b)
	if err != nil || len(mac) != 16 {
		return "", nil, false
	}
	return string(nb), mac, true
}

func newSessionKey() (k [32]byte) {
	rand.Read(k[:])
	return k
}

// postResult is the answer to posted frames.
type postResult struct {
	status int
	code   string
	msg    string
	taken  int
}

var (
	postUnauthorized = postResult{status: http.StatusUnauthorized, code: "unauthorized", msg: "the session does not match the connection"}
	postUnknown      = postResult{status: http.StatusNotFound, code: "unknown_connection", msg: "no such connection (it has ended)"}
	postUnavailable  = postResult{status: http.StatusServiceUnavailable, code: "unavailable", msg: "the connection's node did not answer"}
)

// splitFrames reads a body: one client frame, or a JSON array of frames.
func splitFrames(body []byte) ([]json.RawMessage, *postResult) {
	body = bytes.TrimSpace(body)
	bad := func(msg string) ([]json.RawMessage, *postResult) {
		return nil, &postResult{status: http.StatusBadRequest, code: "bad_request", msg: msg}
	}
	switch {
	case len(body) > 0 && body[0] == '{':
		if !json.Valid(body) {
			return bad("the body is not valid JSON")
		}
		return []json.RawMessage{body}, nil
	case len(body) > 0 && body[0] == '[':
		var frames []json.RawMessage
		if err := json.Unmarshal(body, &frames); err != nil {
			return bad("the body is not a JSON array of frames: " + err.Error())
		}
		if len(frames) > maxPostFrames {
			return bad("more than " + strconv.Itoa(maxPostFrames) + " frames in one body")
		}
		return frames, nil
	}
	return bad("the body must be one client frame (a JSON object) or an array of frames")
}

// serveConnPost is POST /v1/conn/{conn_id}.
func (n *Node) serveConnPost(w http.ResponseWriter, r *http.Request) {
	res := n.connPost(r)
	if origin := r.Header.Get("Origin"); origin != "" && len(r.Header.Values("Origin")) == 1 && n.gate.Origins().AllowOrigin(origin, r.Host) {
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Set("Access-Control-Allow-Credentials", "true")
		w.Header().Add("Vary", "Origin")
	}
	switch res.status {
	case http.StatusAccepted:
		api.WriteJSON(w, res.status, map[string]int{"accepted": res.taken})
		return
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	}
	api.WriteError(w, res.status, res.code, res.msg)
}

func (n *Node) connPost(r *http.Request) postResult {
	connID := r.PathValue("conn_id")
	authz := r.Header.Get("Authorization")
	if len(authz) < 7 || !strings.EqualFold(authz[:7], "bearer ") {
		return postResult{status: http.StatusUnauthorized, code: "unauthorized", msg: "the connection's session is missing: send Authorization: Bearer <session>"}
	}
	node, mac, ok := parseSession(strings.TrimSpace(authz[7:]))
	if !ok {
		return postUnauthorized
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPostBody+1))
	if err != nil {
		return postResult{status: http.StatusBadRequest, code: "bad_request", msg: "request body: " + err.Error()}
	}
	if len(body) > maxPostBody {
		return postResult{status: http.StatusRequestEntityTooLarge, code: "too_large", msg: "body larger than 1 MiB"}
	}
	frames, bad := splitFrames(body)
	if bad != nil {
		return *bad
	}
	if node == n.cfg.NodeID {
		return n.takePosted(connID, mac, frames)
	}
	return n.postRemote(r.Context(), node, connID, mac, body)
}

// takePosted feeds frames posted to connID, a connection of this node,
// in order, as WebSocket text frames.
func (n *Node) takePosted(connID string, mac []byte, frames []json.RawMessage) postResult {
	if !hmac.Equal(mac, n.sessionMAC(connID)) {
		return postUnauthorized
	}
	rest, ok := strings.CutPrefix(connID, n.idPrefix)
	if !ok {
		return postUnknown
	}
	seq, err := strconv.ParseUint(rest, 16, 64)
	if err != nil {
		return postUnknown
	}
	c := n.hub.stream(seq)
	if c == nil || c.connID() != connID {
		return postUnknown
	}
	mu := &n.postMu[seq%uint64(len(n.postMu))]
	mu.Lock()
	defer mu.Unlock()
	c.mu.Lock()
	open := c.state == stOpen
	if open {
		c.lastRead = time.Now().Unix() // a posted frame shows the client alive
	}
	c.mu.Unlock()
	if !open {
		return postUnknown
	}
	res := postResult{status: http.StatusAccepted}
	for _, f := range frames {
		if len(f) > n.cfg.MaxMessageBytes {
			c.close(1009, "frame too big")
			return postResult{status: http.StatusRequestEntityTooLarge, code: "too_large", msg: "a frame larger than " + strconv.Itoa(n.cfg.MaxMessageBytes) + " bytes", taken: res.taken}
		}
		more, limited := c.onClientMessage(wsframe.OpText, f)
		if limited {
			return postResult{status: http.StatusTooManyRequests, code: "rate_limited", msg: "message rate exceeded", taken: res.taken}
		}
		if !more {
			break
		}
		res.taken++
	}
	return res
}

// postRemote forwards a body to the owner of the connection and waits
// for its answer.
func (n *Node) postRemote(ctx context.Context, node, connID string, mac, body []byte) postResult {
	req := n.newID()
	ch := n.posts.add(req)
	defer n.posts.remove(req)
	env := encodeEnvelope(envelope{Kind: kindPost, Conn: connID, Session: base64.RawURLEncoding.EncodeToString(mac), Req: req, From: n.cfg.NodeID}, body)
	res, got, dead := awaitReply(ctx, n, node, env, ch, postWait)
	switch {
	case got:
		return res
	case dead:
		return postUnknown // its connections are gone with it
	}
	return postUnavailable
}

// postSeen remembers the answers to forwarded posts for a while, so that
// a request sent again is answered without its frames being taken twice.
type postSeen struct {
	mu   sync.Mutex
	done map[string]postAnswer
}

type postAnswer struct {
	res postResult
	at  int64 // Unix s
}

// onPost takes a post forwarded by another node (kindPost) and answers it.
func (n *Node) onPost(e envelope, body []byte) {
	n.seen.mu.Lock()
	a, dup := n.seen.done[e.Req]
	if !dup {
		if n.seen.done == nil {
			n.seen.done = map[string]postAnswer{}
		}
		n.seen.done[e.Req] = postAnswer{at: time.Now().Unix()} // in progress
	}
	n.seen.mu.Unlock()
	if dup {
		if a.res.status != 0 {
			n.answerPost(e, a.res)
		}
		return
	}
	res := postUnauthorized
	if mac, err := base64.RawURLEncoding.DecodeString(e.Session); err == nil {
		if frames, bad := splitFrames(body); bad != nil {
			res = *bad
		} else {
			res = n.takePosted(e.Conn, mac, frames)
		}
	}
	n.seen.mu.Lock()
	n.seen.done[e.Req] = postAnswer{res: res, at: time.Now().Unix()}
	n.seen.mu.Unlock()
	n.answerPost(e, res)
}

func (n *Node) answerPost(e envelope, res postResult) {
	if e.From == "" || e.Req == "" {
		return
	}
	out := envelope{Kind: kindPosted, Req: e.Req, Code: res.status, Reason: res.code, Taken: res.taken}
	n.sendAnswer(e.From, encodeEnvelope(out, []byte(res.msg)))
}

// onPosted takes the owner's answer to a forwarded post (kindPosted).
func (n *Node) onPosted(e envelope, body []byte) {
	n.posts.deliver(e.Req, postResult{status: e.Code, code: e.Reason, msg: string(body), taken: e.Taken})
}

// expirePosts forgets the answers older than a minute (the sweep calls
// it once a second).
func (n *Node) expirePosts(now int64) {
	n.seen.mu.Lock()
	defer n.seen.mu.Unlock()
	for req, a := range n.seen.done {
		if now-a.at > 60 {
			delete(n.seen.done, req)
		}
	}
}

package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/protocol"
)

// The Pusher HTTP API on the admin surface (contract 21): the calls a
// Pusher server library makes, authenticated by Pusher's query signature
// instead of the API key.

// Bounds of the Pusher HTTP API (Pusher's own).
const (
	pusherMaxChannels   = 100 // channels of one event
	pusherMaxBatch      = 10  // events of one batch
	pusherMaxEventName  = 200
	pusherSignatureSkew = 600 // seconds between auth_timestamp and now
)

var socketIDPattern = regexp.MustCompile(`^\d{1,20}\.\d{1,20}$`)

func (n *Node) pusherAPIRoutes(mux *http.ServeMux) {
	handle := func(pattern string, h func(http.ResponseWriter, *http.Request, []byte) error) {
		mux.HandleFunc(pattern, n.pusherAPIHandler(h))
	}
	handle("POST /apps/{app_id}/events", n.pusherEvents)
	handle("POST /apps/{app_id}/batch_events", n.pusherBatchEvents)
	handle("GET /apps/{app_id}/channels", n.pusherChannels)
	handle("GET /apps/{app_id}/channels/{name}", n.pusherChannel)
	handle("GET /apps/{app_id}/channels/{name}/users", n.pusherUsers)
}

// pusherAPIError is an answer of the Pusher HTTP API other than 200: a
// plain text body, as Pusher answers.
type pusherAPIError struct {
	status int
	msg    string
}

func (e *pusherAPIError) Error() string { return e.msg }

func pusherBad(status int, format string, args ...any) error {
	return &pusherAPIError{status: status, msg: fmt.Sprintf(format, args...)}
}

// pusherAPIHandler checks the app id and the signature (over the body,
// read whole first), then runs h.
func (n *Node) pusherAPIHandler(h func(http.ResponseWriter, *http.Request, []byte) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := func() error {
			if r.PathValue("app_id") != n.cfg.PusherAppID {
				return pusherBad(http.StatusNotFound, "Unknown app id %q", r.PathValue("app_id"))
			}
			body, err := api.ReadBody(r)
			if err != nil {
				var ae *api.Error
				if errors.As(err, &ae) {
					return pusherBad(ae.Status, "%s", ae.Message)
				}
				return pusherBad(http.StatusBadRequest, "%v", err)
			}
			if err := checkPusherSignature(r.Method, r.URL.Path, r.URL.RawQuery, body, n.cfg.PusherKey, n.cfg.PusherSecret, time.Now()); err != nil {
				return err
			}
			return h(w, r, body)
		}()
		if err == nil {
			return
		}
		var pe *pusherAPIError
		if !errors.As(err, &pe) {
			pe = &pusherAPIError{status: http.StatusInternalServerError, msg: err.Error()}
			var ae *api.Error
			if errors.As(err, &ae) {
				pe.status = ae.Status
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(pe.status)
		fmt.Fprintln(w, pe.msg)
	}
}

// checkPusherSignature verifies Pusher's query signature: auth_key is the
// app key, auth_timestamp within 600 s of now, auth_version 1.0, body_md5
// the body's (when there is a body), and auth_signature the hex
// HMAC-SHA256 with the secret of "METHOD\nPATH\n" and every other
// parameter as key=value, keys lower case and sorted, joined by "&".
func checkPusherSignature(method, path, rawQuery string, body []byte, key, secret string, now time.Time) error {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return pusherBad(http.StatusBadRequest, "query: %v", err)
	}
	params := make(map[string]string, len(q))
	for k, v := range q {
		lk := strings.ToLower(k)
		if _, dup := params[lk]; dup || len(v) != 1 {
			return pusherBad(http.StatusBadRequest, "query parameter %s given more than once", k)
		}
		params[lk] = v[0]
	}
	sig, ok := params["auth_signature"]
	if !ok {
		return pusherBad(http.StatusUnauthorized, "Missing auth_signature")
	}
	delete(params, "auth_signature")
	switch {
	case params["auth_key"] != key:
		return pusherBad(http.StatusUnauthorized, "Unknown auth_key")
	case params["auth_version"] != "1.0":
		return pusherBad(http.StatusUnauthorized, "auth_version must be 1.0")
	}
	ts, err := strconv.ParseInt(params["auth_timestamp"], 10, 64)
	if err != nil {
		return pusherBad(http.StatusUnauthorized, "auth_timestamp must be Unix seconds")
	}
	if d := now.Unix() - ts; d > pusherSignatureSkew || d < -pusherSignatureSkew {
		return pusherBad(http.StatusUnauthorized, "Timestamp expired: %d seconds from the server time, more than %d", d, pusherSignatureSkew)
	}
	if len(body) > 0 {
		sum := md5.Sum(body)
		if params["body_md5"] != hex.EncodeToString(sum[:]) {
			return pusherBad(http.StatusUnauthorized, "body_md5 is not the MD5 of the body")
		}
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(method + "\n" + path + "\n")
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k + "=" + params[k])
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(b.String()))
	if !hmac.Equal([]byte(sig), []byte(hex.EncodeToString(mac.Sum(nil)))) {
		return pusherBad(http.StatusUnauthorized, "Invalid signature: you should have sent HmacSHA256Hex(%q, your_secret_key)", b.String())
	}
	return nil
}

// pusherEvent is one event of the HTTP API.
type pusherEvent struct {
	Name     string          `json:"name"`
	Data     json.RawMessage `json:"data"`
	Channels []string        `json:"channels"`
	Channel  string          `json:"channel"`
	SocketID string          `json:"socket_id"`
}

// check validates e and returns its channels.
func (e *pusherEvent) check(maxData int) ([]string, error) {
	chans := e.Channels
	if e.Channel != "" {
		chans = append(slices.Clip(chans), e.Channel)
	}
	switch {
	case e.Name == "" || len(e.Name) > pusherMaxEventName:
		return nil, pusherBad(http.StatusBadRequest, "name must be 1 to %d characters", pusherMaxEventName)
	case len(chans) == 0:
		return nil, pusherBad(http.StatusBadRequest, "channels (or channel) must name at least one channel")
	case len(chans) > pusherMaxChannels:
		return nil, pusherBad(http.StatusBadRequest, "at most %d channels per event", pusherMaxChannels)
	case len(e.Data) > maxData:
		return nil, pusherBad(http.StatusRequestEntityTooLarge, "data larger than %d bytes", maxData)
	case e.SocketID != "" && !socketIDPattern.MatchString(e.SocketID):
		return nil, pusherBad(http.StatusBadRequest, "socket_id %q is not of the form 123.456", e.SocketID)
	}
	for _, ch := range chans {
		if err := protocol.ValidPusherChannel(ch); err != nil {
			return nil, pusherBad(http.StatusBadRequest, "%v", err)
		}
	}
	return chans, nil
}

// publishPusher publishes e to each of its channels (a room each); the
// data, a string as Pusher's libraries send it, stays that string.
func (n *Node) publishPusher(ctx context.Context, e *pusherEvent, chans []string) error {
	data := e.Data
	if len(data) == 0 {
		data = json.RawMessage(`""`)
	}
	for _, ch := range chans {
		req := api.PublishRequest{Target: protocol.Target{Type: protocol.TargetRoom, ID: ch}, Event: e.Name, Data: data, Class: "chat", Except: e.SocketID}
		if _, err := n.Publish(ctx, req); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) pusherEvents(w http.ResponseWriter, r *http.Request, body []byte) error {
	var e pusherEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return pusherBad(http.StatusBadRequest, "body is not an event {name, data, channels, socket_id}: %v", err)
	}
	chans, err := e.check(n.cfg.MaxMessageBytes)
	if err != nil {
		return err
	}
	if err := n.publishPusher(r.Context(), &e, chans); err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, struct{}{})
	return nil
}

func (n *Node) pusherBatchEvents(w http.ResponseWriter, r *http.Request, body []byte) error {
	var b struct {
		Batch []pusherEvent `json:"batch"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return pusherBad(http.StatusBadRequest, "body is not {batch: [event, ...]}: %v", err)
	}
	if len(b.Batch) == 0 || len(b.Batch) > pusherMaxBatch {
		return pusherBad(http.StatusBadRequest, "batch must hold 1 to %d events", pusherMaxBatch)
	}
	chans := make([][]string, len(b.Batch))
	for i := range b.Batch {
		var err error
		if chans[i], err = b.Batch[i].check(n.cfg.MaxMessageBytes); err != nil {
			return pusherBad(http.StatusBadRequest, "batch[%d]: %v", i, err)
		}
	}
	for i := range b.Batch {
		if err := n.publishPusher(r.Context(), &b.Batch[i], chans[i]); err != nil {
			return err
		}
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"batch": make([]struct{}, len(b.Batch))})
	return nil
}

// pusherInfo reads the info parameter (comma list) and refuses
// user_count on channels that are not presence channels, and every
// channel query on a backend without room presence.
func (n *Node) pusherInfo(r *http.Request, presence bool) (users, subs bool, err error) {
	if n.pres == nil {
		return false, false, pusherBad(http.StatusServiceUnavailable, "room presence unavailable on this backend")
	}
	for f := range strings.SplitSeq(r.URL.Query().Get("info"), ",") {
		switch strings.TrimSpace(f) {
		case "user_count":
			users = true
		case "subscription_count":
			subs = true
		}
	}
	if users && !presence {
		return false, false, pusherBad(http.StatusBadRequest, "info=user_count is only for presence channels")
	}
	return users, subs, nil
}

// pusherChannels lists the occupied channels (rooms with a connection in
// their presence), filter_by_prefix and info=user_count as Pusher does.
func (n *Node) pusherChannels(w http.ResponseWriter, r *http.Request, _ []byte) error {
	prefix := r.URL.Query().Get("filter_by_prefix")
	users, subs, err := n.pusherInfo(r, strings.HasPrefix(prefix, pusherPresence))
	if err != nil {
		return err
	}
	ctx, cancel := n.bctx(r.Context())
	defer cancel()
	nodes, err := n.pres.PresenceNodes(ctx)
	if err != nil {
		return api.Unavailable("room presence", err)
	}
	type counts struct {
		subs  int
		users map[string]bool
	}
	rooms := map[string]*counts{}
	for _, id := range nodes {
		list, err := n.pres.NodePresence(ctx, id)
		if err != nil {
			return api.Unavailable("room presence", err)
		}
		for _, e := range list {
			if !strings.HasPrefix(e.Room, prefix) {
				continue
			}
			c := rooms[e.Room]
			if c == nil {
				c = &counts{users: map[string]bool{}}
				rooms[e.Room] = c
			}
			c.subs++
			c.users[e.User] = true
		}
	}
	out := make(map[string]map[string]int, len(rooms))
	for room, c := range rooms {
		info := map[string]int{}
		if users {
			info["user_count"] = len(c.users)
		}
		if subs {
			info["subscription_count"] = c.subs
		}
		out[room] = info
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"channels": out})
	return nil
}

func (n *Node) pusherChannel(w http.ResponseWriter, r *http.Request, _ []byte) error {
	name := r.PathValue("name")
	if err := protocol.ValidPusherChannel(name); err != nil {
		return pusherBad(http.StatusBadRequest, "%v", err)
	}
	users, subs, err := n.pusherInfo(r, strings.HasPrefix(name, pusherPresence))
	if err != nil {
		return err
	}
	ctx, cancel := n.bctx(r.Context())
	defer cancel()
	p, _, _, err := n.pres.RoomPresence(ctx, name, "", 0)
	if err != nil {
		return api.Unavailable("room presence", err)
	}
	out := map[string]any{"occupied": p.Conns > 0}
	if users {
		out["user_count"] = p.Users
	}
	if subs {
		out["subscription_count"] = p.Conns
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (n *Node) pusherUsers(w http.ResponseWriter, r *http.Request, _ []byte) error {
	name := r.PathValue("name")
	if err := protocol.ValidPusherChannel(name); err != nil {
		return pusherBad(http.StatusBadRequest, "%v", err)
	}
	if !strings.HasPrefix(name, pusherPresence) {
		return pusherBad(http.StatusBadRequest, "users are listed for presence channels only")
	}
	if n.pres == nil {
		return pusherBad(http.StatusServiceUnavailable, "room presence unavailable on this backend")
	}
	ctx, cancel := n.bctx(r.Context())
	defer cancel()
	seen := map[string]bool{}
	users := []map[string]string{}
	cursor := ""
	for {
		_, list, next, err := n.pres.RoomPresence(ctx, name, cursor, 1000)
		if err != nil {
			return api.Unavailable("room presence", err)
		}
		for _, e := range list {
			if !seen[e.User] {
				seen[e.User] = true
				users = append(users, map[string]string{"id": e.User})
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"users": users})
	return nil
}

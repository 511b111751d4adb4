package httpstream

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/wsgate/wsgate/internal/admission"
)

// MaxBody bounds the JSON body of POST /stream.
const MaxBody = 64 << 10

// streamBody is the JSON body POST /stream may carry instead of the
// query parameters.
type streamBody struct {
	Token     string          `json:"token"`
	Since     json.RawMessage `json:"since"`
	RoomSince []string        `json:"room_since"`
	Device    *string         `json:"device"`
	Format    string          `json:"format"`
	User      string          `json:"user"` // insecure mode only, as ?user=
}

// ReadRequest reads the handshake parameters of a request of k: the
// query, the headers, and for POST /stream a JSON body (streamBody) that
// may carry them instead; Last-Event-ID (or last_event_id) resumes from
// a cursor. A non-nil refusal is the request's answer. What is read is
// judged afterwards exactly as a WebSocket handshake (admission).
func ReadRequest(r *http.Request, k Kind) (admission.Request, *admission.Refusal) {
	req := admission.FromHTTP(r)
	req.Protocols, req.Exts = nil, nil // no subprotocol, no deflate
	if len(r.Header.Values("Origin")) > 1 {
		return req, admission.Refuse(http.StatusBadRequest, "bad_request", "more than one Origin header")
	}
	if k == NDJSON && r.Body != nil {
		raw, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		if err != nil {
			return req, admission.Refuse(http.StatusBadRequest, "bad_request", "request body: "+err.Error())
		}
		if len(raw) > MaxBody {
			return req, admission.Refuse(http.StatusRequestEntityTooLarge, "bad_request", "request body over 64 KiB")
		}
		if len(bytes.TrimSpace(raw)) > 0 {
			var body streamBody
			if err := json.Unmarshal(raw, &body); err != nil {
				return req, admission.Refuse(http.StatusBadRequest, "bad_request", "request body: "+err.Error())
			}
			if body.Token != "" && req.Authz == "" {
				// A body is not a URL: it ends up in no access log.
				req.Authz = "Bearer " + body.Token
			}
			if len(body.Since) > 0 && string(body.Since) != "null" {
				s := strings.Trim(string(body.Since), `"`)
				req.Query.Set("since", s)
			}
			for _, v := range body.RoomSince {
				req.Query.Add("room_since", v)
			}
			if body.Device != nil {
				req.Query.Set("device", *body.Device)
			}
			if body.Format != "" {
				req.Query.Set("format", body.Format)
			}
			if body.User != "" {
				req.Query.Set("user", body.User)
			}
		}
	}
	if k == SSE && req.Authz == "" {
		// EventSource cannot set headers: /sse takes the query token also
		// when WSGATE_ALLOW_QUERY_TOKEN is false (contract 18).
		if t := req.Query.Get("token"); t != "" {
			req.Authz = "Bearer " + t
		}
	}
	if f := req.Query.Get("format"); f != "" && f != "json" {
		return req, admission.Refuse(http.StatusBadRequest, "bad_request", "format "+strconv.Quote(f)+" is not carried on "+k.String()+": its frames are JSON text (use format=json, or a WebSocket for msgpack)")
	}
	if k == SSE {
		id := r.Header.Get("Last-Event-ID")
		if id == "" {
			id = req.Query.Get("last_event_id")
		}
		if id != "" {
			if err := ResumeFromCursor(req.Query, id); err != nil {
				return req, admission.Refuse(http.StatusBadRequest, "bad_request", err.Error())
			}
		}
	}
	return req, nil
}

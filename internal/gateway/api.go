package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

const maxBodyBytes = 1 << 20

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// readBody reads a JSON body of at most 1 MiB.
func readBody(r *http.Request) ([]byte, error) {
	b, err := readAll(io.LimitReader(r.Body, maxBodyBytes+1), r.ContentLength)
	if err != nil {
		return nil, badRequest("cannot read the body: %v", err)
	}
	if len(b) > maxBodyBytes {
		return nil, &APIError{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: "body larger than 1 MiB"}
	}
	return b, nil
}

// readAll is io.ReadAll with a first buffer sized for the announced
// length (plus one byte, to see the end without growing).
func readAll(rd io.Reader, length int64) ([]byte, error) {
	size := 512
	if length > 0 {
		size = int(min(length, maxBodyBytes)) + 1
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// publishBody is the API's publish object; fields are decoded one by one
// so that each wrong type gets its own message.
type publishBody struct {
	Target         json.RawMessage `json:"target"`
	Event          json.RawMessage `json:"event"`
	Data           json.RawMessage `json:"data"`
	Reliable       json.RawMessage `json:"reliable"`
	Class          json.RawMessage `json:"class"`
	IdempotencyKey json.RawMessage `json:"idempotency_key"`
	Except         json.RawMessage `json:"except"`
	Key            json.RawMessage `json:"key"`
}

func decodePublish(raw []byte) (PublishRequest, error) {
	var req PublishRequest
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return req, badRequest("empty body: expected a JSON object")
	}
	if raw[0] != '{' {
		return req, badRequest("the body must be a JSON object")
	}
	var b publishBody
	if err := json.Unmarshal(raw, &b); err != nil {
		return req, badRequest("invalid JSON: %v", err)
	}
	if len(b.Target) == 0 || string(b.Target) == "null" {
		return req, badRequest("target is required: {\"type\":\"user|room|broadcast\",\"id\":\"...\"}")
	}
	if b.Target[0] != '{' {
		return req, badRequest("target must be an object {\"type\",\"id\"}")
	}
	if err := json.Unmarshal(b.Target, &req.Target); err != nil {
		return req, badRequest("target: %v", err)
	}
	if err := optString(b.Event, &req.Event); err != nil {
		return req, badRequest("event must be a string")
	}
	if err := optString(b.Class, &req.Class); err != nil {
		return req, badRequest("class must be a string")
	}
	if err := optString(b.IdempotencyKey, &req.IdempotencyKey); err != nil {
		return req, badRequest("idempotency_key must be a string")
	}
	if err := optString(b.Except, &req.Except); err != nil {
		return req, badRequest("except must be a connection id (a string)")
	}
	if err := optString(b.Key, &req.Key); err != nil {
		return req, badRequest("key must be a string")
	}
	if len(b.Reliable) > 0 && string(b.Reliable) != "null" {
		if err := json.Unmarshal(b.Reliable, &req.Reliable); err != nil {
			return req, badRequest("reliable must be true or false")
		}
	}
	req.Data = b.Data
	return req, nil
}

// decodeBatchMessage decodes one message of a batch, whose body was
// already checked to be valid JSON. The common shape (the six known keys,
// each at most once, strings without escapes) is read by a single scan;
// anything else goes through decodePublish, which gives the same request
// and the exact error messages.
func decodeBatchMessage(raw []byte) (PublishRequest, error) {
	if req, ok := scanPublish(raw); ok {
		return req, nil
	}
	return decodePublish(raw)
}

// scanPublish reads a publish object from valid JSON, or reports false
// when it is not of the common shape.
func scanPublish(raw []byte) (req PublishRequest, ok bool) {
	p := jsonScan{b: raw}
	if !p.byte('{') {
		return req, false
	}
	var seen [6]bool
	if p.byte('}') {
		return req, false // no target: decodePublish names the error
	}
	for {
		key, ok := p.plainString()
		if !ok || !p.byte(':') {
			return req, false
		}
		field := -1
		switch key {
		case "target":
			field = 0
			if !p.byte('{') {
				return req, false
			}
			var st [2]bool
			for {
				k, ok := p.plainString()
				if !ok || !p.byte(':') {
					return req, false
				}
				v, ok := p.plainString()
				switch {
				case !ok:
					return req, false
				case k == "type" && !st[0]:
					req.Target.Type, st[0] = v, true
				case k == "id" && !st[1]:
					req.Target.ID, st[1] = v, true
				default:
					return req, false
				}
				if p.byte('}') {
					break
				}
				if !p.byte(',') {
					return req, false
				}
			}
		case "event":
			field = 1
			if req.Event, ok = p.plainString(); !ok {
				return req, false
			}
		case "class":
			field = 2
			if req.Class, ok = p.plainString(); !ok {
				return req, false
			}
		case "idempotency_key":
			field = 3
			if req.IdempotencyKey, ok = p.plainString(); !ok {
				return req, false
			}
		case "reliable":
			field = 4
			switch {
			case p.literal("true"):
				req.Reliable = true
			case p.literal("false"):
			default:
				return req, false
			}
		case "data":
			field = 5
			v, ok := p.value()
			if !ok {
				return req, false
			}
			req.Data = v
		default:
			return req, false
		}
		if seen[field] {
			return req, false
		}
		seen[field] = true
		if p.byte('}') {
			break
		}
		if !p.byte(',') {
			return req, false
		}
	}
	p.space()
	return req, seen[0] && p.i == len(p.b)
}

// jsonScan walks valid JSON.
type jsonScan struct {
	b []byte
	i int
}

func (p *jsonScan) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c (after white space) if it comes next.
func (p *jsonScan) byte(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *jsonScan) literal(s string) bool {
	p.space()
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// plainString reads a string of printable ASCII without escapes; anything
// else (escapes, other bytes, not a string) reports false.
func (p *jsonScan) plainString() (string, bool) {
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := string(p.b[p.i+1 : j])
			p.i = j + 1
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return "", false
		}
	}
	return "", false
}

// value returns the next value (any type) as it stands in the input.
func (p *jsonScan) value() ([]byte, bool) {
	p.space()
	start := p.i
	depth := 0
	for p.i < len(p.b) {
		switch c := p.b[p.i]; c {
		case '"':
			p.i++
			for p.i < len(p.b) && p.b[p.i] != '"' {
				if p.b[p.i] == '\\' {
					p.i++
				}
				p.i++
			}
			p.i++
		case '{', '[':
			depth++
			p.i++
		case '}', ']':
			if depth == 0 {
				return p.b[start:p.i], p.i > start
			}
			depth--
			p.i++
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return p.b[start:p.i], p.i > start
			}
			p.i++
		default:
			p.i++
		}
		if depth == 0 && p.i > start && (p.b[start] == '"' || p.b[start] == '{' || p.b[start] == '[') {
			return p.b[start:p.i], true
		}
	}
	return p.b[start:min(p.i, len(p.b))], p.i > start && p.i <= len(p.b) && depth == 0
}

func optString(raw json.RawMessage, dst *string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, dst)
}

func (n *Node) apiPublish(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	req, err := decodePublish(body)
	if err != nil {
		return err
	}
	req.Traceparent = r.Header.Get("traceparent")
	res, err := n.Publish(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (n *Node) apiPublishBatch(w http.ResponseWriter, r *http.Request) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return badRequest("the body must be a JSON object {\"messages\":[...]}")
	}
	var ok bool
	if b.Messages, ok = scanBatch(body); !ok {
		if err := json.Unmarshal(body, &b); err != nil {
			return badRequest("invalid JSON: %v", err)
		}
	}
	if b.Messages == nil {
		return badRequest("messages is required")
	}
	if err := checkBatchSize(len(b.Messages)); err != nil {
		return err
	}
	results := n.publishBatch(r.Context(), b.Messages, r.Header.Get("traceparent"))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(appendResults(make([]byte, 0, 16+64*len(results)), results))
	return nil
}

// scanBatch splits a batch body of the common shape ({"messages":[...]},
// nothing else) into its messages without copying them; it reports false
// for anything else (json.Unmarshal then decides, with its errors).
func scanBatch(body []byte) ([]json.RawMessage, bool) {
	if !json.Valid(body) {
		return nil, false
	}
	p := jsonScan{b: body}
	if !p.byte('{') {
		return nil, false
	}
	if key, ok := p.plainString(); !ok || key != "messages" || !p.byte(':') || !p.byte('[') {
		return nil, false
	}
	msgs := []json.RawMessage{}
	if !p.byte(']') {
		for {
			v, ok := p.value()
			if !ok {
				return nil, false
			}
			msgs = append(msgs, v)
			if p.byte(']') {
				break
			}
			if !p.byte(',') {
				return nil, false
			}
		}
	}
	if !p.byte('}') {
		return nil, false
	}
	p.space()
	return msgs, p.i == len(p.b)
}

// appendResults encodes a batch answer as writeJSON would.
func appendResults(dst []byte, results []any) []byte {
	dst = append(dst, `{"results":[`...)
	for i, r := range results {
		if i > 0 {
			dst = append(dst, ',')
		}
		if pr, ok := r.(PublishResult); ok {
			dst = append(dst, `{"id":`...)
			dst = protocol.AppendJSONString(dst, pr.ID)
			if pr.Seq != 0 {
				dst = append(dst, `,"seq":`...)
				dst = strconv.AppendInt(dst, pr.Seq, 10)
			}
			if pr.Online != nil {
				dst = append(dst, `,"online":`...)
				dst = strconv.AppendBool(dst, *pr.Online)
			}
			dst = append(dst, '}')
			continue
		}
		b, _ := json.Marshal(r)
		dst = append(dst, b...)
	}
	return append(dst, "]}\n"...)
}

// batchParallel bounds the targets a batch publishes to at once.
const batchParallel = 64

// publishBatch decodes the JSON messages of a batch and publishes them,
// each with the trace context tp ("" for none).
func (n *Node) publishBatch(ctx context.Context, msgs []json.RawMessage, tp string) []any {
	reqs := make([]PublishRequest, len(msgs))
	errs := make([]error, len(msgs))
	for i, raw := range msgs {
		reqs[i], errs[i] = decodeBatchMessage(raw)
		reqs[i].Traceparent = tp
	}
	return n.PublishBatch(ctx, reqs, errs)
}

// PublishBatch publishes every message of a batch whose decoding did not
// fail (errs[i] == nil; errs may be nil): each result is a PublishResult
// or {"error":...}, in the batch order. User messages without an
// idempotency key or trace context go together (publishBulk: one
// pipeline of inbox appends, one bus envelope per node). The rest (rooms,
// broadcasts, messages with an idempotency key or a traceparent, and
// every message to a user that has one of those in the batch) go through
// Publish: messages to the same target one after the other, in order;
// different targets in parallel, so that their backend round trips
// overlap (and the Redis backend pipelines them).
func (n *Node) PublishBatch(ctx context.Context, reqs []PublishRequest, errs []error) []any {
	results := make([]any, len(reqs))
	groups := map[protocol.Target][]int{}
	var order []protocol.Target
	classes := make([]class, len(reqs))
	bulk := map[protocol.Target]bool{}
	for i := range reqs {
		var err error
		if errs != nil {
			err = errs[i]
		}
		req := &reqs[i]
		if err == nil {
			n.applyNamespace(req)
			classes[i], err = req.Validate()
		}
		if err != nil {
			results[i] = map[string]protocol.ErrorBody{"error": errorBody(err)}
			continue
		}
		ok, seen := bulk[req.Target]
		if !seen {
			order = append(order, req.Target)
			ok = true
		}
		bulk[req.Target] = ok && req.Target.Type == protocol.TargetUser && req.IdempotencyKey == "" && req.Traceparent == "" && req.Except == "" && req.Key == ""
		groups[req.Target] = append(groups[req.Target], i)
	}
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	var together []int
	for _, t := range order {
		idx := groups[t]
		if bulk[t] {
			together = append(together, idx...)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		f := func() {
			defer func() { <-sem; wg.Done() }()
			for _, i := range idx {
				res, err := n.Publish(ctx, reqs[i])
				if err != nil {
					results[i] = map[string]protocol.ErrorBody{"error": errorBody(err)}
				} else {
					results[i] = res
				}
			}
		}
		if !n.goFunc(f) {
			f() // shutting down: the answers are errors, quickly
		}
	}
	if len(together) > 0 {
		slices.Sort(together) // batch order
		n.publishBulk(ctx, reqs, classes, together, results)
	}
	wg.Wait()
	return results
}

func errorBody(err error) protocol.ErrorBody {
	var ae *APIError
	if errors.As(err, &ae) {
		return protocol.ErrorBody{Code: ae.Code, Message: ae.Message}
	}
	return protocol.ErrorBody{Code: "unavailable", Message: err.Error()}
}

func (n *Node) apiJoin(w http.ResponseWriter, r *http.Request) error {
	if err := n.JoinRoom(r.Context(), r.PathValue("room"), r.PathValue("user")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (n *Node) apiLeave(w http.ResponseWriter, r *http.Request) error {
	if err := n.LeaveRoom(r.Context(), r.PathValue("room"), r.PathValue("user")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (n *Node) apiMembers(w http.ResponseWriter, r *http.Request) error {
	members, err := n.RoomMembers(r.Context(), r.PathValue("room"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"members": members})
	return nil
}

func (n *Node) apiPresence(w http.ResponseWriter, r *http.Request) error {
	conns, err := n.Presence(r.Context(), r.PathValue("user"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"online": len(conns) > 0, "connections": conns})
	return nil
}

func (n *Node) apiDisconnect(w http.ResponseWriter, r *http.Request) error {
	user := r.PathValue("user")
	if err := protocol.ValidName("user", user); err != nil {
		return badRequest("%v", err)
	}
	reason, err := readReason(r)
	if err != nil {
		return err
	}
	closed, err := n.DisconnectUser(r.Context(), user, reason)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int{"disconnected": closed})
	return nil
}

// readReason reads a disconnect's optional body {"reason":"..."}.
func readReason(r *http.Request) (string, error) {
	body, err := readBody(r)
	if err != nil {
		return "", err
	}
	var b struct {
		Reason string `json:"reason"`
	}
	if t := bytes.TrimSpace(body); len(t) > 0 {
		if t[0] != '{' || json.Unmarshal(t, &b) != nil {
			return "", badRequest("the body must be a JSON object {\"reason\":\"...\"}")
		}
	}
	return b.Reason, nil
}

func (n *Node) apiNodes(w http.ResponseWriter, r *http.Request) error {
	nodes, err := n.ListNodes(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": nodes})
	return nil
}

func (n *Node) apiDrain(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("node")
	if err := n.DrainNode(r.Context(), id); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"node": id, "status": "draining"})
	return nil
}

func (n *Node) serveReady(w http.ResponseWriter, r *http.Request) {
	if n.Ready() {
		writeJSON(w, http.StatusOK, map[string]string{"status": string(n.Status())})
		return
	}
	w.Header().Set("Retry-After", "5")
	writeError(w, http.StatusServiceUnavailable, "unavailable", n.notReadyReason())
}

func (n *Node) serveAllocate(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "cluster backend unavailable")
		return
	}
	ServeAllocation(w, &n.alloc, nodes, n.staleAfter())
}

// ServeAllocation answers /v1/allocate from a node list (shared with the
// standalone allocator) with a's choice.
func ServeAllocation(w http.ResponseWriter, a *allocator.Allocator, nodes []cluster.NodeInfo, staleAfter time.Duration) {
	choice, ok := a.Choose(nodes, time.Now(), staleAfter, nil)
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "no node available")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"node": choice.ID, "url": choice.URL})
}

package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/downstream"
	"github.com/wsgate/wsgate/protocol"
)

// Downstream (contract section 20): the sources of WSGATE_DOWNSTREAM_URL
// hand their records to handleRecord, which answers each as the server API
// answers its body (POST /api/v1/publish or /publish/batch).

// openDownstream opens every source of WSGATE_DOWNSTREAM_URL (none: nil).
func (n *Node) openDownstream() error {
	if n.cfg.DownstreamURL == "" {
		return nil
	}
	for _, raw := range downstream.SplitURLs(n.cfg.DownstreamURL) {
		src, err := downstream.Open(raw, downstream.Options{
			NodeID: n.cfg.NodeID, InFlight: n.cfg.DownstreamInFlight, Handler: n.handleRecord,
			Metrics: n.metrics, Logger: n.log,
		})
		if err != nil {
			for _, s := range n.sources {
				_ = s.Close()
			}
			return fmt.Errorf("WSGATE_DOWNSTREAM_URL: %w", err)
		}
		n.sources = append(n.sources, src)
	}
	return nil
}

// startDownstream starts consuming every source, on goroutines the node
// owns; stopDownstream ends them (records in hand get a few seconds to
// finish, the rest come again) before the node stops publishing.
func (n *Node) startDownstream() {
	if len(n.sources) == 0 {
		return
	}
	n.records.start(n)
	ctx, cancel := context.WithCancel(n.ctx)
	n.dsCancel = cancel
	for _, s := range n.sources {
		n.dsWG.Add(1)
		if !n.goFunc(func() { defer n.dsWG.Done(); s.Run(ctx) }) {
			n.dsWG.Done()
		}
	}
}

func (n *Node) stopDownstream() {
	if n.dsCancel != nil {
		n.dsCancel()
	}
	n.dsWG.Wait()
	for _, s := range n.sources {
		_ = s.Close()
	}
}

// recordDeadline bounds one try of a record, as the API bounds a request.
const recordDeadline = 4500 * time.Millisecond

// handleRecord publishes a record's value (a publish body or a batch body)
// with the record's identity as the idempotency key of every message
// without one, and tells the source what came of it.
func (n *Node) handleRecord(ctx context.Context, rec downstream.Record) downstream.Outcome {
	ctx, cancel := context.WithTimeout(ctx, recordDeadline)
	defer cancel()
	value := bytes.TrimSpace(rec.Value)
	dead := func(err error, raw []byte, index *int) downstream.Outcome {
		return downstream.Outcome{Dead: []downstream.DeadLetter{deadLetter(err, raw, rec.ID, index)}}
	}
	if len(value) > api.MaxBodyBytes {
		return dead(&api.Error{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: "record larger than 1 MiB"}, rec.Value, nil)
	}
	if !isBatchBody(value) {
		req, err := api.DecodePublish(value)
		if err != nil {
			return dead(err, rec.Value, nil)
		}
		if req.IdempotencyKey == "" {
			_, err = n.publishRecord(ctx, req, rec.Key)
		} else {
			_, err = n.Publish(ctx, req)
		}
		if err == nil {
			return downstream.Outcome{}
		}
		if retryable(err) {
			return downstream.Outcome{Retry: true, Err: err.Error()}
		}
		return dead(err, rec.Value, nil)
	}
	var b struct {
		Messages []json.RawMessage `json:"messages"`
	}
	var ok bool
	if b.Messages, ok = api.ScanBatch(value); !ok {
		if err := json.Unmarshal(value, &b); err != nil {
			return dead(api.BadRequest("invalid JSON: %v", err), rec.Value, nil)
		}
	}
	if err := api.CheckBatchSize(len(b.Messages)); err != nil {
		return dead(err, rec.Value, nil)
	}
	reqs := make([]api.PublishRequest, len(b.Messages))
	errs := make([]error, len(b.Messages))
	for i, raw := range b.Messages {
		reqs[i], errs[i] = api.DecodeBatchMessage(raw)
		if reqs[i].IdempotencyKey == "" {
			reqs[i].IdempotencyKey = rec.Key + "#" + strconv.Itoa(i)
		}
	}
	results := n.PublishBatch(ctx, reqs, errs)
	var o downstream.Outcome
	for i, r := range results {
		eb, isErr := r.(map[string]protocol.ErrorBody)
		if !isErr {
			continue
		}
		e := eb["error"]
		if e.Code == protocol.ErrUnavailable {
			// Retried whole: the published messages are answered from
			// their keys the next time.
			return downstream.Outcome{Retry: true, Err: e.Message}
		}
		o.Dead = append(o.Dead, downstream.DeadLetter{Error: downstream.ErrorBody{Code: e.Code, Message: e.Message}, Record: rawOrNull(b.Messages[i]), ID: rec.ID, Index: &i})
	}
	return o
}

// publishRecord publishes a record's message that has no idempotency key
// of its own. A reliable one (a user's inbox or a reliable room's
// history) is bound to the record's key at its append only
// (cluster.InboxAppend.Key, RoomAppend.Key), with a message id derived
// from it: a record handled again stores nothing and is sent with the seq
// and id it was stored with (a connection drops a seq it has), and it
// costs no claim of the key (ClaimKey and StoreKey: two more Redis calls
// per record, which the API needs only to answer a retry as it answered
// the first try). The key holds the message's fingerprint, so that a
// record id used again with another body (a recreated topic, within the
// key's lifetime) is a new message. The rest (realtime messages) take
// Publish's claim with the record's key.
func (n *Node) publishRecord(ctx context.Context, r api.PublishRequest, key string) (api.PublishResult, error) {
	n.applyNamespace(&r)
	if !r.Reliable || r.Target.Type == protocol.TargetBroadcast {
		r.IdempotencyKey = key
		return n.Publish(ctx, r) // validates
	}
	cl, err := validate(&r)
	if err != nil {
		return api.PublishResult{}, err
	}
	r.IdempotencyKey = key + "/" + fingerprint(&r, cl)
	r.MessageID = recordMessageID(r.IdempotencyKey)
	if r.Target.Type == protocol.TargetUser && r.Traceparent == "" && r.Except == "" && r.Key == "" {
		return n.records.publish(ctx, n, r, cl)
	}
	return n.publish(ctx, r, cl, r.MessageID)
}

// recordMessageID is the message id of a record's reliable message: "ds"
// and 24 hex digits of its key's hash.
func recordMessageID(key string) string {
	h := sha256.Sum256([]byte(key))
	return "ds" + hex.EncodeToString(h[:12])
}

// isBatchBody reports whether a value is a batch body: an object with
// "messages" and without "target".
func isBatchBody(value []byte) bool {
	if len(value) == 0 || value[0] != '{' {
		return false
	}
	var probe struct {
		Messages json.RawMessage `json:"messages"`
		Target   json.RawMessage `json:"target"`
	}
	if json.Unmarshal(value, &probe) != nil {
		return false
	}
	return probe.Messages != nil && probe.Target == nil
}

// retryable: a publish answered 503 (or failed without an API status).
func retryable(err error) bool {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Status >= 500
	}
	return true
}

func deadLetter(err error, raw []byte, id string, index *int) downstream.DeadLetter {
	eb := api.ErrorBody(err)
	return downstream.DeadLetter{Error: downstream.ErrorBody{Code: eb.Code, Message: eb.Message}, Record: rawOrNull(raw), ID: id, Index: index}
}

func rawOrNull(b []byte) json.RawMessage {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("null")
	}
	return json.RawMessage(b)
}

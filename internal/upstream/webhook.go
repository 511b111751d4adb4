package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"
)

// Webhook limits (contract section 13).
const (
	WebhookBatch      = 100              // records per POST at most
	webhookRetryFor   = 60 * time.Second // a batch is retried this long
	webhookBackoffMin = 100 * time.Millisecond
	webhookBackoffMax = 5 * time.Second
)

// webhookSink POSTs batches of records to one URL.
type webhookSink struct {
	url    string
	secret string
	hc     *http.Client
}

func openWebhook(u *url.URL, opt Options) (Sink, error) {
	hc := opt.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	return &webhookSink{url: u.String(), secret: opt.Secret, hc: hc}, nil
}

// Write posts the records in batches of at most WebhookBatch, one after
// the other; a batch answered other than 2xx (or not answered) is posted
// again with growing jittered backoff for up to 60 s, or until ctx ends.
func (s *webhookSink) Write(ctx context.Context, recs []Record) error {
	for len(recs) > 0 {
		n := min(len(recs), WebhookBatch)
		body, err := json.Marshal(struct {
			Records []Record `json:"records"`
		}{recs[:n]})
		if err != nil {
			return err
		}
		if err := s.postRetrying(ctx, body); err != nil {
			return err
		}
		recs = recs[n:]
	}
	return nil
}

// postRetrying posts one batch until accepted; every attempt carries the
// batch's one request id (a fresh timestamp each).
func (s *webhookSink) postRetrying(ctx context.Context, body []byte) error {
	id := NewRequestID()
	return retryPost(ctx, func(ctx context.Context) (int, error) {
		status, _, err := PostSigned(ctx, s.hc, s.url, s.secret, id, body)
		return status, err
	})
}

// retryPost makes a webhook request (post: its status) until it is
// answered 2xx, with growing jittered backoff, for up to 60 s or until
// ctx ends.
func retryPost(ctx context.Context, post func(context.Context) (int, error)) error {
	ctx, cancel := context.WithTimeout(ctx, webhookRetryFor)
	defer cancel()
	backoff := webhookBackoffMin
	for {
		status, err := post(ctx)
		if err == nil && status >= 200 && status <= 299 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("status %d", status)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, webhookBackoffMax)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("upstream webhook: %w (last: %v)", ctx.Err(), err)
		}
	}
}

func (s *webhookSink) Close() error {
	s.hc.CloseIdleConnections()
	return nil
}

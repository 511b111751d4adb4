package upstream

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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

// SignatureHeader carries the HMAC-SHA256 of a webhook or rpc body.
const SignatureHeader = "X-Wsgate-Signature"

// Sign returns the X-Wsgate-Signature value of body: "sha256=<hex>".
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

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

func (s *webhookSink) postRetrying(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, webhookRetryFor)
	defer cancel()
	backoff := webhookBackoffMin
	for {
		status, _, err := PostSigned(ctx, s.hc, s.url, s.secret, body)
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

// PostSigned POSTs a JSON body with its signature header (none when
// secret is empty) and returns the answer's status and body (at most
// 1 MiB).
func PostSigned(ctx context.Context, hc *http.Client, url, secret string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set(SignatureHeader, Sign(secret, body))
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

func (s *webhookSink) Close() error {
	s.hc.CloseIdleConnections()
	return nil
}

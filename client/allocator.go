package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// allocation is the allocator's answer (contract §6).
type allocation struct {
	Node string `json:"node"`
	URL  string `json:"url"`
}

// newAllocatorClient makes the HTTP client of allocator calls. Keep-alives
// are off: it is called once per reconnect, and idle connections would
// outlive Close.
func newAllocatorClient(cfg Config) *http.Client {
	return &http.Client{
		Timeout: cfg.HandshakeTimeout,
		Transport: &http.Transport{
			Proxy:             http.ProxyFromEnvironment,
			DialContext:       netDialer(cfg.LocalAddr).DialContext,
			DisableKeepAlives: true,
		},
	}
}

// allocate asks GET {Allocator}/v1/allocate?user=ID for a node URL. A
// refusal (503 when no node is available) is an *AllocatorError.
func (c *Client) allocate(ctx context.Context) (allocation, error) {
	u := strings.TrimSuffix(c.cfg.Allocator, "/") + "/v1/allocate"
	if c.cfg.User != "" {
		u += "?user=" + url.QueryEscape(c.cfg.User)
	}
	var a allocation
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return a, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return a, fmt.Errorf("wsgate: allocator: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return a, fmt.Errorf("wsgate: allocator: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		e := &AllocatorError{HandshakeError{
			Status:     resp.StatusCode,
			RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		}}
		e.Code, e.Message = parseErrorBody(body)
		return a, e
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return a, fmt.Errorf("wsgate: allocator: bad answer: %w", err)
	}
	if err := checkWSURL(a.URL); err != nil {
		return a, fmt.Errorf("wsgate: allocator: bad url: %w", err)
	}
	return a, nil
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/protocol"
)

// dialTarget picks the URL of a dial: a redirect received, else the
// allocator's answer (falling back to --url when it fails), else the
// slot's --url, round-robin over the list.
func (s *slot) dialTarget(ctx context.Context) (string, error) {
	r := s.r
	if s.redirect != "" {
		u := s.redirect
		s.redirect = ""
		return u, nil
	}
	if r.cfg.Allocator != "" {
		u, err := r.allocate(ctx, s.user)
		if err == nil {
			return u, nil
		}
		if len(r.cfg.URLs) == 0 {
			return "", err
		}
	}
	return r.cfg.URLs[s.n%len(r.cfg.URLs)], nil
}

// allocate asks the allocator for a node URL (contract §6).
func (r *runner) allocate(ctx context.Context, user string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cfg.Allocator+"/v1/allocate?user="+url.QueryEscape(user), nil)
	if err != nil {
		return "", err
	}
	resp, err := r.apiHTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("allocator: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return "", &client.HandshakeError{Status: resp.StatusCode, Code: "allocator"}
	}
	var a struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(body, &a); err != nil || a.URL == "" {
		return "", fmt.Errorf("allocator: bad answer %q", body)
	}
	return a.URL, nil
}

// token mints an HS256 client token for user, valid for the whole run.
func (r *runner) token(user string) (string, error) {
	now := time.Now()
	g := auth.Grant{Subject: user, IssuedAt: now, ExpiresAt: now.Add(r.cfg.Duration + r.cfg.Settle + time.Hour)}
	if r.cfg.Join != "" {
		g.Rooms = []string{r.cfg.Join}
	}
	return auth.SignHS256([]byte(r.cfg.JWTSecret), g)
}

// dial opens one connection for the slot and records its connect time
// (from the start of the attempt, allocator call included, to the
// welcome) or the reason of its failure.
func (s *slot) dial(ctx context.Context) (*wsConn, error) {
	r := s.r
	select {
	case r.dialSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.dialSem }()

	start := time.Now()
	r.dials.Add(1)
	c, err := s.dialOnce(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.dialFails.Add(1)
			r.countFailure(failureReason(err), err)
		}
		return nil, err
	}
	r.connLat.Record(time.Since(start))
	r.connects.Add(1)
	return c, nil
}

func (s *slot) dialOnce(ctx context.Context) (*wsConn, error) {
	r := s.r
	target, err := s.dialTarget(ctx)
	if err != nil {
		return nil, err
	}
	opts := client.DialOptions{
		Format:           r.cfg.Format,
		LocalAddr:        r.src.pick(),
		HandshakeTimeout: client.DefaultHandshakeTimeout,
		Compression:      r.cfg.Compress,
		TLSConfig:        r.cfg.TLS,
	}
	if r.cfg.JWTSecret != "" {
		if opts.Token, err = r.token(s.user); err != nil {
			return nil, err
		}
	} else {
		opts.User = s.user
	}
	if s.tick != nil {
		opts.Control = slowSocket
	}
	if r.cfg.Reliable {
		if seq := s.lastSeq.Load(); seq > 0 {
			opts.Since = &seq
		}
	}
	if r.cfg.Transport != client.WebSocket {
		sc, _, err := client.DialStream(ctx, target, r.cfg.Transport, opts)
		if err != nil {
			return nil, err
		}
		var early []earlyFrame
		if r.cfg.Join != "" {
			if early, err = s.join(ctx, sc); err != nil {
				sc.Close()
				return nil, err
			}
		}
		c := &wsConn{s: s, cc: sc, format: protocol.JSON}
		s.handleEarly(c, early)
		return c, nil
	}
	cc, w, err := client.Dial(ctx, target, opts)
	if err != nil {
		return nil, err
	}
	var early []earlyFrame
	if r.cfg.Join != "" {
		if early, err = s.join(ctx, cc); err != nil {
			cc.Close()
			return nil, err
		}
	}
	var c *wsConn
	if r.poller == nil || s.tick != nil || !strings.HasPrefix(target, "ws:") {
		c = &wsConn{s: s, cc: cc, format: cc.Format()}
	} else if c, err = s.newLoopConn(cc, w); err != nil {
		return nil, err
	}
	s.handleEarly(c, early)
	return c, nil
}

// failureReason sorts dial errors into a few stable categories.
func failureReason(err error) string {
	var he *client.HandshakeError
	var ce *client.CloseError
	var ne net.Error
	var je *JoinError
	switch {
	case errors.As(err, &je):
		return "join refused " + je.Code
	case errors.As(err, &he):
		if he.Code != "" {
			return fmt.Sprintf("HTTP %d %s", he.Status, he.Code)
		}
		return fmt.Sprintf("HTTP %d", he.Status)
	case errors.As(err, &ce):
		return fmt.Sprintf("closed %d before welcome", ce.Code)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no local port (EADDRNOTAVAIL): add --source-ips"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "too many open files (ulimit -n)"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "other"
}

// backoffDelay is the client's reconnect delay (client.Config defaults).
func backoffDelay(attempt int) time.Duration {
	return client.Backoff(attempt, client.DefaultMinBackoff, client.DefaultMaxBackoff)
}

// quickDelay is the client's delay for "reconnect now" (close 4001):
// up to 250 ms of jitter.
func quickDelay() time.Duration { return time.Duration(rand.Int64N(int64(250*time.Millisecond) + 1)) }

// sleepCtx waits d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

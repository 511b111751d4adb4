package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// Defaults of KeySetConfig (contract section 15).
const (
	DefaultKeySetInterval    = 5 * time.Minute
	DefaultKeySetMinInterval = 30 * time.Second
	keySetFetchTimeout       = 10 * time.Second
	maxKeySetBytes           = 1 << 20
)

// KeySetConfig configures a KeySet.
type KeySetConfig struct {
	// URL is the JWKS endpoint (WSGATE_JWKS_URL), http or https.
	URL string
	// Interval between two refreshes (default 5 minutes).
	Interval time.Duration
	// MinInterval is the least time between two fetches that a token
	// naming an unknown kid may cause (default 30 s).
	MinInterval time.Duration
	// Client fetches the set (default: an http.Client with a 10 s timeout).
	Client *http.Client
	// Logger gets one line per failed fetch and per changed set; nil = discard.
	Logger *slog.Logger
	// OnFetch, when set, is called after every fetch with its result
	// ("ok" or "error"), for a metric.
	OnFetch func(result string)
}

// KeySet holds the public keys of a JWKS endpoint by kid. Run fetches it
// at start and every Interval; Refresh fetches it at once, at most every
// MinInterval. While the endpoint cannot be fetched (down, an error
// status, a set without a usable key) the last good set stays in use.
// Safe for concurrent use.
type KeySet struct {
	cfg  KeySetConfig
	keys atomic.Pointer[map[string]setKey] // nil until the first good fetch

	mu       sync.Mutex
	lastTry  time.Time     // start of the last fetch
	inflight chan struct{} // closed when the running fetch ends; nil when none
	lastOK   bool          // result of the last finished fetch
}

// setKey is one usable key of the set.
type setKey struct {
	key any    // *rsa.PublicKey, *ecdsa.PublicKey (P-256) or ed25519.PublicKey
	alg string // the JWK's alg, "" when it names none
}

// NewKeySet checks the configuration; nothing is fetched before Run or
// Refresh.
func NewKeySet(cfg KeySetConfig) (*KeySet, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("jwks url: want an http:// or https:// URL, got %q", cfg.URL)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultKeySetInterval
	}
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = DefaultKeySetMinInterval
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: keySetFetchTimeout}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &KeySet{cfg: cfg}, nil
}

// Run fetches the set at once (unless a fetch has already loaded it) and
// then every Interval until ctx ends.
// Until the first good fetch it retries sooner: after 1 s, doubling up to
// MinInterval.
func (s *KeySet) Run(ctx context.Context) {
	retry := time.Second
	for first := true; ; first = false {
		wait := s.cfg.Interval
		if first && s.Loaded() {
			// Fetched already (the node's start waits for one fetch).
		} else if !s.fetchShared(ctx) && !s.Loaded() {
			wait, retry = retry, min(2*retry, s.cfg.MinInterval)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Loaded reports whether a set has been fetched.
func (s *KeySet) Loaded() bool { return s.keys.Load() != nil }

// Refresh fetches the set now unless a fetch began less than MinInterval
// ago; it joins a fetch already running. It reports whether a fetch
// finished successfully meanwhile, that is whether a retry of the token
// that named an unknown kid can succeed. A nil KeySet never fetches.
func (s *KeySet) Refresh(ctx context.Context) bool {
	return s != nil && s.RefreshDue() && s.fetchShared(ctx)
}

// RefreshDue reports whether Refresh would fetch (or join a fetch) now
// (false for a nil KeySet).
func (s *KeySet) RefreshDue() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflight != nil || time.Since(s.lastTry) >= s.cfg.MinInterval
}

// fetchShared runs one fetch, or waits for the one already running.
func (s *KeySet) fetchShared(ctx context.Context) bool {
	s.mu.Lock()
	if ch := s.inflight; ch != nil {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.lastOK
	}
	ch := make(chan struct{})
	s.inflight, s.lastTry = ch, time.Now()
	s.mu.Unlock()

	err := s.fetch(ctx)
	result := "ok"
	if err != nil {
		result = "error"
		s.cfg.Logger.Warn("cannot fetch the JWKS; keeping the last good key set", "url", s.cfg.URL, "err", err, "loaded", s.Loaded())
	}
	if s.cfg.OnFetch != nil {
		s.cfg.OnFetch(result)
	}
	s.mu.Lock()
	s.inflight, s.lastOK = nil, err == nil
	s.mu.Unlock()
	close(ch)
	return err == nil
}

func (s *KeySet) fetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, keySetFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxKeySetBytes+1))
	if err != nil {
		return err
	}
	if len(body) > maxKeySetBytes {
		return fmt.Errorf("key set larger than %d bytes", maxKeySetBytes)
	}
	keys, skipped, err := parseKeySet(body)
	if err != nil {
		return err
	}
	old := s.keys.Swap(&keys)
	if old == nil || !sameKids(*old, keys) {
		s.cfg.Logger.Info("JWKS key set loaded", "url", s.cfg.URL, "keys", len(keys), "skipped", skipped)
	}
	return nil
}

func sameKids(a, b map[string]setKey) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// parseKeySet reads a JWKS document (RFC 7517 5). Keys that cannot serve
// here (no kid, use other than sig, private halves, other types or
// curves, RSA under 2048 bits) are skipped and counted; a set left
// without any usable key is an error, so a broken endpoint never empties
// the keys in use.
func parseKeySet(body []byte) (map[string]setKey, int, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, 0, fmt.Errorf("not a JWKS document: %w", err)
	}
	keys := make(map[string]setKey, len(doc.Keys))
	skipped := 0
	for _, raw := range doc.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil || k.KeyID == "" || (k.Use != "" && k.Use != "sig") || !k.IsPublic() {
			skipped++
			continue
		}
		if _, dup := keys[k.KeyID]; dup {
			return nil, 0, fmt.Errorf("kid %q appears twice", k.KeyID)
		}
		switch pk := k.Key.(type) {
		case *rsa.PublicKey:
			if pk.N.BitLen() < minRSABits {
				skipped++
				continue
			}
		case *ecdsa.PublicKey:
			if pk.Curve != elliptic.P256() {
				skipped++
				continue
			}
		case ed25519.PublicKey:
		default:
			skipped++
			continue
		}
		keys[k.KeyID] = setKey{key: k.Key, alg: k.Algorithm}
	}
	if len(keys) == 0 {
		return nil, skipped, errors.New("no usable key in the set")
	}
	return keys, skipped, nil
}

// lookup finds the key of kid: ErrKeysUnavailable before the first good
// fetch, ErrTokenKid when the set lacks it.
func (s *KeySet) lookup(kid string) (setKey, error) {
	m := s.keys.Load()
	if m == nil {
		return setKey{}, ErrKeysUnavailable
	}
	k, ok := (*m)[kid]
	if !ok {
		return setKey{}, ErrTokenKid
	}
	return k, nil
}

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/gobwas/ws"
	"github.com/golang-jwt/jwt/v5"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// TestTokenRefreshAndKeyRotationOnTheBinary runs the real binary against
// a real JWKS endpoint: a Go client with short-lived tokens refreshes in
// band on every expiring notice and outlives its first token; the key set
// rotates under it (the new kid is fetched at once, without a restart) and
// the removed key is refused for new connections.
func TestTokenRefreshAndKeyRotationOnTheBinary(t *testing.T) {
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var (
		mu      sync.Mutex
		served  = []jose.JSONWebKey{{Key: &k1.PublicKey, KeyID: "k1", Use: "sig"}}
		signer  = k1
		kid     = "k1"
		fetched time.Time // first fetch
	)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fetched.IsZero() {
			fetched = time.Now()
		}
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: served})
	}))
	defer jwks.Close()
	mint := func(user string, ttl time.Duration) string {
		mu.Lock()
		key, id := signer, kid
		mu.Unlock()
		tk := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": user, "exp": time.Now().Add(ttl).Unix()})
		tk.Header["kid"] = id
		s, err := tk.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	srv := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, srv.URL(), map[string]string{"WSGATE_JWKS_URL": jwks.URL, "WSGATE_JWT_MAX_LIFETIME": "10m"})
	g := c.startNode("tok1", nil)

	// Tokens of 32 s: the expiring notice comes 2 s after each token.
	const ttl = 32 * time.Second
	cl, err := client.New(client.Config{
		URL:   g.WS(),
		Token: func(context.Context) (string, error) { return mint("rita", ttl), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cl.Run(context.Background()) }()
	defer func() { cl.Close(); <-done }()
	firstExp := time.Now().Add(ttl)
	eventually(t, 20*time.Second, "two in-band refreshes", func() (bool, string) {
		st := cl.Stats()
		return st.Refreshes >= 2, fmt.Sprintf("%+v", st)
	})

	// Rotate once a refetch on an unknown kid is allowed (30 s after the
	// first fetch): k1 leaves the set, k2 signs from now on.
	mu.Lock()
	first := fetched
	mu.Unlock()
	eventually(t, 40*time.Second, "30 s since the first JWKS fetch", func() (bool, string) {
		return time.Since(first) > 31*time.Second, ""
	})
	before := cl.Stats().Refreshes
	mu.Lock()
	served = []jose.JSONWebKey{{Key: &k2.PublicKey, KeyID: "k2", Use: "sig"}}
	signer, kid = k2, "k2"
	mu.Unlock()
	eventually(t, 20*time.Second, "a refresh with the new kid", func() (bool, string) {
		st := cl.Stats()
		return st.Refreshes >= before+2, fmt.Sprintf("%+v", st)
	})
	if time.Now().Before(firstExp) {
		t.Fatal("the first token has not expired yet")
	}
	st := cl.Stats()
	if st.Dials != 1 || st.Connects != 1 || st.Reconnects != 0 {
		t.Fatalf("stats %+v: one connection must carry every refresh past the first exp", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cl.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if v := g.metric(t, `wsgate_token_refresh_total{result="ok"}`); v < float64(st.Refreshes) {
		t.Fatalf("wsgate_token_refresh_total{result=\"ok\"} = %v, client counted %d", v, st.Refreshes)
	}
	if v := g.metric(t, `wsgate_jwks_fetch_total{result="ok"}`); v < 2 {
		t.Fatalf("wsgate_jwks_fetch_total{result=\"ok\"} = %v, want >= 2 (start and the unknown kid)", v)
	}

	// The removed key: a new connection with a k1 token is refused.
	old := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "sam", "exp": time.Now().Add(time.Minute).Unix()})
	old.Header["kid"] = "k1"
	oldTok, _ := old.SignedString(k1)
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer " + oldTok}}), Timeout: 5 * time.Second}
	var se ws.StatusError
	if _, _, _, err := d.Dial(ctx, g.WS()); !errors.As(err, &se) || se != http.StatusUnauthorized {
		t.Fatalf("handshake with the removed key k1: %v, want 401", err)
	}
	// Beyond WSGATE_JWT_MAX_LIFETIME.
	d.Header = ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer " + mint("sam", time.Hour)}})
	if _, _, _, err := d.Dial(ctx, g.WS()); !errors.As(err, &se) || se != http.StatusUnauthorized {
		t.Fatalf("handshake with a token of 1 h (max lifetime 10 m): %v, want 401", err)
	}
}

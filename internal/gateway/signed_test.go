package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/upstream"
)

// v2Receiver is a real HTTP server that checks each request's
// X-Wsgate-Signature-V2 as docs/upstream.md tells receivers to, keeps
// the request ids, and answers with answer.
type v2Receiver struct {
	*httptest.Server
	mu   sync.Mutex
	ids  []string
	errs []error
}

func newV2Receiver(t *testing.T, answer string) *v2Receiver {
	s := &v2Receiver{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, err := upstream.VerifySignatureV2(hookSecret, r.Header, body, time.Now(), 5*time.Minute)
		s.mu.Lock()
		s.ids, s.errs = append(s.ids, id), append(s.errs, err)
		s.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.Write([]byte(answer))
	}))
	t.Cleanup(s.Close)
	return s
}

// check wants n requests, each rightly signed, with n distinct ids.
func (s *v2Receiver) check(t *testing.T, what string, n int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	distinct := map[string]bool{}
	for i, err := range s.errs {
		if err != nil {
			t.Errorf("%s request %d: %v", what, i, err)
		}
		distinct[s.ids[i]] = true
	}
	if len(s.ids) != n || len(distinct) != n {
		t.Errorf("%s: %d requests with %d distinct ids %q, want %d and %d", what, len(s.ids), len(distinct), s.ids, n, n)
	}
}

// RPC calls carry X-Wsgate-Signature-V2 with a fresh request id each.
func TestRPCSignatureV2(t *testing.T) {
	rcv := newV2Receiver(t, `{"result":1}`)
	n := startNode(t, func(c *config.Gateway) { c.RPCURL, c.UpstreamSecret = rcv.URL, hookSecret })
	c := n.connect(t, "ivy", "")
	for _, id := range []string{"1", "2"} {
		c.send(`{"type":"rpc","id":"` + id + `","method":"m","data":{}}`)
		if f := c.replyTo(id, 5*time.Second); f["ok"] != true {
			t.Fatalf("rpc %s: %v", id, f)
		}
	}
	rcv.check(t, "rpc", 2)
}

// Connect-proxy requests carry X-Wsgate-Signature-V2 with a fresh
// request id each.
func TestConnectProxySignatureV2(t *testing.T) {
	rcv := newV2Receiver(t, `{"user":"carl"}`)
	n := startNode(t, func(c *config.Gateway) { c.JWTSecret, c.ConnectURL, c.UpstreamSecret = "", rcv.URL, hookSecret })
	for range 2 {
		if resp, _ := cookieHandshake(t, n, "", "Cookie: session=good\r\n"); resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("handshake: %d, want 101", resp.StatusCode)
		}
	}
	rcv.check(t, "connect proxy", 2)
}

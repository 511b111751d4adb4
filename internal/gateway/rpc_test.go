package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/upstream"
)

// rpcEndpoint answers rpc calls by method: "echo" returns the request,
// "fail" an error, "hang" nothing until the test ends.
func rpcEndpoint(t *testing.T) *httptest.Server {
	stop := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get(upstream.SignatureHeader) != upstream.Sign(hookSecret, body) {
			t.Errorf("rpc: bad signature")
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var req rpcRequest
		if err := json.Unmarshal(body, &req); err != nil {
			t.Errorf("rpc body %s: %v", body, err)
		}
		switch req.Method {
		case "echo":
			json.NewEncoder(w).Encode(map[string]any{"result": req})
		case "fail":
			w.WriteHeader(http.StatusUnprocessableEntity)
			w.Write([]byte(`{"error":{"code":"not_found","message":"no such room"}}`))
		case "hang":
			select {
			case <-stop:
			case <-r.Context().Done():
			}
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(stop) })
	return s
}

func TestRPC(t *testing.T) {
	ep := rpcEndpoint(t)
	n := startNode(t, func(c *config.Gateway) { c.RPCURL, c.UpstreamSecret = ep.URL, hookSecret })
	c := n.connectTok(t, "ivy", map[string]any{"info": map[string]any{"plan": "pro"}})

	c.send(`{"type":"rpc","id":"1","method":"echo","data":{"q":[1,2]}}`)
	f := c.replyTo("1", 5*time.Second)
	res, _ := f["result"].(map[string]any)
	if f["ok"] != true || res["user"] != "ivy" || res["method"] != "echo" || res["device"] != "default" || res["conn_id"] == "" {
		t.Fatalf("echo reply %v", f)
	}
	if d, _ := json.Marshal(res["data"]); string(d) != `{"q":[1,2]}` {
		t.Fatalf("data passed as %s", d)
	}
	if i, _ := json.Marshal(res["info"]); string(i) != `{"plan":"pro"}` {
		t.Fatalf("info passed as %s", i)
	}

	c.send(`{"type":"rpc","id":"2","method":"fail"}`)
	if f := c.replyTo("2", 5*time.Second); f["ok"] != false || errCode(f) != "not_found" || f["error"].(map[string]any)["message"] != "no such room" {
		t.Fatalf("error reply %v, want the endpoint's error", f)
	}

	c.send(`{"type":"rpc","id":"3","method":"broken"}`)
	if f := c.replyTo("3", 5*time.Second); f["ok"] != false || errCode(f) != "unavailable" {
		t.Fatalf("reply to a 500 without error body: %v, want unavailable", f)
	}

	c.send(`{"type":"rpc","id":"4","method":"hang"}`)
	c.send(`{"type":"rpc","id":"5","method":"echo"}`) // not stuck behind the hanging call
	if f := c.replyTo("5", 5*time.Second); f["ok"] != true {
		t.Fatalf("reply %v", f)
	}
	if f := c.replyTo("4", 10*time.Second); f["ok"] != false || errCode(f) != "unavailable" {
		t.Fatalf("hanging endpoint: %v, want unavailable", f)
	}
	for result, want := range map[string]float64{"ok": 2, "error": 1, "unavailable": 2} {
		if got := counterValue(t, n, "wsgate_rpc_total", result); got != want {
			t.Errorf("wsgate_rpc_total{result=%s} = %v, want %v", result, got, want)
		}
	}
}

func TestRPCBounds(t *testing.T) {
	ep := rpcEndpoint(t)
	n := startNode(t, func(c *config.Gateway) { c.RPCURL, c.UpstreamSecret = ep.URL, hookSecret })
	c := n.connect(t, "jay", "")
	for i := range maxRPCPerConn + 1 {
		c.send(map[string]any{"type": "rpc", "id": string(rune('a' + i)), "method": "hang"})
	}
	// The call past the bound is answered at once, before any hanging one.
	if f := c.replyTo(string(rune('a'+maxRPCPerConn)), 3*time.Second); f["ok"] != false || errCode(f) != "unavailable" {
		t.Fatalf("call past the per-connection bound: %v", f)
	}
	n2 := startNode(t, nil)
	c2 := n2.connect(t, "kim", "")
	c2.send(`{"type":"rpc","id":"x","method":"echo"}`)
	if f := c2.replyTo("x", 5*time.Second); f["ok"] != false || errCode(f) != "forbidden" {
		t.Fatalf("rpc without WSGATE_RPC_URL: %v, want forbidden", f)
	}
}

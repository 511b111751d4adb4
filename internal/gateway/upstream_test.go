package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/upstream"
)

const hookSecret = "hook-secret"

// hook is a real webhook endpoint: it checks the signature, keeps the
// records it accepted, and fails (500) or holds requests on demand.
type hook struct {
	*httptest.Server
	mu      sync.Mutex
	recs    []upstream.Record
	failing atomic.Bool
	delay   atomic.Int64  // nanoseconds each request takes before its answer
	hold    chan struct{} // non-nil: requests wait until it is closed
	arrived chan struct{} // one value per request that reached the handler
}

func newHook(t *testing.T) *hook {
	h := &hook{arrived: make(chan struct{}, 1024)}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get(upstream.SignatureHeader) != upstream.Sign(hookSecret, body) {
			t.Errorf("webhook: bad signature %q", r.Header.Get(upstream.SignatureHeader))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h.arrived <- struct{}{}
		h.mu.Lock()
		hold := h.hold
		h.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		if d := time.Duration(h.delay.Load()); d > 0 {
			select {
			case <-time.After(d): // a slow sink, not a synchronisation
			case <-r.Context().Done():
				return
			}
		}
		if h.failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var b struct{ Records []upstream.Record }
		if err := json.Unmarshal(body, &b); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		h.mu.Lock()
		h.recs = append(h.recs, b.Records...)
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hook) records() []upstream.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]upstream.Record(nil), h.recs...)
}

func (h *hook) holdRequests() (release func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	h.hold = ch
	h.mu.Unlock()
	return sync.OnceFunc(func() {
		h.mu.Lock()
		h.hold = nil
		h.mu.Unlock()
		close(ch)
	})
}

func withHook(h *hook) func(*config.Gateway) {
	return func(c *config.Gateway) { c.UpstreamURL, c.UpstreamSecret = h.URL+"/records", hookSecret }
}

// connectTok connects with a token carrying extra claims.
func (n *testNode) connectTok(t *testing.T, user string, extra map[string]any) *wsClient {
	t.Helper()
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, user, extra)}}, true)
	if w := c.next(5 * time.Second); w["type"] != "welcome" {
		t.Fatalf("first frame %v", w)
	}
	return c
}

// replyTo waits for the reply to id.
func (c *wsClient) replyTo(id string, d time.Duration) map[string]any {
	c.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case f := <-c.frames:
			if f["type"] == "reply" && f["id"] == id {
				return f
			}
		case <-deadline:
			c.t.Fatalf("no reply to %q within %v", id, d)
		}
	}
}

func errCode(f map[string]any) string {
	e, _ := f["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func TestSendAcceptedOnlyAfterTheSink(t *testing.T) {
	h := newHook(t)
	n := startNode(t, withHook(h))
	c := n.connectTok(t, "alice", map[string]any{"info": map[string]any{"name": "Alice"}})
	release := h.holdRequests()
	defer release()
	c.send(`{"type":"send","id":"m1","event":"chat","data":{"text":"hi"}}`)
	<-h.arrived // the record is at the sink, not accepted yet
	select {
	case f := <-c.frames:
		t.Fatalf("frame %v before the sink accepted the record", f)
	default:
	}
	release()
	if f := c.replyTo("m1", 5*time.Second); f["ok"] != true {
		t.Fatalf("reply %v, want ok", f)
	}
	recs := h.records()
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	if r.Type != "message" || r.User != "alice" || r.ClientMsgID != "m1" || r.Event != "chat" || string(r.Data) != `{"text":"hi"}` ||
		string(r.Info) != `{"name":"Alice"}` || r.Device != "default" || r.Node != "t1" || r.ConnID == "" || r.ID == "" || r.TS == 0 {
		t.Fatalf("record %+v", r)
	}
}

func TestSendUnavailableThenRetriedOnce(t *testing.T) {
	h := newHook(t)
	n := startNode(t, withHook(h))
	c := n.connect(t, "bob", "")
	h.failing.Store(true)
	c.send(`{"type":"send","id":"x1","event":"chat","data":1}`)
	if f := c.replyTo("x1", 10*time.Second); f["ok"] != false || errCode(f) != "unavailable" {
		t.Fatalf("reply %v while the sink fails, want unavailable", f)
	}
	h.failing.Store(false)
	for i := range 3 { // the retry, then two more after a lost reply
		c.send(`{"type":"send","id":"x1","event":"chat","data":1}`)
		if f := c.replyTo("x1", 10*time.Second); f["ok"] != true {
			t.Fatalf("retry %d: reply %v, want ok", i, f)
		}
	}
	if recs := h.records(); len(recs) != 1 || recs[0].ClientMsgID != "x1" {
		t.Fatalf("records %+v, want exactly one for x1", recs)
	}
	if got := counterValue(t, n, "wsgate_upstream_records_total", "message"); got != 1 {
		t.Fatalf("wsgate_upstream_records_total{type=message} = %v, want 1", got)
	}
	if got := counterValue(t, n, "wsgate_upstream_errors_total", ""); got < 1 {
		t.Fatalf("wsgate_upstream_errors_total = %v, want >= 1", got)
	}
}

// The contract's 5 s run from a send's arrival: a send queued behind
// slow (but successful) sends of its connection is answered unavailable
// when its 5 s are spent, not after the sends before it plus 5 s more.
func TestSendQueuedBehindSlowSendsIsAnsweredWithinItsDeadline(t *testing.T) {
	h := newHook(t)
	h.delay.Store(int64(2 * time.Second))
	n := startNode(t, withHook(h))
	c := n.connect(t, "sam", "")
	for i := range 4 {
		c.send(fmt.Sprintf(`{"type":"send","id":"q%d","event":"chat","data":%d}`, i, i))
	}
	got := map[string]map[string]any{}
	for range 4 {
		f := c.expect("reply")
		got[f["id"].(string)] = f
	}
	// q0 is accepted after 2 s and q1 after 4 s; q2 would be after 6 s.
	for id, want := range map[string]bool{"q0": true, "q1": true, "q2": false, "q3": false} {
		if f := got[id]; (f["ok"] == true) != want || (!want && errCode(f) != "unavailable") {
			t.Errorf("reply to %s: %v, want ok %v (unavailable otherwise)", id, f, want)
		}
	}
}

func TestSendOrderPerConnection(t *testing.T) {
	h := newHook(t)
	n := startNode(t, withHook(h))
	c := n.connect(t, "carol", "")
	const total = 40
	for i := range total {
		c.send(fmt.Sprintf(`{"type":"send","id":"o%d","event":"chat","data":%d}`, i, i))
	}
	for range total { // replies in any order: the records' order is the point
		if f := c.expect("reply"); f["ok"] != true {
			t.Fatalf("reply %v", f)
		}
	}
	recs := h.records()
	if len(recs) != total {
		t.Fatalf("%d records, want %d", len(recs), total)
	}
	ids := map[string]bool{}
	for i, r := range recs {
		if r.ClientMsgID != fmt.Sprintf("o%d", i) {
			t.Fatalf("record %d is %s: not in frame order", i, r.ClientMsgID)
		}
		ids[r.ID] = true
	}
	if len(ids) != total {
		t.Fatalf("%d distinct record ids for %d records", len(ids), total)
	}
}

func TestSendRefused(t *testing.T) {
	t.Run("no upstream", func(t *testing.T) {
		n := startNode(t, nil)
		c := n.connect(t, "dave", "")
		c.send(`{"type":"send","id":"a","event":"chat"}`)
		if f := c.replyTo("a", 5*time.Second); f["ok"] != false || errCode(f) != "forbidden" {
			t.Fatalf("reply %v, want forbidden", f)
		}
	})
	t.Run("send claim", func(t *testing.T) {
		h := newHook(t)
		n := startNode(t, withHook(h))
		c := n.connectTok(t, "erin", map[string]any{"send": []string{"chat.*"}})
		c.send(`{"type":"send","id":"a","event":"admin.delete"}`)
		if f := c.replyTo("a", 5*time.Second); f["ok"] != false || errCode(f) != "forbidden" {
			t.Fatalf("reply %v, want forbidden", f)
		}
		c.send(`{"type":"send","id":"b","event":"chat.room"}`)
		if f := c.replyTo("b", 5*time.Second); f["ok"] != true {
			t.Fatalf("reply %v, want ok", f)
		}
		if recs := h.records(); len(recs) != 1 || recs[0].ClientMsgID != "b" {
			t.Fatalf("records %+v, want only b", recs)
		}
	})
	t.Run("no id", func(t *testing.T) {
		h := newHook(t)
		n := startNode(t, withHook(h))
		c := n.connect(t, "fay", "")
		c.send(`{"type":"send","event":"chat"}`)
		if f := c.expect("error"); f["code"] != "bad_frame" {
			t.Fatalf("error %v, want bad_frame", f)
		}
		c.send(`{"type":"send","id":"ok","event":"chat"}`) // the node still serves
		if f := c.replyTo("ok", 5*time.Second); f["ok"] != true {
			t.Fatalf("reply %v", f)
		}
	})
}

// TestSendRetryOnAnotherNode: the accepted ids are kept in the cluster
// backend, so a retry through another node is answered ok and not
// forwarded; a retry while the first is in flight waits for its outcome.
func TestSendRetryOnAnotherNode(t *testing.T) {
	h := newHook(t)
	backend := cluster.NewMemory()
	a := startNodeWith(t, backend, withHook(h))
	b := startNodeWith(t, backend, func(c *config.Gateway) { withHook(h)(c); c.NodeID = "t2" })
	ca, cb := a.connect(t, "gus", ""), b.connect(t, "gus", "")

	release := h.holdRequests()
	defer release()
	ca.send(`{"type":"send","id":"r1","event":"chat"}`)
	<-h.arrived
	cb.send(`{"type":"send","id":"r1","event":"chat"}`)
	release()
	if f := ca.replyTo("r1", 5*time.Second); f["ok"] != true {
		t.Fatalf("first: %v", f)
	}
	if f := cb.replyTo("r1", 10*time.Second); f["ok"] != true {
		t.Fatalf("retry while in flight: %v, want the first one's ok", f)
	}
	cb.send(`{"type":"send","id":"r1","event":"chat"}`)
	if f := cb.replyTo("r1", 5*time.Second); f["ok"] != true {
		t.Fatalf("retry on the other node: %v, want ok", f)
	}
	// Another user's same id is a different message.
	cc := b.connect(t, "hal", "")
	cc.send(`{"type":"send","id":"r1","event":"chat"}`)
	if f := cc.replyTo("r1", 5*time.Second); f["ok"] != true {
		t.Fatalf("other user: %v", f)
	}
	recs := h.records()
	if len(recs) != 2 || recs[0].User != "gus" || recs[1].User != "hal" {
		t.Fatalf("records %+v, want one for gus and one for hal", recs)
	}
}

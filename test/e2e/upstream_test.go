package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// upstreamStream returns every record of the sink stream in stream order
// (XRANGE; the sink suite in internal/upstream reads through consumer
// groups).
func upstreamStream(t *testing.T, c *redis.Client, stream string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs, err := c.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", stream, err)
	}
	out := make([]map[string]any, 0, len(msgs))
	for _, m := range msgs {
		var r map[string]any
		if err := json.Unmarshal([]byte(m.Values["record"].(string)), &r); err != nil {
			t.Fatalf("entry %s: %v", m.ID, err)
		}
		out = append(out, r)
	}
	return out
}

func sendFrame(id, event string, data string) protocol.ClientFrame {
	return protocol.ClientFrame{Type: protocol.TypeSend, ID: id, Event: event, Data: json.RawMessage(data)}
}

// writeSend writes a send frame with the given id (probe.request picks
// its own ids) and returns its reply.
func (p *probe) writeSend(id, event, data string) *protocol.ServerFrame {
	p.t.Helper()
	f := sendFrame(id, event, data)
	if err := p.conn.WriteFrame(&f); err != nil {
		p.t.Fatalf("write send: %v", err)
	}
	return p.replyTo(id, 15*time.Second)
}

func (p *probe) replyTo(id string, d time.Duration) *protocol.ServerFrame {
	p.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case r := <-p.replies:
			if r.ID == id {
				return r
			}
		case <-deadline:
			p.t.Fatalf("probe %s: no reply to %s within %s", p.user, id, d)
		}
	}
}

func replyCode(r *protocol.ServerFrame) string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Code
}

// countByClientID counts the stream's message records per client_msg_id.
func countByClientID(recs []map[string]any) map[string]int {
	n := map[string]int{}
	for _, r := range recs {
		if r["type"] == "message" {
			n[r["client_msg_id"].(string)]++
		}
	}
	return n
}

// TestUpstreamSendRedisStreams: send is acknowledged only after XADD; with
// the sink's Redis stopped (SIGSTOP) the client gets unavailable; its
// retry with the same id after recovery, and again through another node,
// leaves exactly one record; one connection's records keep frame order;
// the send claim refuses other events.
func TestUpstreamSendRedisStreams(t *testing.T) {
	backend := redistest.Standalone(t, redistest.Options{})
	sink := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, backend.URL(), map[string]string{"WSGATE_UPSTREAM_URL": sink.URL() + "?stream=up"})
	nodes := c.startNodes("u", 2, nil)
	a := dial(t, nodes[0], "ann", map[string]any{"send": []string{"chat.*"}, "info": map[string]any{"team": "red"}})
	b := dial(t, nodes[1], "ann", nil)

	if r := a.writeSend("s1", "chat.msg", `{"text":"one"}`); !r.OK {
		t.Fatalf("s1: %+v", r.Error)
	}
	recs := upstreamStream(t, sink.Client(), "up")
	if len(recs) != 1 || recs[0]["client_msg_id"] != "s1" || recs[0]["user"] != "ann" || recs[0]["node"] != "u1" ||
		fmt.Sprint(recs[0]["info"]) != "map[team:red]" || fmt.Sprint(recs[0]["data"]) != "map[text:one]" {
		t.Fatalf("stream after s1: %v", recs)
	}

	sink.Pause()
	r := a.writeSend("s2", "chat.msg", `2`)
	sink.Resume()
	if r.OK || replyCode(r) != "unavailable" {
		t.Fatalf("s2 with the sink stopped: %+v, want unavailable", r)
	}
	if r := a.writeSend("s2", "chat.msg", `2`); !r.OK {
		t.Fatalf("s2 retried after recovery: %+v", r.Error)
	}
	if r := b.writeSend("s2", "chat.msg", `2`); !r.OK {
		t.Fatalf("s2 retried on the other node: %+v", r.Error)
	}
	if r := a.writeSend("s3", "admin.drop", `3`); r.OK || replyCode(r) != "forbidden" {
		t.Fatalf("event outside the send claim: %+v, want forbidden", r)
	}

	// Order: many frames written at once on one connection.
	const burst = 30
	for i := range burst {
		f := sendFrame(fmt.Sprintf("o%d", i), "chat.msg", fmt.Sprint(i))
		if err := a.conn.WriteFrame(&f); err != nil {
			t.Fatal(err)
		}
	}
	for i := range burst {
		if r := a.replyTo(fmt.Sprintf("o%d", i), 15*time.Second); !r.OK {
			t.Fatalf("o%d: %+v", i, r.Error)
		}
	}

	recs = upstreamStream(t, sink.Client(), "up")
	counts := countByClientID(recs)
	if counts["s1"] != 1 || counts["s2"] != 1 || counts["s3"] != 0 {
		t.Fatalf("records per client id %v, want s1 and s2 once, s3 never", counts)
	}
	var order []string
	for _, r := range recs {
		if id := r["client_msg_id"].(string); strings.HasPrefix(id, "o") {
			order = append(order, id)
		}
	}
	if len(order) != burst {
		t.Fatalf("%d burst records, want %d", len(order), burst)
	}
	for i, id := range order {
		if id != fmt.Sprintf("o%d", i) {
			t.Fatalf("burst record %d is %s: frame order lost (%v)", i, id, order)
		}
	}
	if got := nodes[0].metric(t, `wsgate_upstream_records_total{type="message"}`); got < 1+burst {
		t.Fatalf("wsgate_upstream_records_total{type=message} on u1 = %v, want >= %d", got, 1+burst)
	}
}

// TestUpstreamSendWithoutSink: no WSGATE_UPSTREAM_URL, send is forbidden.
func TestUpstreamSendWithoutSink(t *testing.T) {
	backend := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, backend.URL(), nil)
	g := c.startNode("n1", nil)
	p := dial(t, g, "bo", nil)
	if r := p.writeSend("x", "chat", `1`); r.OK || replyCode(r) != "forbidden" {
		t.Fatalf("send without a sink: %+v, want forbidden", r)
	}
}

// TestUpstreamRPC: the binary calls a real HTTP endpoint: result, error
// passed through, and unavailable when it does not answer.
func TestUpstreamRPC(t *testing.T) {
	hang := make(chan struct{})
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ User, Method string }
		_ = json.Unmarshal(body, &req)
		switch req.Method {
		case "whoami":
			fmt.Fprintf(w, `{"result":{"you":%q}}`, req.User)
		case "fail":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"error":{"code":"no_access","message":"not yours"}}`)
		default:
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}
	}))
	defer ep.Close()
	defer close(hang)
	backend := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, backend.URL(), map[string]string{"WSGATE_RPC_URL": ep.URL})
	g := c.startNode("n1", nil)
	p := dial(t, g, "cy", nil)
	if r := p.request(protocol.ClientFrame{Type: protocol.TypeRPC, Method: "whoami"}); !r.OK || string(r.Result) != `{"you":"cy"}` {
		t.Fatalf("whoami: ok=%v result=%s error=%+v", r.OK, r.Result, r.Error)
	}
	if r := p.request(protocol.ClientFrame{Type: protocol.TypeRPC, Method: "fail"}); r.OK || replyCode(r) != "no_access" || r.Error.Message != "not yours" {
		t.Fatalf("fail: %+v", r)
	}
	if r := p.request(protocol.ClientFrame{Type: protocol.TypeRPC, Method: "slow"}); r.OK || replyCode(r) != "unavailable" {
		t.Fatalf("slow: %+v, want unavailable", r)
	}
}

// TestUpstreamBadURLStopsStartup: an invalid WSGATE_UPSTREAM_URL exits 2
// with one line naming the setting.
func TestUpstreamBadURLStopsStartup(t *testing.T) {
	for _, env := range []string{"WSGATE_UPSTREAM_URL=kafka://b1:9092", "WSGATE_RPC_URL=not a url"} {
		cmd := exec.Command(wsgateBin, "gateway")
		cmd.Env = append(os.Environ(), "WSGATE_JWT_SECRET="+jwtSecret, "WSGATE_LISTEN=127.0.0.1:0", env)
		out, err := cmd.CombinedOutput()
		name, _, _ := strings.Cut(env, "=")
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 {
			t.Fatalf("%s: exit %v (%v), want 2; output:\n%s", env, cmd.ProcessState, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], name) {
			t.Fatalf("%s: output %q, want one line naming %s", env, out, name)
		}
	}
}

package e2e

// OpenTelemetry: a publish's W3C traceparent (HTTP header, also on a
// batch, or gRPC metadata) follows the message over the bus to the delivering node; both
// nodes log the trace id, and the spans wsgate.publish (publishing node)
// and wsgate.deliver (delivering node) reach an OTLP/HTTP receiver with
// that trace id, each the child of the one before.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
	wsgatev1 "github.com/wsgate/wsgate/proto/wsgate/v1"
	"github.com/wsgate/wsgate/proto/wsgate/v1/wsgatev1connect"
)

// otlpSpan is a received span with the service.instance.id of its sender.
type otlpSpan struct {
	instance string
	*tracepb.Span
}

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes each export
// request (protobuf) and keeps its spans.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []otlpSpan
	bad   []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var ex coltracepb.ExportTraceServiceRequest
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(b, &ex) != nil {
			r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, rs := range ex.GetResourceSpans() {
			inst := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.instance.id" {
					inst = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					r.spans = append(r.spans, otlpSpan{instance: inst, Span: s})
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// span waits for the span named name of trace traceID.
func (r *otlpReceiver) span(t *testing.T, name, traceID string) otlpSpan {
	t.Helper()
	var found otlpSpan
	eventually(t, 10*time.Second, "span "+name+" of trace "+traceID, func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range r.spans {
			if s.GetName() == name && hex.EncodeToString(s.GetTraceId()) == traceID {
				found = s
				return true, ""
			}
		}
		return false, strings.Join(r.bad, "; ")
	})
	return found
}

// logged reports whether g's log has a JSON line with msg and trace_id.
func logged(g *gateway, msg, traceID string) bool {
	for _, line := range strings.Split(g.log(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg && m["trace_id"] == traceID {
			return true
		}
	}
	return false
}

func TestTraceparentFollowsThePublish(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	rcv := newOTLPReceiver(t)
	c := newCluster(t, srv.URL(), map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL,
		"OTEL_BSP_SCHEDULE_DELAY":     "50", // ms: export soon after the span ends
	})
	a := c.startNode("a", nil)
	b := c.startNode("b", nil)
	p := dial(t, b, "tina", nil)

	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: protos}}
	defer hc.CloseIdleConnections()
	client := wsgatev1connect.NewAPIServiceClient(hc, a.HTTP(), connect.WithGRPC())

	for _, tc := range []struct {
		via     string
		traceID string
		spanID  string
		publish func(traceparent string)
	}{
		{"http", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", func(tp string) {
			body, _ := json.Marshal(toUser("tina", "http-traced"))
			req, _ := http.NewRequest("POST", a.HTTP()+"/api/v1/publish", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			req.Header.Set("traceparent", tp)
			resp, err := c.http.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("publish: %v %v", resp, err)
			}
			resp.Body.Close()
		}},
		{"batch", "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8", func(tp string) {
			body, _ := json.Marshal(map[string]any{"messages": []any{toUser("tina", "batch-traced")}})
			req, _ := http.NewRequest("POST", a.HTTP()+"/api/v1/publish/batch", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			req.Header.Set("traceparent", tp)
			resp, err := c.http.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("batch publish: %v %v", resp, err)
			}
			resp.Body.Close()
		}},
		{"grpc", "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", func(tp string) {
			req := connect.NewRequest(&wsgatev1.PublishRequest{Target: &wsgatev1.Target{Type: "user", Id: "tina"}, Event: "grpc-traced"})
			req.Header().Set("Authorization", "Bearer "+apiKey)
			req.Header().Set("traceparent", tp)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := client.Publish(ctx, req); err != nil {
				t.Fatalf("gRPC publish: %v", err)
			}
		}},
	} {
		t.Run(tc.via, func(t *testing.T) {
			tc.publish("00-" + tc.traceID + "-" + tc.spanID + "-01")
			p.expect(tc.via + "-traced")
			pub := rcv.span(t, "wsgate.publish", tc.traceID)
			del := rcv.span(t, "wsgate.deliver", tc.traceID)
			if pub.instance != "a" || hex.EncodeToString(pub.GetParentSpanId()) != tc.spanID || pub.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("publish span from %q, parent %x, kind %v: want from a, parent %s, server", pub.instance, pub.GetParentSpanId(), pub.GetKind(), tc.spanID)
			}
			if del.instance != "b" || !bytes.Equal(del.GetParentSpanId(), pub.GetSpanId()) {
				t.Errorf("deliver span from %q, parent %x: want from b, parent %x (the publish span)", del.instance, del.GetParentSpanId(), pub.GetSpanId())
			}
			eventually(t, 5*time.Second, "the trace id in both nodes' logs", func() (bool, string) {
				return logged(a, "publish", tc.traceID) && logged(b, "deliver", tc.traceID), b.logTail(5)
			})
		})
	}
	// An untraced publish is neither logged nor exported: after it, one
	// more traced publish, and then the counts are those of the traced.
	a.mustPublish(t, toUser("tina", "plain"))
	p.expect("plain")
	const last = "11111111111111111111111111111111"
	tcs := "00-" + last + "-2222222222222222-01"
	body, _ := json.Marshal(toUser("tina", "last"))
	req, _ := http.NewRequest("POST", a.HTTP()+"/api/v1/publish", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("traceparent", tcs)
	if resp, err := c.http.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("publish: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	p.expect("last")
	rcv.span(t, "wsgate.publish", last)
	rcv.span(t, "wsgate.deliver", last)
	eventually(t, 5*time.Second, "the last trace id in b's log", func() (bool, string) { return logged(b, "deliver", last), "" })
	if n := strings.Count(b.log(), `"msg":"deliver"`); n != 4 {
		t.Errorf("b logged %d deliveries, want the 4 traced ones", n)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	publishes := 0
	for _, s := range rcv.spans {
		if s.GetName() == "wsgate.publish" {
			publishes++
		}
	}
	if publishes != 4 {
		t.Errorf("%d publish spans exported, want the 4 traced ones", publishes)
	}
}

package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	wsgatev1 "github.com/wsgate/wsgate/proto/wsgate/v1"
	"github.com/wsgate/wsgate/proto/wsgate/v1/wsgatev1connect"
	"github.com/wsgate/wsgate/protocol"
)

// stubService records what the API asked of it and answers what the test
// set. Operations a test does not set fail the test.
type stubService struct {
	t  *testing.T
	mu sync.Mutex

	published []PublishRequest
	batch     []PublishRequest
	batchErrs []error
	publishFn func(PublishRequest) (PublishResult, error)
	history   HistoryQuery
	Service   // nil: any other operation panics
}

func (s *stubService) Publish(_ context.Context, r PublishRequest) (PublishResult, error) {
	s.mu.Lock()
	s.published = append(s.published, r)
	s.mu.Unlock()
	if s.publishFn != nil {
		return s.publishFn(r)
	}
	return PublishResult{ID: "m1"}, nil
}

func (s *stubService) PublishBatch(_ context.Context, reqs []PublishRequest, errs []error) []any {
	s.batch, s.batchErrs = reqs, errs
	out := make([]any, len(reqs))
	for i := range reqs {
		if errs[i] != nil {
			out[i] = map[string]protocol.ErrorBody{"error": ErrorBody(errs[i])}
			continue
		}
		out[i] = PublishResult{ID: "b" + reqs[i].Target.ID, Seq: int64(i + 1)}
	}
	return out
}

func (s *stubService) HistoryPage(_ context.Context, room string, q HistoryQuery) (int64, []protocol.Message, error) {
	s.history = q
	return 7, nil, nil
}

const testKey = "k3y"

// serve is a Handler over svc (key testKey unless dev and open) on an
// httptest server; failures counts refused keys.
func serve(t *testing.T, svc Service, opt GuardOptions) (*httptest.Server, *prometheus.CounterVec) {
	t.Helper()
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "f"}, []string{"result"})
	opt.Failures = failures
	if opt.ClientIP == nil {
		opt.ClientIP = func(r *http.Request) string { return r.Header.Get("X-Test-IP") }
	}
	mux := http.NewServeMux()
	NewHandler(svc, NewGuard(opt), slog.New(slog.DiscardHandler)).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, failures
}

func call(t *testing.T, srv *httptest.Server, method, path, key, ip, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("X-Test-IP", ip)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 && json.Unmarshal(raw, &out) != nil {
		t.Fatalf("%s %s: answer is not a JSON object: %q", method, path, raw)
	}
	return resp.StatusCode, resp.Header, out
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// A batch reaches the Service decoded, each bad message with its own 400
// (and the others published), every message with the call's trace
// context; the answer keeps the batch's order.
func TestBatchThroughHandler(t *testing.T) {
	svc := &stubService{t: t}
	srv, _ := serve(t, svc, GuardOptions{Key: testKey})
	status, _, body := call(t, srv, "POST", "/api/v1/publish/batch", testKey, "10.0.0.1",
		`{"messages":[{"target":{"type":"user","id":"a"}},{"target":{"type":"nope","id":"x"},"event":5},{"target":{"type":"user","id":"c"},"reliable":true}]}`)
	if status != 200 {
		t.Fatalf("status %d: %v", status, body)
	}
	if len(svc.batch) != 3 || svc.batchErrs[0] != nil || svc.batchErrs[1] == nil || svc.batchErrs[2] != nil {
		t.Fatalf("service got %d messages, errors %v", len(svc.batch), svc.batchErrs)
	}
	for i, r := range svc.batch {
		if i != 1 && r.Traceparent == "" {
			t.Errorf("message %d lost the call's traceparent", i)
		}
	}
	if !svc.batch[2].Reliable || svc.batch[2].Target.ID != "c" {
		t.Errorf("message 2 decoded as %+v", svc.batch[2])
	}
	res := body["results"].([]any)
	if len(res) != 3 || res[0].(map[string]any)["id"] != "ba" || errCode(res[1].(map[string]any)) != "bad_request" || res[2].(map[string]any)["seq"] != 3.0 {
		t.Fatalf("results %v", res)
	}
	// Over the batch limit: refused whole, the Service asked nothing.
	svc.batch = nil
	msgs := strings.Repeat(`{"target":{"type":"broadcast"}},`, MaxBatch+1)
	status, _, body = call(t, srv, "POST", "/api/v1/publish/batch", testKey, "10.0.0.1", `{"messages":[`+msgs[:len(msgs)-1]+`]}`)
	if status != 400 || errCode(body) != "bad_request" || svc.batch != nil {
		t.Fatalf("batch of %d: status %d %v, service got %d", MaxBatch+1, status, body, len(svc.batch))
	}
}

// An error of the Service is answered in the contract's shape: its own
// status and code for an *Error, 503 with Retry-After for anything else.
func TestServiceErrorsAnswered(t *testing.T) {
	svc := &stubService{t: t}
	srv, _ := serve(t, svc, GuardOptions{Key: testKey})
	svc.publishFn = func(PublishRequest) (PublishResult, error) {
		return PublishResult{}, &Error{Status: http.StatusConflict, Code: "conflict", Message: "key reused"}
	}
	status, _, body := call(t, srv, "POST", "/api/v1/publish", testKey, "10.0.0.1", `{"target":{"type":"user","id":"a"}}`)
	if status != 409 || errCode(body) != "conflict" {
		t.Fatalf("an *Error 409: %d %v", status, body)
	}
	svc.publishFn = func(PublishRequest) (PublishResult, error) { return PublishResult{}, errors.New("redis: i/o timeout") }
	status, h, body := call(t, srv, "POST", "/api/v1/publish", testKey, "10.0.0.1", `{"target":{"type":"user","id":"a"}}`)
	if status != 503 || errCode(body) != "unavailable" || h.Get("Retry-After") != "1" {
		t.Fatalf("a plain error: %d Retry-After %q %v", status, h.Get("Retry-After"), body)
	}
	status, _, body = call(t, srv, "GET", "/api/v1/rooms/r/history?before=3&reverse=true&limit=5", testKey, "10.0.0.1", "")
	if status != 200 || body["seq"] != 7.0 || svc.history != (HistoryQuery{Before: 3, Limit: 5, Reverse: true}) {
		t.Fatalf("history: %d %v, service asked %+v", status, body, svc.history)
	}
	status, _, body = call(t, srv, "GET", "/api/v1/rooms/r/history?before=3", testKey, "10.0.0.1", "")
	if status != 400 || errCode(body) != "bad_request" {
		t.Fatalf("before without reverse: %d %v", status, body)
	}
	status, _, body = call(t, srv, "GET", "/api/v2/nothing", testKey, "10.0.0.1", "")
	if status != 404 || errCode(body) != "not_found" {
		t.Fatalf("unknown path: %d %v", status, body)
	}
}

// The key: 401 without it or with a wrong one; past KeyFailBurst
// failures from one IP every request of that IP is 429 with Retry-After,
// the right key included, while another IP goes on.
func TestGuardKeyFailures(t *testing.T) {
	svc := &stubService{t: t}
	srv, failures := serve(t, svc, GuardOptions{Key: testKey})
	pub := `{"target":{"type":"user","id":"a"}}`
	if status, _, body := call(t, srv, "POST", "/api/v1/publish", "", "10.0.0.9", pub); status != 401 || errCode(body) != "unauthorized" {
		t.Fatalf("no key: %d %v", status, body)
	}
	for i := 1; i < KeyFailBurst; i++ {
		if status, _, _ := call(t, srv, "POST", "/api/v1/publish", "wrong", "10.0.0.9", pub); status != 401 {
			t.Fatalf("wrong key %d: %d", i, status)
		}
	}
	status, h, body := call(t, srv, "POST", "/api/v1/publish", testKey, "10.0.0.9", pub)
	if status != 429 || errCode(body) != "rate_limited" || h.Get("Retry-After") == "" {
		t.Fatalf("right key after %d failures: %d Retry-After %q %v", KeyFailBurst, status, h.Get("Retry-After"), body)
	}
	if status, _, _ := call(t, srv, "POST", "/api/v1/publish", testKey, "10.0.0.10", pub); status != 200 {
		t.Fatalf("another IP: %d", status)
	}
	if n := len(svc.published); n != 1 {
		t.Fatalf("the service published %d messages, want 1 (the other IP's)", n)
	}
	if r, th := count(failures, "refused"), count(failures, "throttled"); r != KeyFailBurst || th != 1 {
		t.Fatalf("failures counted: refused %v throttled %v, want %d and 1", r, th, KeyFailBurst)
	}
	// No key configured and not dev: the API is off.
	off, _ := serve(t, svc, GuardOptions{})
	if status, _, body := call(t, off, "POST", "/api/v1/publish", "anything", "10.0.0.1", pub); status != 401 || !strings.Contains(body["error"].(map[string]any)["message"].(string), "WSGATE_API_KEY") {
		t.Fatalf("API without a key: %d %v", status, body)
	}
}

// The open dev API answers its own pages only: a foreign Origin is 403,
// a non-JSON body 415, the Host check is asked.
func TestGuardOpenDevAPI(t *testing.T) {
	svc := &stubService{t: t}
	hostAsked := 0
	srv, _ := serve(t, svc, GuardOptions{Dev: true, OwnHost: func(*http.Request) *Error { hostAsked++; return nil }})
	pub := `{"target":{"type":"user","id":"a"}}`
	if status, _, body := call(t, srv, "POST", "/api/v1/publish", "", "127.0.0.1", pub); status != 200 {
		t.Fatalf("open dev API: %d %v", status, body)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/publish", strings.NewReader(pub))
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("foreign Origin: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", srv.URL+"/api/v1/publish", strings.NewReader(pub))
	req.Header.Set("Content-Type", "text/plain")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 415 {
		t.Fatalf("text/plain body: %d", resp.StatusCode)
	}
	if hostAsked != 3 || len(svc.published) != 1 {
		t.Fatalf("host check asked %d times (want 3), published %d (want 1)", hostAsked, len(svc.published))
	}
}

// gRPC: the same operation and guard; an *Error keeps its contract code
// in the wsgate-error-code metadata and maps to the code of its status.
func TestGRPCThroughHandler(t *testing.T) {
	svc := &stubService{t: t}
	srv, _ := serve(t, svc, GuardOptions{Key: testKey})
	client := wsgatev1connect.NewAPIServiceClient(srv.Client(), srv.URL)
	req := connect.NewRequest(&wsgatev1.PublishRequest{Target: &wsgatev1.Target{Type: "user", Id: "g"}, Data: `{"x":1}`, Reliable: true})
	if _, err := client.Publish(context.Background(), req); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("no key: %v", err)
	}
	req.Header().Set("Authorization", "Bearer "+testKey)
	res, err := client.Publish(context.Background(), req)
	if err != nil || res.Msg.GetId() != "m1" {
		t.Fatalf("publish: %v %v", res, err)
	}
	if p := svc.published[0]; p.Target.ID != "g" || !p.Reliable || string(p.Data) != `{"x":1}` {
		t.Fatalf("service got %+v", p)
	}
	svc.publishFn = func(PublishRequest) (PublishResult, error) {
		return PublishResult{}, &Error{Status: http.StatusConflict, Code: "conflict", Message: "key reused"}
	}
	_, err = client.Publish(context.Background(), req)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeAlreadyExists || ce.Meta().Get("wsgate-error-code") != "conflict" {
		t.Fatalf("409 over gRPC: %v", err)
	}
	bad := connect.NewRequest(&wsgatev1.PublishRequest{Target: &wsgatev1.Target{Type: "user", Id: "g"}, Data: `{not json`})
	bad.Header().Set("Authorization", "Bearer "+testKey)
	if _, err := client.Publish(context.Background(), bad); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("data that is not JSON: %v", err)
	}
}

func count(v *prometheus.CounterVec, label string) float64 {
	var m dto.Metric
	_ = v.WithLabelValues(label).Write(&m)
	return m.GetCounter().GetValue()
}

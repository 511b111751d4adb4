package tracing

import (
	"context"
	"runtime"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// Without an OTLP endpoint there is no tracer, no goroutine, and the nil
// tracer's spans do nothing.
func TestOffWithoutEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	before := runtime.NumGoroutine()
	tr, err := FromEnv(context.Background(), "wsgate", "n1")
	if tr != nil || err != nil {
		t.Fatalf("FromEnv = %v, %v; want nil, nil", tr, err)
	}
	p, _ := Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	s := tr.Start(context.Background(), "x", p, trace.SpanKindServer)
	if s != (Span{}) || s.Parent(p) != p {
		t.Fatalf("a nil tracer's span: %+v", s)
	}
	s.End(nil)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := runtime.NumGoroutine(); after != before {
		t.Fatalf("goroutines %d -> %d", before, after)
	}
}

// With an endpoint the tracer exists and its span is the child of the
// given parent.
func TestOnWithEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	tr, err := FromEnv(context.Background(), "wsgate", "n1")
	if tr == nil || err != nil {
		t.Fatalf("FromEnv = %v, %v", tr, err)
	}
	p, _ := Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	s := tr.Start(context.Background(), "x", p, trace.SpanKindServer)
	c := s.Parent(p)
	if c.TraceID != p.TraceID || c.SpanID == p.SpanID || c.Flags != 1 {
		t.Fatalf("child %+v of %+v", c, p)
	}
	s.End(nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing listens on the endpoint: do not wait for it
	tr.Shutdown(ctx)
}

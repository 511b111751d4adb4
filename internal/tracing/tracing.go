// Package tracing carries W3C trace context (the traceparent header) with
// published messages and exports spans over OTLP/HTTP when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set. Without it FromEnv returns nil: no exporter, no goroutine, and the
// methods of a nil *Tracer do nothing, so the hot path pays a nil check.
package tracing

import (
	"context"
	"encoding/hex"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Parent is a parsed traceparent (version 00).
type Parent struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// TraceIDString is the trace id as 32 lower-case hex digits.
func (p Parent) TraceIDString() string { return hex.EncodeToString(p.TraceID[:]) }

// Parse reads a traceparent header value: version-traceid-spanid-flags,
// lower-case hex (W3C Trace Context, level 1). A future version may
// append fields after the flags; an invalid value reports false (the
// header is then ignored, as the recommendation says).
func Parse(s string) (Parent, bool) {
	var p Parent
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return p, false
	}
	ver, ok := hexByte(s[0:2])
	if !ok || ver == 0xff || (ver == 0 && len(s) != 55) || (len(s) > 55 && s[55] != '-') {
		return p, false
	}
	if !decodeHex(p.TraceID[:], s[3:35]) || !decodeHex(p.SpanID[:], s[36:52]) {
		return p, false
	}
	if p.Flags, ok = hexByte(s[53:55]); !ok {
		return p, false
	}
	if p.TraceID == ([16]byte{}) || p.SpanID == ([8]byte{}) {
		return p, false
	}
	return p, true
}

// String formats p as a version 00 traceparent.
func (p Parent) String() string {
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, p.TraceID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, p.SpanID[:])
	b = append(b, '-')
	return string(hex.AppendEncode(b, []byte{p.Flags}))
}

func hexByte(s string) (byte, bool) {
	var b [1]byte
	ok := decodeHex(b[:], s)
	return b[0], ok
}

// decodeHex decodes lower-case hex only (the format forbids upper case).
func decodeHex(dst []byte, s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

// Tracer makes the spans of one process; nil when tracing is off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// Enabled reports whether the environment asks for OTLP export.
func Enabled() bool {
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv returns a Tracer exporting over OTLP/HTTP as the OTEL_*
// variables say (endpoint, headers, timeout), or nil when no endpoint is
// set. service names the process (service.name, unless OTEL_SERVICE_NAME
// is set), instance its node id.
func FromEnv(ctx context.Context, service, instance string) (*Tracer, error) {
	if !Enabled() {
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(service)}
	if instance != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(instance))
	}
	res, err := resource.Merge(resource.NewSchemaless(attrs...), resource.Environment())
	if err != nil {
		return nil, err
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracer{provider: p, tracer: p.Tracer("github.com/wsgate/wsgate")}, nil
}

// Span is a started span; the zero Span (tracing off) does nothing.
type Span struct{ s trace.Span }

// Start starts a span named name, child of parent (a remote parent:
// the publisher's traceparent), with attrs.
func (t *Tracer) Start(ctx context.Context, name string, parent Parent, kind trace.SpanKind, attrs ...attribute.KeyValue) Span {
	if t == nil {
		return Span{}
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    parent.TraceID,
		SpanID:     parent.SpanID,
		TraceFlags: trace.TraceFlags(parent.Flags),
		Remote:     true,
	})
	_, s := t.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return Span{s: s}
}

// Parent is the traceparent to send on for work under this span (or
// parent itself when tracing is off).
func (s Span) Parent(parent Parent) Parent {
	if s.s == nil {
		return parent
	}
	sc := s.s.SpanContext()
	return Parent{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
}

// End ends the span, recording err if there is one.
func (s Span) End(err error) {
	if s.s == nil {
		return
	}
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// Shutdown flushes the spans not yet exported and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

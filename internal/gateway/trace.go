package gateway

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/wsgate/wsgate/internal/tracing"
	"github.com/wsgate/wsgate/protocol"
)

// Trace context of published messages: a publish with a valid
// traceparent is logged with its trace id ("publish"), runs under the
// span wsgate.publish, and its envelopes carry the span's context (tp),
// so that each node that delivers it logs the same trace id ("deliver")
// under a span wsgate.deliver. A message without one costs a string
// comparison.

// SetTracer makes the node export its spans through t (before Start; nil
// keeps them off).
func (n *Node) SetTracer(t *tracing.Tracer) { n.tracer = t }

// logTraced records the local delivery of a message with trace context tp
// (nothing for "" or an invalid value).
func (n *Node) logTraced(tp string, t protocol.Target, seq int64) {
	if tp == "" {
		return
	}
	p, ok := tracing.Parse(tp)
	if !ok {
		return
	}
	n.tracer.Start(n.ctx, "wsgate.deliver", p, trace.SpanKindConsumer,
		attribute.String("wsgate.target.type", t.Type), attribute.String("wsgate.target.id", t.ID)).End(nil)
	n.log.Info("deliver", "target_type", t.Type, "target", t.ID, "seq", seq, "trace_id", p.TraceIDString())
}

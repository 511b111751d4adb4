package gateway

import (
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/protocol"
)

// BenchmarkFanOutDeflate: a 2 KB JSON message broadcast to 1,000 local
// connections, plain and with permessage-deflate negotiated on all of
// them. The compressed variant is made once per broadcast (compressions/op
// stays 1); wire-B/delivery is the frame each connection is sent.
// Compare the two with benchstat (go test -bench FanOutDeflate -count 10).
func BenchmarkFanOutDeflate(b *testing.B) {
	const k = 1000
	for _, deflate := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "deflate"}[deflate]
		b.Run(name, func(b *testing.B) {
			n := benchNode(b, cluster.NewMemory())
			attach(b, n, k)
			conns := n.hub.all()
			for _, c := range conns {
				c.mu.Lock()
				c.deflate = deflate
				c.mu.Unlock()
			}
			msg := &protocol.Message{ID: "m", Event: "tick", Data: jsonData(2048), Target: protocol.Target{Type: "broadcast"}}
			body := protocol.AppendMessageJSON(nil, msg)
			drained := func() { waitDrained(conns) }
			var wire int
			before := n.deflated.Load()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				d := newDelivery(body, classChat, 0, 0)
				n.deliverLocal(msg.Target, d)
				if i == 0 {
					wire = len(d.frameFor(conns[0]))
				}
				if i%4 == 3 {
					drained() // at most 4 broadcasts in flight
				}
			}
			drained()
			b.StopTimer()
			el := time.Since(start)
			b.ReportMetric(float64(el.Nanoseconds())/float64(b.N*k), "ns/delivery")
			b.ReportMetric(float64(wire), "wire-B/delivery")
			b.ReportMetric(float64(n.deflated.Load()-before)/float64(b.N), "compressions/op")
		})
	}
}

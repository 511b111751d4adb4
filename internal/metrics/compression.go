package metrics

import "github.com/prometheus/client_golang/prometheus"

// Compression counts permessage-deflate (contract §14, §16): for every
// frame queued compressed to a connection, its payload's size before and
// after compression. The compression itself runs once per message,
// whatever the number of recipients.
type Compression struct {
	CompressedBytes   prometheus.Counter
	UncompressedBytes prometheus.Counter
}

func (m *Metrics) registerCompression(f func(prometheus.Collector)) {
	m.CompressedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_compressed_bytes_total",
		Help: "Payload bytes of the frames queued compressed (permessage-deflate), after compression."})
	m.UncompressedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_uncompressed_bytes_total",
		Help: "Payload bytes of the frames queued compressed (permessage-deflate), before compression."})
	f(m.CompressedBytes)
	f(m.UncompressedBytes)
}

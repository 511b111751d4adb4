package metrics

import "github.com/prometheus/client_golang/prometheus"

// Compression counts permessage-deflate (contract §14, §16): for every
// frame prepared compressed for a connection, its payload's size before and
// after compression. The compression itself runs once per message,
// whatever the number of recipients.
type Compression struct {
	CompressedBytes   prometheus.Counter
	UncompressedBytes prometheus.Counter
}

func (m *Metrics) registerCompression(f func(prometheus.Collector)) {
	m.CompressedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_compressed_bytes_total",
		Help: "Payload bytes of the frames sent compressed (permessage-deflate), after compression, counted as each is prepared for a connection."})
	m.UncompressedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "wsgate_uncompressed_bytes_total",
		Help: "Payload bytes of the frames sent compressed (permessage-deflate), before compression, counted as each is prepared for a connection."})
	f(m.CompressedBytes)
	f(m.UncompressedBytes)
}

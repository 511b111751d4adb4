package httpstream

import "bytes"

// Kind is an HTTP transport.
type Kind uint8

const (
	SSE    Kind = iota + 1 // GET /sse: text/event-stream
	NDJSON                 // POST /stream: application/x-ndjson
)

// String is the transport's name: the metric label, the welcome's
// transport field and WSGATE_TRANSPORTS.
func (k Kind) String() string {
	if k == SSE {
		return "sse"
	}
	return "stream"
}

// Keep-alive lines sent when nothing else was sent for ping_interval_ms:
// an SSE comment, an empty ndjson line (both ignored by clients).
var (
	sseComment = []byte(":\n\n")
	ndjsonIdle = []byte("\n")
)

// KeepAlive is k's keep-alive line (shared: not to be modified).
func KeepAlive(k Kind) []byte {
	if k == SSE {
		return sseComment
	}
	return ndjsonIdle
}

// Frame is one frame on k: an SSE event (its data line, and the id line
// when id is set) or an ndjson line. A JSON object holds a raw line
// break only as white space: it is replaced by a space, so that each
// frame stays one line.
func Frame(k Kind, b []byte, id string) []byte {
	n := len(b) + 1
	if k == SSE {
		n += len("data: \n\n")
		if id != "" {
			n += len("id: \n") + len(id)
		}
	}
	out := make([]byte, 0, n)
	if k == SSE {
		out = append(out, "data: "...)
	}
	start := len(out)
	out = append(out, b...)
	if bytes.ContainsAny(b, "\r\n") {
		for i := start; i < len(out); i++ {
			if out[i] == '\r' || out[i] == '\n' {
				out[i] = ' '
			}
		}
	}
	out = append(out, '\n')
	if k == SSE {
		if id != "" {
			out = append(out, "id: "...)
			out = append(out, id...)
			out = append(out, '\n')
		}
		out = append(out, '\n')
	}
	return out
}

// Header is the 200 answer that opens a stream of k. The body ends with
// the connection (no Content-Length, no chunking): buffering proxies are
// asked not to hold it (X-Accel-Buffering). origin, when not empty, is
// an Origin the caller has allowed.
func Header(k Kind, origin string) []byte {
	ct := "text/event-stream"
	if k == NDJSON {
		ct = "application/x-ndjson"
	}
	b := make([]byte, 0, 256)
	b = append(b, "HTTP/1.1 200 OK\r\nContent-Type: "...)
	b = append(b, ct...)
	b = append(b, "\r\nCache-Control: no-cache, no-store\r\nConnection: close\r\nX-Accel-Buffering: no\r\n"...)
	if origin != "" {
		b = append(b, "Access-Control-Allow-Origin: "...)
		b = append(b, origin...)
		b = append(b, "\r\nAccess-Control-Allow-Credentials: true\r\nVary: Origin\r\n"...)
	}
	return append(b, "\r\n"...)
}

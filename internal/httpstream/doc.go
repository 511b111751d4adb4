// Package httpstream is the outside of the HTTP transports (contract
// §18): GET /sse (Server-Sent Events) and POST /stream (one JSON frame
// per line) carry a wsgate session where WebSocket is blocked.
//
// It owns their bytes and their requests, on byte slices and
// *http.Request, knowing no socket and no connection: the answer's head
// (Header), a frame as an SSE event or an ndjson line (Frame), the
// keep-alive lines (KeepAlive), the SSE cursor that every event with a
// seq carries as its id and that Last-Event-ID resumes from (Cursor,
// ParseCursor, ResumeFromCursor), and the handshake parameters of a
// stream request, from its query, headers or JSON body (ReadRequest).
// The gateway's connection writes these bytes from the event loop like
// WebSocket frames.
package httpstream

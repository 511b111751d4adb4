package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// An HTTP stream over HTTP/2 (browsers that reach a TLS listener
// negotiate h2; plain-text h2c with prior knowledge too). Its request is
// one stream of a shared connection, which neither Hijack nor the event
// loop can take: the connection is carried instead by the goroutine path
// of tls.go (a reader and a writer goroutine) over h2Stream, and the
// handler's goroutine waits until it ends. Three goroutines per
// connection, as the price of HTTP/2; HTTP/1.1 streams have none.

// h2Stream makes a ResponseWriter the connection of a tlsIO. The first
// write is an HTTP/1.1 head (the stream's 200, or a refusal of a setup
// that failed): its status and headers become the HTTP/2 answer's.
type h2Stream struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	r    *http.Request
	done chan struct{} // closed by Close: the handler returns

	mu      sync.Mutex
	started bool
	closed  bool
}

var _ tlsStream = (*h2Stream)(nil)

func newH2Stream(w http.ResponseWriter, r *http.Request) *h2Stream {
	return &h2Stream{w: w, rc: http.NewResponseController(w), r: r, done: make(chan struct{})}
}

// Read waits for the end of the request (the client went away, or Close)
// and reports it: nothing the client sends on a stream is read.
func (s *h2Stream) Read([]byte) (int, error) {
	select {
	case <-s.r.Context().Done():
	case <-s.done:
	}
	return 0, io.EOF
}

func (s *h2Stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, net.ErrClosed
	}
	body := p
	if !s.started {
		s.started = true
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(p)), s.r)
		if err != nil {
			return 0, err
		}
		for k, v := range resp.Header {
			if k != "Connection" {
				s.w.Header()[k] = v
			}
		}
		s.w.WriteHeader(resp.StatusCode)
		body, _ = io.ReadAll(resp.Body) // a refusal's JSON; nothing after the 200's head
	}
	if len(body) > 0 {
		if _, err := s.w.Write(body); err != nil {
			return 0, err
		}
	}
	if err := s.rc.Flush(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the answer: the handler returns.
func (s *h2Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	return nil
}

func (s *h2Stream) CloseWrite() error { return s.Close() }

func (s *h2Stream) ConnectionState() tls.ConnectionState {
	if s.r.TLS != nil {
		return *s.r.TLS
	}
	return tls.ConnectionState{}
}

func (s *h2Stream) SetWriteDeadline(t time.Time) error { return s.rc.SetWriteDeadline(t) }
func (s *h2Stream) SetDeadline(t time.Time) error      { return s.rc.SetWriteDeadline(t) }
func (s *h2Stream) SetReadDeadline(time.Time) error    { return nil }
func (s *h2Stream) LocalAddr() net.Addr                { return stubAddr(s.r.Host) }
func (s *h2Stream) RemoteAddr() net.Addr               { return stubAddr(s.r.RemoteAddr) }

type stubAddr string

func (a stubAddr) Network() string { return "tcp" }
func (a stubAddr) String() string  { return string(a) }

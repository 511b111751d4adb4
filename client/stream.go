package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// Transport is how a session is carried (contract §18).
type Transport string

const (
	// WebSocket is /ws: the default.
	WebSocket Transport = "websocket"
	// SSE is GET /sse, Server-Sent Events; the client's frames are posted.
	SSE Transport = "sse"
	// Stream is POST /stream, one JSON frame per line; the client's frames
	// are posted.
	Stream Transport = "stream"
)

// DefaultTransports is the order Client tries them in.
var DefaultTransports = []Transport{WebSocket, SSE, Stream}

// FrameConn is one connection to a gateway over any transport: a *Conn
// (WebSocket) or a *StreamConn (SSE, HTTP streaming).
type FrameConn interface {
	// ReadFrame reads the next server frame; a close from the server ends
	// with a *CloseError.
	ReadFrame() (*protocol.ServerFrame, error)
	// WriteFrame sends one client frame.
	WriteFrame(f *protocol.ClientFrame) error
	// WriteClose ends the connection politely with code.
	WriteClose(code int, reason string) error
	// Close ends it at once.
	Close() error
}

var (
	_ FrameConn = (*Conn)(nil)
	_ FrameConn = (*StreamConn)(nil)
)

// StreamConn is a session over SSE or HTTP streaming (contract §18): the
// server's frames are read from the response, the client's posted in
// order to POST /v1/conn/{conn_id} of the node with the welcome's session.
// ReadFrame must be called from one goroutine at a time; WriteFrame,
// WriteClose and Close are safe for concurrent use.
type StreamConn struct {
	transport Transport
	body      io.ReadCloser
	br        *bufio.Reader
	cancel    context.CancelFunc
	hc        *http.Client
	postURL   string
	session   string
	maxMsg    int64
	idle      *time.Timer // closes the body when nothing came for idleTimeout
	idleFor   time.Duration

	wmu       sync.Mutex // one post at a time: frames arrive in order
	closeSent bool
	closeOnce sync.Once
}

// streamWelcome is what a welcome carries on these transports besides
// the WebSocket welcome's fields.
type streamWelcome struct {
	Type    string `json:"type"`
	ConnID  string `json:"conn_id"`
	Session string `json:"session"`
}

// DialStream opens a session over transport (SSE or Stream) at the node of
// rawURL, a WebSocket URL (ws://host:port/ws; /ws becomes /sse or
// /stream) or the http(s) URL of the endpoint itself, and reads the
// welcome. The token goes in the Authorization header; user, since,
// device and room_since in the query as for Dial. Refusals are
// *HandshakeError, as Dial's.
func DialStream(ctx context.Context, rawURL string, transport Transport, opts DialOptions) (*StreamConn, *Welcome, error) {
	opts = opts.withDefaults()
	if transport != SSE && transport != Stream {
		return nil, nil, fmt.Errorf("wsgate: DialStream: transport %q is not sse or stream", transport)
	}
	if opts.Format != protocol.JSON {
		return nil, nil, fmt.Errorf("wsgate: the %s transport carries JSON frames only", transport)
	}
	target, err := streamURL(rawURL, transport, opts)
	if err != nil {
		return nil, nil, err
	}
	tr := &http.Transport{
		DialContext:         netDialer(opts.LocalAddr).DialContext,
		TLSClientConfig:     opts.TLSConfig,
		TLSHandshakeTimeout: opts.HandshakeTimeout,
		MaxIdleConnsPerHost: 1,
	}
	hc := &http.Client{Transport: tr}
	sctx, cancel := context.WithCancel(context.Background())
	method := http.MethodGet
	if transport == Stream {
		method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(sctx, method, target, nil)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("wsgate: dial %s: %w", rawURL, err)
	}
	for k, v := range opts.Header {
		req.Header[k] = v
	}
	if opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+opts.Token)
	}
	// The handshake's deadline covers the answer and the welcome.
	hs := time.AfterFunc(opts.HandshakeTimeout, cancel)
	stop := context.AfterFunc(ctx, cancel)
	fail := func(err error) (*StreamConn, *Welcome, error) {
		hs.Stop()
		stop()
		cancel()
		tr.CloseIdleConnections()
		return nil, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		return fail(fmt.Errorf("wsgate: dial %s: %w", rawURL, err))
	}
	if resp.StatusCode != http.StatusOK {
		e := &HandshakeError{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		e.Code, e.Message = parseErrorBody(b)
		return fail(e)
	}
	c := &StreamConn{
		transport: transport, body: resp.Body, br: bufio.NewReaderSize(resp.Body, 4096),
		cancel: cancel, hc: hc, maxMsg: opts.MaxMessageBytes,
	}
	raw, err := c.next()
	if err == nil {
		var sw streamWelcome
		if json.Unmarshal(raw, &sw) != nil || sw.Type != protocol.TypeWelcome {
			err = fmt.Errorf("first frame is not a welcome: %.100s", raw)
		} else if sw.Session == "" || sw.ConnID == "" {
			err = errors.New("the welcome carries no session")
		} else {
			c.session = sw.Session
			c.postURL = postURL(target, sw.ConnID)
		}
	}
	var f *protocol.ServerFrame
	if err == nil {
		f, err = protocol.DecodeServer(protocol.JSON, raw)
	}
	hs.Stop()
	if !stop() && ctx.Err() != nil {
		c.Close()
		return nil, nil, ctx.Err()
	}
	if err != nil {
		c.Close()
		var ce *CloseError
		if errors.As(err, &ce) {
			return nil, nil, ce
		}
		return nil, nil, fmt.Errorf("wsgate: dial %s: %w", rawURL, err)
	}
	w := welcomeOf(f)
	w.URL = rawURL
	w.Transport = transport
	c.idleFor = opts.IdleTimeout
	if c.idleFor == 0 && w.PingInterval > 0 {
		c.idleFor = 2*w.PingInterval + 10*time.Second
	}
	if c.idleFor > 0 {
		c.idle = time.AfterFunc(c.idleFor, func() { c.Close() })
	}
	return c, w, nil
}

// Transport is SSE or Stream.
func (c *StreamConn) Transport() Transport { return c.transport }

// ReadFrame reads the next server frame. The stream's last frame
// {"type":"close"} ends it with a *CloseError; a stream that ends without
// one is a broken connection.
func (c *StreamConn) ReadFrame() (*protocol.ServerFrame, error) {
	raw, err := c.next()
	if err != nil {
		return nil, err
	}
	f, err := protocol.DecodeServer(protocol.JSON, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFrame, err)
	}
	return f, nil
}

// ReadRaw is ReadFrame without the decoding: the frame's JSON, for
// protocol.PeekServer (the load generator).
func (c *StreamConn) ReadRaw() (protocol.Format, []byte, error) {
	p, err := c.next()
	return protocol.JSON, p, err
}

// next returns the next frame's JSON: an SSE event's data, or an ndjson
// line. The close frame is returned as a *CloseError.
func (c *StreamConn) next() ([]byte, error) {
	var data []byte
	for {
		line, err := c.readLine()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("wsgate: read: %w", err)
		}
		if c.idle != nil {
			c.idle.Reset(c.idleFor)
		}
		var frame []byte
		if c.transport == Stream {
			if len(line) == 0 {
				continue
			}
			frame = line
		} else {
			switch {
			case len(line) == 0:
				if data == nil {
					continue
				}
				frame, data = data, nil
			case bytes.HasPrefix(line, []byte("data:")):
				v := bytes.TrimPrefix(line[5:], []byte(" "))
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, v...)
				if int64(len(data)) > c.maxMsg {
					c.Close()
					return nil, fmt.Errorf("wsgate: read: an event over %d bytes", c.maxMsg)
				}
				continue
			default: // comments (":"), id: and other fields
				continue
			}
		}
		if bytes.Contains(frame, []byte(`"close"`)) {
			var cf struct {
				Type   string `json:"type"`
				Code   int    `json:"code"`
				Reason string `json:"reason"`
			}
			if json.Unmarshal(frame, &cf) == nil && cf.Type == "close" {
				c.Close()
				return nil, &CloseError{Code: cf.Code, Reason: cf.Reason}
			}
		}
		return frame, nil
	}
}

// readLine reads one line without its end, within maxMsg.
func (c *StreamConn) readLine() ([]byte, error) {
	var out []byte
	for {
		part, err := c.br.ReadSlice('\n')
		out = append(out, part...)
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
		if int64(len(out)) > c.maxMsg {
			return nil, fmt.Errorf("a line over %d bytes", c.maxMsg)
		}
	}
	out = bytes.TrimSuffix(out, []byte("\n"))
	return bytes.TrimSuffix(out, []byte("\r")), nil
}

// WriteFrame posts f to the connection's node and returns once the node
// took it (202). 404 (the connection is gone) and 401 close the
// connection; 429 (over the message rate) is an error that leaves it open.
func (c *StreamConn) WriteFrame(f *protocol.ClientFrame) error {
	p, err := protocol.EncodeClient(protocol.JSON, f)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closeSent {
		return errCloseSent
	}
	return c.post(p)
}

func (c *StreamConn) post(p []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultWriteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.postURL, bytes.NewReader(p))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.session)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.Close()
		return fmt.Errorf("wsgate: write: %w", err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusAccepted:
		return nil
	case http.StatusTooManyRequests:
		code, msg := parseErrorBody(b)
		return &ReplyError{Code: code, Message: msg}
	default:
		c.Close()
		code, msg := parseErrorBody(b)
		return fmt.Errorf("wsgate: write: POST %s answered %d %s %s", c.postURL, resp.StatusCode, code, msg)
	}
}

// WriteClose ends the stream: on these transports a client that closes
// the stream has closed the connection (code and reason are not carried).
func (c *StreamConn) WriteClose(code int, reason string) error {
	c.wmu.Lock()
	c.closeSent = true
	c.wmu.Unlock()
	return c.Close()
}

// Close ends the stream at once (idempotent).
func (c *StreamConn) Close() error {
	c.closeOnce.Do(func() {
		if c.idle != nil {
			c.idle.Stop()
		}
		c.cancel()
		c.body.Close()
		c.hc.CloseIdleConnections()
	})
	return nil
}

// streamURL is the endpoint of transport at the node of rawURL, with
// Dial's query (the token stays in the header).
func streamURL(rawURL string, transport Transport, o DialOptions) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("wsgate: bad URL %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "ws", "http":
		u.Scheme = "http"
	case "wss", "https":
		u.Scheme = "https"
	default:
		return "", fmt.Errorf("wsgate: bad URL %q: want ws(s):// or http(s)://", rawURL)
	}
	if u.Host == "" {
		return "", fmt.Errorf("wsgate: bad URL %q: no host", rawURL)
	}
	path := strings.TrimSuffix(u.Path, "/")
	switch {
	case strings.HasSuffix(path, "/ws"):
		path = strings.TrimSuffix(path, "/ws")
	case strings.HasSuffix(path, "/sse"):
		path = strings.TrimSuffix(path, "/sse")
	case strings.HasSuffix(path, "/stream"):
		path = strings.TrimSuffix(path, "/stream")
	}
	u.Path = path + "/" + string(transport)
	ws := *u
	ws.Scheme = "ws"
	o.TokenVia = ViaHeader
	q, err := handshakeURL(ws.String(), o)
	if err != nil {
		return "", err
	}
	qu, _ := url.Parse(q)
	u.RawQuery = qu.RawQuery
	return u.String(), nil
}

// postURL is /v1/conn/{id} beside the stream's endpoint.
func postURL(streamURL, connID string) string {
	u, _ := url.Parse(streamURL)
	u.RawQuery = ""
	u.Path = strings.TrimSuffix(u.Path[:strings.LastIndex(u.Path, "/")+1], "/") + "/v1/conn/" + url.PathEscape(connID)
	return u.String()
}

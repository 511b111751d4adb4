package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/protocol"
)

// DialOptions configures Dial. Zero values take the documented defaults.
type DialOptions struct {
	Token    string   // JWT; empty = none
	TokenVia TokenVia // where the token goes (default header)
	User     string   // ?user= for insecure servers; empty = not sent
	Since    *int64   // ?since= resume point; nil = not sent
	Device   string   // ?device= (see Config.Device); empty = not sent
	// RoomSince resumes reliable rooms: one ?room_since=ROOM:SEQ each.
	RoomSince map[string]int64
	Format    protocol.Format

	// LocalAddr is the source IP of the TCP connection; empty = any.
	LocalAddr string
	// Control, when set, is called with the socket before it connects
	// (net.Dialer.Control): socket options such as the receive buffer.
	Control func(network, address string, c syscall.RawConn) error
	// Header holds extra handshake headers (e.g. Origin).
	Header http.Header
	// TLSConfig configures wss:// connections; nil: the system's roots
	// verify the server.
	TLSConfig *tls.Config

	// HandshakeTimeout bounds connect, upgrade and welcome (default 10s).
	HandshakeTimeout time.Duration
	// WriteTimeout bounds every write (default 10s).
	WriteTimeout time.Duration
	// IdleTimeout makes ReadFrame fail when nothing arrived for so long.
	// 0 = twice the welcome's ping interval plus 10s (none if the welcome
	// gives no interval); negative = none.
	IdleTimeout time.Duration
	// MaxMessageBytes bounds one server message (default 16 MiB).
	MaxMessageBytes int64
	// Compression offers permessage-deflate without context takeover
	// (default off). When the server accepts, messages of 512 bytes and
	// more are sent compressed and compressed server messages are
	// inflated, within MaxMessageBytes. No compression state stays with
	// the connection between messages.
	Compression bool
	// ReadBufferSize is the size of the connection's read buffer (default
	// DefaultReadBufferSize, 4 KiB; rounded up to a power of two between
	// 256 B and 1 MiB). The buffer is borrowed from a pool while bytes
	// wait to be parsed and given back between messages; a message that
	// fits it is returned by ReadRaw without a copy, a larger one is read
	// into a buffer of its own.
	ReadBufferSize int
}

// Welcome is the server's first frame, plus the URL it was reached at.
type Welcome struct {
	ConnID       string
	Node         string
	User         string
	PingInterval time.Duration
	InboxSeq     int64  // highest reliable seq ever assigned to the user
	Device       string // the connection's device ("default" when none was sent)
	// Rooms maps each reliable room the user is a member of to its seq.
	Rooms map[string]int64
	URL   string // the URL dialled (without the query Dial added)
	// Transport is the one the connection opened on.
	Transport Transport
}

// subprotocol is the one the server selects when the token comes as
// "bearer.<jwt>" (contract §3).
const subprotocol = "wsgate.v1"

var aLongTimeAgo = time.Unix(1, 0)

// Dial connects to one gateway URL (ws://host:port/ws), sends the token,
// user, since and format as opts say, and reads the welcome. A refused
// handshake is a *HandshakeError with the HTTP status, the JSON error body
// and Retry-After; a close right after the upgrade is a *CloseError.
func Dial(ctx context.Context, rawURL string, opts DialOptions) (*Conn, *Welcome, error) {
	opts = opts.withDefaults()
	target, err := handshakeURL(rawURL, opts)
	if err != nil {
		return nil, nil, err
	}
	deadline := time.Now().Add(opts.HandshakeTimeout)

	var refusal *HandshakeError
	d := ws.Dialer{
		Timeout:   opts.HandshakeTimeout,
		NetDial:   dialerWithControl(opts.LocalAddr, opts.Control).DialContext,
		TLSConfig: opts.TLSConfig,
		OnStatusError: func(status int, _ []byte, resp io.Reader) {
			refusal = parseRefusal(status, resp)
		},
	}
	h := http.Header{}
	for k, v := range opts.Header {
		h[k] = v
	}
	if opts.Token != "" {
		switch opts.TokenVia {
		case ViaHeader:
			h.Set("Authorization", "Bearer "+opts.Token)
		case ViaSubprotocol:
			d.Protocols = []string{subprotocol, "bearer." + opts.Token}
		}
	}
	if len(h) > 0 {
		d.Header = ws.HandshakeHeaderHTTP(h)
	}
	if opts.Compression {
		d.Extensions = []httphead.Option{deflateOffer()}
	}

	nc, br, hs, err := d.Dial(ctx, target)
	if err != nil {
		if refusal != nil {
			return nil, nil, refusal
		}
		var se ws.StatusError
		if errors.As(err, &se) {
			return nil, nil, &HandshakeError{Status: int(se)}
		}
		return nil, nil, fmt.Errorf("wsgate: dial %s: %w", rawURL, err)
	}
	c := newConn(nc, br, opts)
	if c.deflate, err = deflateAccepted(hs.Extensions); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("wsgate: dial %s: %w", rawURL, err)
	}
	w, err := c.readWelcome(ctx, deadline)
	if err != nil {
		c.Close()
		var ce *CloseError
		if errors.As(err, &ce) {
			return nil, nil, ce
		}
		return nil, nil, fmt.Errorf("wsgate: dial %s: %w", rawURL, err)
	}
	w.URL = rawURL
	c.idleTimeout = opts.IdleTimeout
	if c.idleTimeout == 0 && w.PingInterval > 0 {
		c.idleTimeout = 2*w.PingInterval + 10*time.Second
	}
	return c, w, nil
}

func (c *Conn) readWelcome(ctx context.Context, deadline time.Time) (*Welcome, error) {
	c.nc.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.nc.SetReadDeadline(aLongTimeAgo) })
	f, err := c.ReadFrame()
	if !stop() {
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	c.nc.SetReadDeadline(time.Time{})
	if f.Type != protocol.TypeWelcome {
		return nil, fmt.Errorf("first frame is %q, not welcome", f.Type)
	}
	w := welcomeOf(f)
	w.Transport = WebSocket
	return w, nil
}

// welcomeOf is the Welcome of a welcome frame.
func welcomeOf(f *protocol.ServerFrame) *Welcome {
	pw := f.AsWelcome()
	return &Welcome{
		ConnID: pw.ConnID, Node: pw.Node, User: pw.User,
		PingInterval: time.Duration(pw.PingIntervalMS) * time.Millisecond,
		InboxSeq:     pw.InboxSeq, Device: pw.Device,
		Rooms: pw.Rooms,
	}
}

func (o DialOptions) withDefaults() DialOptions {
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	return o
}

// handshakeURL adds token (ViaQuery), user, since, device and format to
// rawURL.
func handshakeURL(rawURL string, o DialOptions) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("wsgate: bad URL %q: %w", rawURL, err)
	}
	if (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return "", fmt.Errorf("wsgate: bad URL %q: want ws(s)://host[:port]/path", rawURL)
	}
	q := u.Query()
	if o.Token != "" && o.TokenVia == ViaQuery {
		q.Set("token", o.Token)
	}
	if o.User != "" {
		q.Set("user", o.User)
	}
	if o.Since != nil {
		q.Set("since", strconv.FormatInt(*o.Since, 10))
	}
	if o.Device != "" {
		q.Set("device", o.Device)
	}
	if o.Format == protocol.MsgPack {
		q.Set("format", o.Format.String())
	}
	rooms := make([]string, 0, len(o.RoomSince))
	for room := range o.RoomSince {
		rooms = append(rooms, room)
	}
	slices.Sort(rooms)
	for _, room := range rooms {
		q.Add("room_since", room+":"+strconv.FormatInt(o.RoomSince[room], 10))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// netDialer binds dials to a source IP when one is given.
func netDialer(localIP string) *net.Dialer {
	d := &net.Dialer{}
	if ip := net.ParseIP(localIP); ip != nil {
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	return d
}

// dialerWithControl is netDialer with a Control function (nil: none).
func dialerWithControl(localIP string, control func(network, address string, c syscall.RawConn) error) *net.Dialer {
	d := netDialer(localIP)
	d.Control = control
	return d
}

// parseRefusal reads the HTTP answer of a refused handshake: status,
// {"error":{"code","message"}} body and Retry-After.
func parseRefusal(status int, resp io.Reader) *HandshakeError {
	e := &HandshakeError{Status: status}
	r, err := http.ReadResponse(bufio.NewReader(resp), nil)
	if err != nil {
		return e
	}
	defer r.Body.Close()
	e.RetryAfter = parseRetryAfter(r.Header.Get("Retry-After"), time.Now())
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	e.Code, e.Message = parseErrorBody(body)
	return e
}

// parseErrorBody returns the code and message of a contract error body, or
// the start of any other body as the message.
func parseErrorBody(b []byte) (code, msg string) {
	var v struct {
		Error *protocol.ErrorBody `json:"error"`
	}
	if json.Unmarshal(b, &v) == nil && v.Error != nil {
		return v.Error.Code, v.Error.Message
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return "", s
}

// maxRetryAfter caps a server's Retry-After.
const maxRetryAfter = 10 * time.Minute

// parseRetryAfter reads delay-seconds or an HTTP date; 0 if absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		d = time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, maxRetryAfter))
}

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// TokenVia says where the token goes in the handshake (contract §3).
type TokenVia int

const (
	// ViaHeader sends "Authorization: Bearer <token>" (the default).
	ViaHeader TokenVia = iota
	// ViaSubprotocol offers the subprotocols "wsgate.v1" and "bearer.<token>",
	// as a browser must.
	ViaSubprotocol
	// ViaQuery sends the token in the "token" query parameter. Tokens in URLs
	// end up in access logs: use short-lived ones.
	ViaQuery
)

func (v TokenVia) String() string {
	switch v {
	case ViaHeader:
		return "header"
	case ViaSubprotocol:
		return "subprotocol"
	case ViaQuery:
		return "query"
	}
	return fmt.Sprintf("TokenVia(%d)", int(v))
}

// Defaults of Config. LESSONS "Fleet changes": 1 s doubling to 30 s, full jitter.
const (
	DefaultMinBackoff       = time.Second
	DefaultMaxBackoff       = 30 * time.Second
	DefaultAckEvery         = 50
	DefaultAckDelay         = 200 * time.Millisecond
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
)

// Config configures a Client. Zero values take the documented defaults,
// filled by New.
type Config struct {
	// URL is a gateway's WebSocket endpoint, e.g. ws://host:8080/ws. Used
	// when Allocator is empty, and when the allocator cannot be asked.
	URL string
	// Allocator is the base URL of an allocator (or any gateway), e.g.
	// http://host:8080. When set, every connection that does not follow a
	// redirect asks GET {Allocator}/v1/allocate?user=User for the node URL.
	Allocator string
	// User is the user id: sent as ?user= (insecure servers only) when Token
	// is nil, and given to the allocator.
	User string
	// Token returns the JWT to connect with. It is called before every dial,
	// so that a reconnect after close 4401 (token expired) gets a fresh one.
	// May be nil when the server runs with WSGATE_AUTH_INSECURE and User is set.
	Token func(ctx context.Context) (string, error)
	// TokenVia: ViaHeader (default), ViaSubprotocol or ViaQuery.
	TokenVia TokenVia
	// Format of the frames: protocol.JSON (default) or protocol.MsgPack.
	Format protocol.Format
	// Since is the resume point of the first connection (the highest
	// reliable seq the application has already processed; it is
	// acknowledged on connect); nil = none, the server then sends every
	// unacknowledged message.
	Since *int64
	// Device is a stable id of this device (1 to 64 of [A-Za-z0-9_.-]),
	// sent as ?device= on every connect and reconnect: the server keeps
	// one acknowledgement position per device, so a message this device
	// acknowledged still reaches the user's other devices, and a connect
	// without since resumes from this device's own position. Keep it
	// across restarts of the application (a new id is a new device, which
	// gets every message the server still keeps). Empty = the server's
	// "default" device, shared by every client that names none.
	Device string

	// RoomSince are the resume points of reliable rooms for the first
	// connection (room -> highest seq processed); later connections resume
	// every room the client has seen a seq of (see Client.RoomSeqs).
	RoomSince map[string]int64

	// MinBackoff (default 1s) and MaxBackoff (default 30s) bound the
	// exponential backoff: before retry n (from 0) the client sleeps a random
	// duration in [0, min(MaxBackoff, MinBackoff*2^n)].
	MinBackoff, MaxBackoff time.Duration
	// AckEvery (default 50) and AckDelay (default 200ms): a cumulative ack
	// is sent after AckEvery reliable messages or AckDelay after the first
	// unacknowledged one, whichever comes first, and on Close.
	AckEvery int
	AckDelay time.Duration

	// HandshakeTimeout bounds connect + upgrade + welcome (default 10s).
	HandshakeTimeout time.Duration
	// WriteTimeout bounds every frame write (default 10s).
	WriteTimeout time.Duration
	// IdleTimeout closes a connection on which nothing (not even a server
	// ping) arrived for this long. 0 = derived from the welcome's
	// ping_interval_ms (see Dial); negative = never.
	IdleTimeout time.Duration
	// LocalAddr is the source IP of the dials (load tests spread connections
	// over several source IPs to pass the ephemeral-port limit).
	LocalAddr string
	// Compression offers permessage-deflate on every dial (default off;
	// see DialOptions.Compression).
	Compression bool
	// ReadBufferSize is the read buffer of each connection (default
	// DefaultReadBufferSize; see DialOptions.ReadBufferSize). It is borrowed
	// from a pool while bytes wait to be parsed, so an idle client holds
	// none.
	ReadBufferSize int

	// Transports are tried in order (contract §18; default
	// DefaultTransports: WebSocket, SSE, Stream). When a dial fails (a
	// refused upgrade, a close before the welcome), the next is tried at
	// once at the same node; after all of them failed in a row the
	// backoff applies, and the next round starts again from the first. A
	// connection that opened on a fallback sends the next dial back to
	// the first too: a node that was down refuses WebSocket as well. SSE
	// and Stream carry JSON only: with Format MsgPack only WebSocket is
	// used.
	Transports []Transport

	// Logger receives connection events; nil = discard.
	Logger *slog.Logger
	// Handlers are called from the client's reader goroutine (see Handlers).
	Handlers Handlers
}

// Handlers receive the client's events. Every callback is optional and is
// called from the goroutine that runs Run (the connection's reader), one
// at a time and in the order of the frames: a slow callback delays reading
// (and the server may then close a slow consumer with 4008). A callback must
// not wait for Publish, Join, Leave or Ping of the same client, whose replies
// are read by that very goroutine; start a goroutine for that.
type Handlers struct {
	// OnMessage gets every pushed message, reliable ones (Seq > 0) in seq
	// order and without duplicates. A reliable message is acknowledged
	// after OnMessage returns.
	OnMessage func(protocol.Message)
	// OnWelcome is called after every successful connect.
	OnWelcome func(Welcome)
	// OnGap reports reliable messages from..to (missed of them) that the
	// server dropped (inbox limit or TTL) and that will never come.
	OnGap func(from, to, missed int64)
	// OnRoomGap reports the same for a reliable room's history (a gap
	// frame with a room target): from..to of room are gone (history limit
	// or TTL). Those seqs are skipped whether or not it is set.
	OnRoomGap func(room string, from, to, missed int64)
	// OnState reports state changes; err is the cause of a reconnect or the
	// error Run returns with StateClosed.
	OnState func(s State, err error)
	// OnClose reports the end of every connection: the close code sent by
	// the server, or 1006 when the connection broke without one.
	OnClose func(code int, reason string)
	// OnError reports an error frame that did not answer a request (see
	// Publish).
	OnError func(protocol.ErrorBody)
	// OnPresence gets the joined and left frames of rooms whose namespace
	// has join_leave: for one ConnID, never left before joined.
	OnPresence func(PresenceEvent)
}

// PresenceEvent is a joined or left frame: ConnID of User entered
// (Type "joined", with its Info) or left Room's presence.
type PresenceEvent struct {
	Type   string
	Room   string
	User   string
	ConnID string
	Info   json.RawMessage
}

// State is the client's connection state.
type State int

const (
	StateConnecting   State = iota // first connection attempt
	StateConnected                 // welcome received
	StateReconnecting              // connection lost or refused; waiting or dialing again
	StateClosed                    // Run returned
)

func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateConnected:
		return "connected"
	case StateReconnecting:
		return "reconnecting"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// withDefaults fills zero values and checks the configuration; errors name
// the setting.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.AckEvery == 0 {
		cfg.AckEvery = DefaultAckEvery
	}
	if cfg.AckDelay == 0 {
		cfg.AckDelay = DefaultAckDelay
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Transports == nil {
		cfg.Transports = DefaultTransports
	}
	cfg.Transports = slices.Clone(cfg.Transports)
	for _, t := range cfg.Transports {
		if t != WebSocket && t != SSE && t != Stream {
			return cfg, fmt.Errorf("client: Transports: unknown transport %q (websocket, sse, stream)", t)
		}
	}
	if cfg.Format == protocol.MsgPack {
		cfg.Transports = slices.DeleteFunc(cfg.Transports, func(t Transport) bool { return t != WebSocket })
	}
	if len(cfg.Transports) == 0 {
		return cfg, errors.New("client: Transports: none usable (SSE and Stream carry JSON only)")
	}

	switch {
	case cfg.URL == "" && cfg.Allocator == "":
		return cfg, errors.New("client: URL or Allocator is required")
	case cfg.Token == nil && cfg.User == "":
		return cfg, errors.New("client: Token is required (or User, for an insecure server)")
	case cfg.TokenVia < ViaHeader || cfg.TokenVia > ViaQuery:
		return cfg, fmt.Errorf("client: TokenVia: unknown value %d", int(cfg.TokenVia))
	case cfg.Format != protocol.JSON && cfg.Format != protocol.MsgPack:
		return cfg, fmt.Errorf("client: Format: unknown value %d", cfg.Format)
	case cfg.MinBackoff < 0 || cfg.MaxBackoff < cfg.MinBackoff:
		return cfg, fmt.Errorf("client: MinBackoff %v and MaxBackoff %v: need 0 < MinBackoff <= MaxBackoff", cfg.MinBackoff, cfg.MaxBackoff)
	case cfg.Device != "" && protocol.ValidDevice(cfg.Device) != nil:
		return cfg, fmt.Errorf("client: Device: %v", protocol.ValidDevice(cfg.Device))
	case cfg.AckEvery < 0:
		return cfg, fmt.Errorf("client: AckEvery must be positive, got %d", cfg.AckEvery)
	case cfg.AckDelay < 0 || cfg.HandshakeTimeout < 0 || cfg.WriteTimeout < 0:
		return cfg, errors.New("client: AckDelay, HandshakeTimeout and WriteTimeout must not be negative")
	case cfg.ReadBufferSize < 0:
		return cfg, fmt.Errorf("client: ReadBufferSize must not be negative, got %d", cfg.ReadBufferSize)
	}
	if cfg.URL != "" {
		if err := checkWSURL(cfg.URL); err != nil {
			return cfg, fmt.Errorf("client: URL: %w", err)
		}
	}
	if cfg.Allocator != "" {
		u, err := url.Parse(cfg.Allocator)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, fmt.Errorf("client: Allocator: want http(s)://host[:port], got %q", cfg.Allocator)
		}
	}
	if cfg.LocalAddr != "" && net.ParseIP(cfg.LocalAddr) == nil {
		return cfg, fmt.Errorf("client: LocalAddr: not an IP address: %q", cfg.LocalAddr)
	}
	return cfg, nil
}

func checkWSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return fmt.Errorf("want ws(s)://host[:port]/path, got %q", s)
	}
	return nil
}

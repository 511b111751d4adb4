package config

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wsgate/wsgate/internal/rooms"
)

// Gateway is the configuration of one gateway node (wsgate gateway and
// wsgate dev). The settings and defaults of CONTRACT.md §1 plus a few of
// our own; NewGatewaySet registers them, Finish fills derived defaults and
// Validate checks them.
type Gateway struct {
	Listen       string // host:port of the HTTP server
	AdminListen  string // host:port of the admin listener (API, metrics, console, profiler); empty = all on Listen
	NodeID       string // unique node id; Finish: hostname-<6 hex>
	AdvertiseURL string // ws(s):// URL clients use; Finish derives it from Listen

	RedisURL    string // empty = embedded in-process backend (single node)
	RedisPrefix string // prefix of every Redis key and channel

	APIKey           string        // server API key; empty = API refused except in dev
	JWTSecret        string        // HS256 secrets, comma-separated (see JWTSecrets)
	JWTPublicKeyFile string        // PEM public key, RS256 / ES256
	JWKSURL          string        // JWKS endpoint: RS256, ES256, EdDSA keys by kid
	JWTIssuer        string        // required iss when set
	JWTAudience      string        // required aud when set
	JWTLeeway        time.Duration // clock skew allowed on exp and nbf
	JWTMaxLifetime   time.Duration // refuse exp further than this ahead; 0 = no limit
	AuthInsecure     bool          // accept ?user=ID without a token
	AllowQueryToken  bool          // accept ?token=
	AllowedOrigins   []string      // allowed Origin values, "*" = any; empty = same host

	MaxMessageBytes    int
	PartialFrameBudget int      // bytes held for unfinished client frames, node-wide; 0 = no limit
	MaxConnsPerIP      int      // 0 = no limit
	MaxConnsPerUser    int      // 0 = no limit, cluster-wide
	MaxRoomsPerUser    int      // room memberships per user, cluster-wide (at least 1)
	HandshakeRatePerIP float64  // per second, 0 = no limit
	MessageRate        float64  // client frames per second per connection, 0 = no limit
	DevicePolicy       string   // DeviceMulti or DeviceSingle
	Compression        string   // "on": permessage-deflate when the client offers it; "off": never
	Transports         []string // WSGATE_TRANSPORTS: endpoints served, out of TransportNames

	// The Pusher app the node speaks for (contract 21; docs/pusher.md),
	// with "pusher" in Transports.
	PusherAppID  string
	PusherKey    string
	PusherSecret string
	// Where Pusher-format webhooks go (channel_occupied, channel_vacated,
	// member_added, member_removed, client_event); empty = none.
	PusherWebhookURL string

	UpstreamURL    string // where send frames and events go (contract section 13); empty = none
	UpstreamSecret string // HMAC-SHA256 key of webhook and rpc bodies
	RPCURL         string // HTTP endpoint answering rpc frames; empty = rpc refused

	// Downstream sources (contract section 20).
	DownstreamURL      string // comma list of sources the nodes consume publishes from; empty = none
	DownstreamInFlight int    // records one node holds read and not yet acknowledged, per source

	PingInterval time.Duration
	PongTimeout  time.Duration
	RouteTTL     time.Duration
	SendQueue    int
	InboxLimit   int
	InboxTTL     time.Duration
	// RoomHistoryLimit and RoomHistoryTTL bound a reliable room's history.
	RoomHistoryLimit int
	RoomHistoryTTL   time.Duration
	// RoomsFile is the namespaces file (contract section 19); empty = none.
	// Rooms is it parsed by Validate.
	RoomsFile string
	Rooms     *rooms.Set
	// RoomsConfigFile is the config file whose rooms: key gave Rooms
	// ("" when none did).
	RoomsConfigFile string
	DrainTimeout    time.Duration
	DrainRate       float64 // connections per second, 0 = no pacing
	Warmup          time.Duration

	// Lifecycle events and the connect proxy (contract section 13).
	Events           []string      // WSGATE_EVENTS: names out of EventNames
	UndeliveredAfter time.Duration // 0 = no undelivered events
	ConnectURL       string        // HTTP endpoint that authorizes handshakes

	// Our own settings (not in the contract table).
	TLSCertFile       string        // TLS on the listener: both or neither
	TLSKeyFile        string        //
	TLSOwnRecords     string        // "on": TLS 1.3 WebSocket connections on the event loop's record layer; "off": all on crypto/tls
	TrustedProxies    []string      // load balancers (IPs or CIDRs) whose PROXY header or X-Forwarded-For names the client
	ReliableReplicas  int           // Redis WAIT replicas before a reliable publish is answered
	HeartbeatInterval time.Duration // node record report period
	LogLevel          string        // debug, info, warn, error
	DebugListen       string        // net/http/pprof listener; empty = off
	Dev               bool          // hidden: set by the dev subcommand
}

// Device policies (WSGATE_DEVICE_POLICY).
const (
	DeviceMulti  = "multi"
	DeviceSingle = "single"
)

// EventNames are the lifecycle events WSGATE_EVENTS may list.
var EventNames = []string{"connect", "disconnect", "online", "offline", "join", "leave", "ack", "undelivered", "occupied", "vacated"}

// Limits checked by Validate.
const (
	MinMessageBytes = 128
	MaxMessageBytes = 16 << 20
	MaxSendQueue    = 65536
	MaxInboxLimit   = 100000
)

// NewGatewaySet registers every gateway setting with cfg's fields and
// writes the defaults into cfg.
func NewGatewaySet(cfg *Gateway) *Set {
	s := NewSet("gateway")
	s.Summary = "Runs one gateway node: WebSocket endpoint, server API, metrics and console."
	registerGateway(s, cfg)
	return s
}

// DevRooms are the namespaces of wsgate dev without a rooms file: every
// room has presence and joined/left (the demo chat shows who is online).
var DevRooms = func() *rooms.Set {
	s, err := rooms.Parse([]byte("rooms:\n  - pattern: \"*\"\n    presence: true\n    join_leave: true\n"))
	if err != nil {
		panic(err)
	}
	return s
}()

// roomsBlock takes the rooms: key of the config file: the namespaces, as
// a rooms file would list them (WSGATE_ROOMS_FILE, when set, wins).
func roomsBlock(cfg *Gateway) func(path string, v *yaml.Node) error {
	return func(path string, v *yaml.Node) error {
		b, err := yaml.Marshal(map[string]*yaml.Node{"rooms": v})
		if err != nil {
			return err
		}
		set, err := rooms.Parse(b)
		if err != nil {
			return err
		}
		cfg.Rooms, cfg.RoomsConfigFile = set, path
		return nil
	}
}

// RoomsOfConfigFile reads the namespaces of the rooms: key of a config
// file again (a reload).
func RoomsOfConfigFile(path string) (*rooms.Set, error) {
	var cfg Gateway
	s := NewGatewaySet(&cfg)
	if err := s.loadFile(path); err != nil {
		return nil, err
	}
	if cfg.Rooms == nil {
		return nil, fmt.Errorf("config file %s has no rooms: key any more", path)
	}
	return cfg.Rooms, nil
}

// NewDevSet is NewGatewaySet for the dev subcommand: Dev is set and
// auth-insecure defaults to true (a single embedded node, no Redis needed).
func NewDevSet(cfg *Gateway) *Set {
	s := NewSet("dev")
	s.Summary = "Runs a single embedded node with demo auth, console and demo chat (no Redis needed)."
	registerGateway(s, cfg)
	if err := s.SetDefault("auth-insecure", "true"); err != nil {
		panic(err)
	}
	// Its API is open: loopback only unless --listen says otherwise.
	if err := s.SetDefault("listen", "127.0.0.1:8080"); err != nil {
		panic(err)
	}
	cfg.Dev = true
	return s
}

// JWTSecrets returns the HS256 secrets of JWTSecret: a comma list, each
// trimmed, empty entries dropped. A token signed with any is accepted.
func (c *Gateway) JWTSecrets() [][]byte {
	var out [][]byte
	for s := range strings.SplitSeq(c.JWTSecret, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, []byte(s))
		}
	}
	return out
}

func registerGateway(s *Set, c *Gateway) {
	s.blocks = map[string]func(string, *yaml.Node) error{"rooms": roomsBlock(c)}
	s.String(&c.Listen, "listen", ":8080", "HTTP listen address (WebSocket, and API, metrics and console unless admin-listen is set)")
	s.String(&c.AdminListen, "admin-listen", "", "listen address of the admin plane: the server API, /metrics, the console and the profiler; "+
		"when set, the listen address serves only /ws, /healthz, /readyz, /v1/allocate and /client/wsgate.js (and /demo in dev)")
	s.String(&c.NodeID, "node-id", "", "unique node id (letters, digits, . _ -)").
		DefaultText("hostname-<6 random hex digits>")
	s.String(&c.AdvertiseURL, "advertise-url", "", "the ws:// or wss:// URL clients use to reach this node").
		DefaultText("ws://<listen host>:<port>/ws (127.0.0.1 for an empty or wildcard host)")
	s.String(&c.RedisURL, "redis-url", "", "redis://[:password@]host:port/db (rediss:// for TLS), a comma list of Redis Cluster seeds host:port "+
		"(or redis-cluster://[:password@]host:port,...), or redis-sentinel://[:password@]host:port[,host:port]/master[?db=N]; "+
		"empty = embedded in-process backend (single node only)").
		SecretURL()
	s.String(&c.RedisPrefix, "redis-prefix", "wsgate", "prefix of every Redis key and channel (several clusters can share one Redis)")
	s.String(&c.APIKey, "api-key", "", "key for the server API; empty = server API refused (401) except in dev").Secret()
	s.String(&c.JWTSecret, "jwt-secret", "", "HS256 secrets for client tokens, comma-separated: a token signed with any of them is accepted").Secret()
	s.String(&c.JWTPublicKeyFile, "jwt-public-key-file", "", "PEM public key file (RS256 / ES256) for client tokens")
	s.String(&c.JWTIssuer, "jwt-issuer", "", "when set, the token's iss must match")
	s.String(&c.JWTAudience, "jwt-audience", "", "when set, the token's aud must match")
	s.String(&c.JWKSURL, "jwks-url", "", "JWKS endpoint (http or https) of RS256, ES256 and EdDSA keys chosen by the token's kid; "+
		"fetched at start, every 5 minutes and on an unknown kid (at most every 30 s)")
	s.Duration(&c.JWTLeeway, "jwt-leeway", 0, "clock skew allowed on the token's exp and nbf")
	s.Duration(&c.JWTMaxLifetime, "jwt-max-lifetime", 0, "refuse tokens whose exp lies further than this in the future (0 = no limit)")
	s.Bool(&c.AuthInsecure, "auth-insecure", false, "accept ?user=ID without a token (for tests; logged loudly)")
	s.Bool(&c.AllowQueryToken, "allow-query-token", true, "accept the token in the token query parameter")
	s.List(&c.AllowedOrigins, "allowed-origins", nil, "comma list of allowed Origin values (* allows any), for handshakes and for CORS on /client/wsgate.js and /v1/allocate; "+
		"empty = an Origin header must be same-host; requests without Origin are allowed")
	s.Int(&c.MaxMessageBytes, "max-message-bytes", 65536, "largest client frame in bytes (128 to 16 MiB)")
	s.Int(&c.PartialFrameBudget, "partial-frame-budget", 64<<20, "bytes the node holds for client frames not yet complete, all connections together; "+
		"past it the connections holding the most are closed with 1008 (0 = no limit)")
	s.Int(&c.MaxConnsPerIP, "max-conns-per-ip", 0, "concurrent connections per client IP on this node (0 = no limit)")
	s.Int(&c.MaxConnsPerUser, "max-conns-per-user", 0, "concurrent connections per user, cluster-wide (0 = no limit)")
	s.Int(&c.MaxRoomsPerUser, "max-rooms-per-user", 1000, "room memberships one user may hold, cluster-wide; a join beyond it is refused (at least 1)")
	s.Float(&c.HandshakeRatePerIP, "handshake-rate-per-ip", 0, "handshakes per second per client IP on this node, burst = rate (0 = no limit)")
	s.Float(&c.MessageRate, "message-rate", 0, "client frames per second per connection, burst = rate (0 = no limit)")
	s.String(&c.DevicePolicy, "device-policy", DeviceMulti, "multi: a user may hold many connections; "+
		"single: a new connection replaces the user's older ones cluster-wide")
	s.String(&c.Compression, "compression", "on", "on: permessage-deflate (no context takeover) when the client offers it, "+
		"for frames of 512 bytes and more; off: never negotiated")
	s.List(&c.Transports, "transports", []string{"ws", "sse", "stream"}, "comma list of client endpoints served: ws (/ws), sse (/sse), stream (/stream), "+
		"pusher (/app/{key}, the Pusher Channels protocol; needs the three pusher settings); POST /v1/conn/{conn_id} is served with sse or stream")
	s.String(&c.PusherAppID, "pusher-app-id", "", "the Pusher app id of the Pusher HTTP API (/apps/{app_id}/...); with pusher in the transports")
	s.String(&c.PusherKey, "pusher-key", "", "the Pusher app key clients connect with (/app/{key}) and the HTTP API's auth_key")
	s.String(&c.PusherSecret, "pusher-secret", "", "the Pusher app secret: signs channel auth strings and the HTTP API's requests").Secret()
	s.String(&c.PusherWebhookURL, "pusher-webhook-url", "", "http(s):// endpoint getting Pusher-format webhooks (channel_occupied, channel_vacated, "+
		"member_added, member_removed, client_event), signed with the Pusher key and secret; with pusher in the transports; empty = none").SecretURL()
	s.String(&c.UpstreamURL, "upstream-url", "", "where client send frames and events go: redis://host:port/db?stream=NAME, "+
		"nats://host:port?subject=S&stream=N, kafka://b1:9092,b2:9092/TOPIC or an http(s):// webhook; empty = send refused").
		SecretURL()
	s.String(&c.UpstreamSecret, "upstream-secret", "", "HMAC-SHA256 key signing webhook, rpc and connect-proxy requests (X-Wsgate-Signature-V2 and X-Wsgate-Signature; docs/upstream.md)").Secret()
	s.String(&c.DownstreamURL, "downstream-url", "", "comma list of sources the nodes consume publishes from (docs/downstream.md): "+
		"redis://host:port/db?stream=NAME&group=GROUP, nats://host:port?stream=S&subject=SUBJ&durable=NAME, kafka://b1:9092,b2:9092/TOPIC?group=GROUP; "+
		"{node} is replaced by the node id; empty = none").SecretURL()
	s.Int(&c.DownstreamInFlight, "downstream-in-flight", 256, "records of each downstream source one node holds read and not yet acknowledged; past it the node stops reading (1 to 65536)")
	s.String(&c.RPCURL, "rpc-url", "", "http(s):// endpoint answering client rpc frames; empty = rpc refused").SecretURL()
	s.Duration(&c.PingInterval, "ping-interval", 25*time.Second, "server WebSocket ping period")
	s.Duration(&c.PongTimeout, "pong-timeout", 60*time.Second, "close a connection silent for this long; must exceed the ping interval")
	s.Duration(&c.RouteTTL, "route-ttl", 90*time.Second, "lifetime of a route record that is not refreshed (at least 3 heartbeat intervals)")
	s.Int(&c.SendQueue, "send-queue", 256, "per-connection outbound queue length (1 to 65536)")
	s.Int(&c.InboxLimit, "inbox-limit", 100, "unacknowledged reliable messages kept per user (1 to 100000)")
	s.Duration(&c.InboxTTL, "inbox-ttl", 24*time.Hour, "how long each unacknowledged reliable message is kept")
	s.Int(&c.RoomHistoryLimit, "room-history-limit", 100, "messages kept per reliable room (1 to 100000)")
	s.Duration(&c.RoomHistoryTTL, "room-history-ttl", 24*time.Hour, "how long each message of a reliable room is kept")
	s.String(&c.RoomsFile, "rooms-file", "", "YAML file of room namespaces: per room-name pattern, reliable, history_limit, history_ttl, presence, "+
		"join_leave, publish, echo, max_members, scope, join_proxy (docs/rooms.md); read again on SIGHUP; empty = none")
	s.Duration(&c.DrainTimeout, "drain-timeout", 2*time.Minute, "how long a draining node waits for clients before closing the rest")
	s.Float(&c.DrainRate, "drain-rate", 500, "connections per second a draining node redirects (0 = all at once)")
	s.Duration(&c.Warmup, "warmup", 0, "time a new node spends warming with a rising weight before active")
	s.List(&c.Events, "events", nil, "comma list of lifecycle events sent upstream: "+strings.Join(EventNames, ", "))
	s.Duration(&c.UndeliveredAfter, "undelivered-after", 0, "emit undelivered for a reliable user message no device acknowledged within this time (0 = off)")
	s.String(&c.ConnectURL, "connect-url", "", "HTTP endpoint that authorizes handshakes from their cookies and headers, instead of or besides a JWT").
		SecretURL()

	s.String(&c.TLSCertFile, "tls-cert-file", "", "PEM certificate for TLS on the listener (with --tls-key-file)")
	s.String(&c.TLSKeyFile, "tls-key-file", "", "PEM private key for TLS on the listener (with --tls-cert-file)")
	s.String(&c.TLSOwnRecords, "tls-own-records", "on", "on: a TLS 1.3 WebSocket connection is held by the event loop with the node's own record layer "+
		"(no goroutine per connection); off: every TLS connection stays on Go's crypto/tls, with two goroutines per WebSocket connection")
	s.List(&c.TrustedProxies, "trusted-proxies", nil, "comma list of load balancer IPs or CIDRs; from these peers the client's IP "+
		"(for the per-IP limits and logs) is read from a PROXY protocol header (v1 or v2) or from X-Forwarded-For / X-Real-IP")
	s.Int(&c.ReliableReplicas, "reliable-replicas", 0, "Redis replicas (WAIT) that must have a reliable message before the publish is answered (0 = do not wait)")
	s.Duration(&c.HeartbeatInterval, "heartbeat-interval", 2*time.Second, "period of the node record report (load, status, heartbeat)")
	s.String(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	s.String(&c.DebugListen, "debug-listen", "", "listen address of the Go profiler (/debug/pprof/) for loopback peers only; empty = off "+
		"(the profiler is also on the admin listener, and without one on the listen address for loopback peers)")
	s.Bool(&c.Dev, "dev", false, "dev mode (set by the dev subcommand)").Hide()
}

// TransportNames are the values WSGATE_TRANSPORTS takes.
var TransportNames = []string{"ws", "sse", "stream", "pusher"}

// TransportOn reports whether the endpoint of transport name is served.
func (c *Gateway) TransportOn(name string) bool { return slices.Contains(c.Transports, name) }

// CompressionOn reports whether permessage-deflate is negotiated.
func (c *Gateway) CompressionOn() bool { return c.Compression == "on" }

// TLSOwnRecordsOn reports whether TLS 1.3 WebSocket connections use the
// event loop's own record layer.
func (c *Gateway) TLSOwnRecordsOn() bool { return c.TLSOwnRecords != "off" }

// Finish fills the defaults that depend on other settings or on the
// machine; call it after Load and before Validate. NodeID becomes
// hostname-<6 random hex digits>; AdvertiseURL becomes
// ws://<listen host>:<port>/ws (wss with TLS), with 127.0.0.1 for an empty
// or wildcard host. With port 0 AdvertiseURL stays empty: the caller sets
// it from the bound address with AdvertiseURLFor. Problems (a bad listen
// address) are left to Validate.
func (c *Gateway) Finish() {
	if c.NodeID == "" {
		c.NodeID = defaultNodeID()
	}
	if c.AdvertiseURL == "" {
		c.AdvertiseURL = AdvertiseURLFor(c.Listen, c.TLSCertFile != "")
	}
}

// AdvertiseURLFor returns ws://host:port/ws (wss:// when tls) for a listen
// address, with 127.0.0.1 for an empty or wildcard host; "" when addr has
// no usable port (port 0 or unparsable).
func AdvertiseURLFor(addr string, tls bool) string {
	host, port, err := splitListen(addr)
	if err != nil || port == 0 {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	scheme := "ws"
	if tls {
		scheme = "wss"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/ws"
}

// hostname is os.Hostname, replaced in tests.
var hostname = defaultHostname

var defaultHostname = os.Hostname

// defaultNodeID returns the host name (reduced to the characters a node id
// may hold) plus "-" and 6 random hex digits.
func defaultNodeID() string {
	h, err := hostname()
	if err != nil || h == "" {
		h = "wsgate"
	}
	h = strings.Map(func(r rune) rune {
		if nodeIDRune(r) {
			return r
		}
		return '-'
	}, h)
	if len(h) > 64 {
		h = h[:64]
	}
	var b [3]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return h + "-" + hex.EncodeToString(b[:])
}

func nodeIDRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

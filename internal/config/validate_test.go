package config

import (
	"strings"
	"testing"
	"time"
)

// validGateway returns the defaults with a JWT secret, finished.
func validGateway(t *testing.T) Gateway {
	t.Helper()
	var c Gateway
	if err := NewGatewaySet(&c).Load(nil, envOf(map[string]string{"WSGATE_JWT_SECRET": "s3cret"})); err != nil {
		t.Fatal(err)
	}
	c.Finish()
	return c
}

func TestGatewayValidate(t *testing.T) {
	pem := writeFile(t, "key.pem", "-----BEGIN PUBLIC KEY-----\n")
	dir := t.TempDir()
	tests := []struct {
		name string
		edit func(c *Gateway)
		err  string
	}{
		{"defaults", func(c *Gateway) {}, ""},
		{"rooms file missing", func(c *Gateway) { c.RoomsFile = dir + "/none.yml" }, "WSGATE_ROOMS_FILE: open "},
		{"rooms file bad", func(c *Gateway) {
			c.RoomsFile = writeFile(t, "rooms.yml", "rooms:\n  - pattern: a\n    scope: tab\n")
		}, `scope must be user or connection, got "tab"`},
		{"rooms file ok", func(c *Gateway) {
			c.RoomsFile = writeFile(t, "rooms-ok.yml", "rooms:\n  - pattern: \"chat:*\"\n    presence: true\n")
		}, ""},
		{"listen no port", func(c *Gateway) { c.Listen = "localhost" },
			`WSGATE_LISTEN ("localhost") must be host:port, e.g. :8080 or 127.0.0.1:8080: missing port in address`},
		{"listen bad port", func(c *Gateway) { c.Listen = ":http" }, `WSGATE_LISTEN (":http") must be host:port|port "http"`},
		{"listen port range", func(c *Gateway) { c.Listen = ":70000" }, `WSGATE_LISTEN (":70000") must be host:port`},
		{"listen ipv6", func(c *Gateway) { c.Listen = "[::1]:8080" }, ""},
		{"node id empty", func(c *Gateway) { c.NodeID = "" }, "WSGATE_NODE_ID must not be empty"},
		{"node id chars", func(c *Gateway) { c.NodeID = "a/b" }, `WSGATE_NODE_ID ("a/b") may hold only letters, digits`},
		{"node id long", func(c *Gateway) { c.NodeID = strings.Repeat("n", 129) }, "WSGATE_NODE_ID is longer than 128"},
		{"advertise http", func(c *Gateway) { c.AdvertiseURL = "http://h:1/ws" },
			`WSGATE_ADVERTISE_URL ("http://h:1/ws") must be a ws:// or wss:// URL`},
		{"advertise no host", func(c *Gateway) { c.AdvertiseURL = "ws:///ws" }, "WSGATE_ADVERTISE_URL"},
		{"advertise wss", func(c *Gateway) { c.AdvertiseURL = "wss://gw.example.com/ws" }, ""},
		{"redis single", func(c *Gateway) { c.RedisURL = "redis://:pw@localhost:6379/2" }, ""},
		{"redis tls", func(c *Gateway) { c.RedisURL = "rediss://redis.example:6380" }, ""},
		{"redis cluster", func(c *Gateway) { c.RedisURL = "10.0.0.1:7000,10.0.0.2:7000" }, ""},
		{"redis sentinel", func(c *Gateway) { c.RedisURL = "redis-sentinel://:pw@s1:26379,s2:26379/mymaster?db=1" }, ""},
		{"redis bad scheme", func(c *Gateway) { c.RedisURL = "http://x" }, `WSGATE_REDIS_URL ("http://x") is not a Redis address: scheme "http" not supported`},
		{"redis bad db hides password", func(c *Gateway) { c.RedisURL = "redis://:hunter2@h:6379/x" },
			`WSGATE_REDIS_URL ("redis://:xxxxx@h:6379/x") is not a Redis address: redis: invalid database number`},
		{"redis bad seed", func(c *Gateway) { c.RedisURL = "h1:7000,h2" }, `WSGATE_REDIS_URL ("h1:7000,h2") is not a Redis address: address "h2"`},
		{"redis prefix empty", func(c *Gateway) { c.RedisPrefix = "" }, "WSGATE_REDIS_PREFIX must not be empty"},
		{"upstream redis", func(c *Gateway) { c.UpstreamURL = "redis://h:6390/0?stream=up" }, ""},
		{"upstream kafka", func(c *Gateway) { c.UpstreamURL = "kafka://b1:9092,b2:9092/up" }, ""},
		{"upstream bad scheme", func(c *Gateway) { c.UpstreamURL = "ftp://h/x" }, `WSGATE_UPSTREAM_URL: upstream url: unknown scheme "ftp"`},
		{"upstream kafka no topic", func(c *Gateway) { c.UpstreamURL = "kafka://b1:9092" }, "WSGATE_UPSTREAM_URL: upstream url: kafka URL needs exactly one topic"},
		{"downstream redis no stream", func(c *Gateway) { c.DownstreamURL = "redis://127.0.0.1:6379/0" }, "WSGATE_DOWNSTREAM_URL: source: a redis source needs ?stream=NAME"},
		{"downstream bad scheme", func(c *Gateway) { c.DownstreamURL = "redis://h:1/0?stream=s,ftp://h/x" }, `WSGATE_DOWNSTREAM_URL: source: unknown scheme "ftp"`},
		{"downstream nats no subject", func(c *Gateway) { c.DownstreamURL = "nats://h:4222?stream=S" }, "WSGATE_DOWNSTREAM_URL: source: a nats source needs ?stream=STREAM&subject=SUBJ"},
		{"downstream kafka no topic", func(c *Gateway) { c.DownstreamURL = "kafka://b1:9092,b2:9092" }, "WSGATE_DOWNSTREAM_URL: source: a kafka URL needs exactly one topic"},
		{"downstream in flight", func(c *Gateway) { c.DownstreamInFlight = 0 }, "WSGATE_DOWNSTREAM_IN_FLIGHT"},
		{"rpc url", func(c *Gateway) { c.RPCURL = "https://api.example/rpc" }, ""},
		{"rpc bad url", func(c *Gateway) { c.RPCURL = "api.example/rpc" }, "WSGATE_RPC_URL must be an http:// or https:// URL with a host"},
		{"redis prefix glob", func(c *Gateway) { c.RedisPrefix = "ws*" }, `WSGATE_REDIS_PREFIX ("ws*") must not contain '*'`},
		{"no jwt key", func(c *Gateway) { c.JWTSecret = "" },
			"WSGATE_JWT_SECRET, WSGATE_JWT_PUBLIC_KEY_FILE, WSGATE_JWKS_URL or WSGATE_CONNECT_URL must be set|WSGATE_AUTH_INSECURE=true"},
		{"jwks url only", func(c *Gateway) { c.JWTSecret = ""; c.JWKSURL = "https://auth.example/jwks.json" }, ""},
		{"jwks url not http", func(c *Gateway) { c.JWKSURL = "file:///etc/jwks.json" }, "WSGATE_JWKS_URL|must be an http:// or https:// URL"},
		{"jwt secret only commas", func(c *Gateway) { c.JWTSecret = " , ," }, "WSGATE_JWT_SECRET holds no secret"},
		{"jwt leeway negative", func(c *Gateway) { c.JWTLeeway = -time.Second }, "WSGATE_JWT_LEEWAY"},
		{"jwt max lifetime negative", func(c *Gateway) { c.JWTMaxLifetime = -time.Second }, "WSGATE_JWT_MAX_LIFETIME"},
		{"no jwt key insecure", func(c *Gateway) { c.JWTSecret = ""; c.AuthInsecure = true }, ""},
		{"jwt public key only", func(c *Gateway) { c.JWTSecret = ""; c.JWTPublicKeyFile = pem }, ""},
		{"jwt public key missing", func(c *Gateway) { c.JWTPublicKeyFile = dir + "/none.pem" },
			`WSGATE_JWT_PUBLIC_KEY_FILE ("` + dir + `/none.pem") cannot be read: no such file or directory`},
		{"jwt public key dir", func(c *Gateway) { c.JWTPublicKeyFile = dir }, "WSGATE_JWT_PUBLIC_KEY_FILE|is not a regular file"},
		{"origins ok", func(c *Gateway) {
			c.AllowedOrigins = []string{"*", "https://app.example.com", "http://localhost:3000", "https://b.example/", "null"}
		}, ""},
		{"origin bare host", func(c *Gateway) { c.AllowedOrigins = []string{"example.com"} },
			`WSGATE_ALLOWED_ORIGINS entry "example.com" must be * or an origin scheme://host[:port]`},
		{"origin with path", func(c *Gateway) { c.AllowedOrigins = []string{"https://a.example/app"} }, "WSGATE_ALLOWED_ORIGINS entry"},
		{"trusted proxies ok", func(c *Gateway) { c.TrustedProxies = []string{"10.0.0.0/8", "192.168.1.5", "fd00::/8"} }, ""},
		{"trusted proxy bad", func(c *Gateway) { c.TrustedProxies = []string{"10.0.0.0/8", "lb.example"} },
			`WSGATE_TRUSTED_PROXIES: entry "lb.example" is neither an IP address nor a CIDR prefix`},
		{"max message small", func(c *Gateway) { c.MaxMessageBytes = 127 }, "WSGATE_MAX_MESSAGE_BYTES (127) must be between 128 and 16777216"},
		{"max message big", func(c *Gateway) { c.MaxMessageBytes = 16<<20 + 1 }, "WSGATE_MAX_MESSAGE_BYTES (16777217) must be between"},
		{"max message edges", func(c *Gateway) { c.MaxMessageBytes = 16 << 20 }, ""},
		{"conns per ip", func(c *Gateway) { c.MaxConnsPerIP = -1 }, "WSGATE_MAX_CONNS_PER_IP (-1) must not be negative (0 = no limit)"},
		{"conns per user", func(c *Gateway) { c.MaxConnsPerUser = -1 }, "WSGATE_MAX_CONNS_PER_USER (-1) must not be negative"},
		{"rooms per user", func(c *Gateway) { c.MaxRoomsPerUser = 0 }, "WSGATE_MAX_ROOMS_PER_USER (0) must be at least 1"},
		{"handshake rate", func(c *Gateway) { c.HandshakeRatePerIP = -0.5 }, "WSGATE_HANDSHAKE_RATE_PER_IP (-0.5) must not be negative"},
		{"message rate", func(c *Gateway) { c.MessageRate = -1 }, "WSGATE_MESSAGE_RATE (-1) must not be negative"},
		{"device policy", func(c *Gateway) { c.DevicePolicy = "one" }, `WSGATE_DEVICE_POLICY ("one") must be multi or single`},
		{"device policy single", func(c *Gateway) { c.DevicePolicy = "single" }, ""},
		{"compression", func(c *Gateway) { c.Compression = "yes" }, `WSGATE_COMPRESSION ("yes") must be on or off`},
		{"compression off", func(c *Gateway) { c.Compression = "off" }, ""},
		{"tls own records", func(c *Gateway) { c.TLSOwnRecords = "no" }, `WSGATE_TLS_OWN_RECORDS ("no") must be on or off`},
		{"tls own records off", func(c *Gateway) { c.TLSOwnRecords = "off" }, ""},
		{"ping zero", func(c *Gateway) { c.PingInterval = 0 }, "WSGATE_PING_INTERVAL (0s) must be positive"},
		{"pong negative", func(c *Gateway) { c.PongTimeout = -time.Second }, "WSGATE_PONG_TIMEOUT (-1s) must be positive"},
		{"pong below ping", func(c *Gateway) { c.PongTimeout = 10 * time.Second },
			"WSGATE_PONG_TIMEOUT (10s) must exceed WSGATE_PING_INTERVAL (25s)"},
		{"pong equals ping", func(c *Gateway) { c.PongTimeout = 25 * time.Second }, "WSGATE_PONG_TIMEOUT (25s) must exceed"},
		{"route ttl zero", func(c *Gateway) { c.RouteTTL = 0 }, "WSGATE_ROUTE_TTL (0s) must be positive"},
		{"heartbeat zero", func(c *Gateway) { c.HeartbeatInterval = 0 }, "WSGATE_HEARTBEAT_INTERVAL (0s) must be positive"},
		{"route ttl short", func(c *Gateway) { c.RouteTTL = 5 * time.Second },
			"WSGATE_ROUTE_TTL (5s) must be at least 3 x WSGATE_HEARTBEAT_INTERVAL (2s)"},
		{"route ttl exactly 3x", func(c *Gateway) { c.RouteTTL = 6 * time.Second }, ""},
		{"send queue zero", func(c *Gateway) { c.SendQueue = 0 }, "WSGATE_SEND_QUEUE (0) must be between 1 and 65536"},
		{"send queue big", func(c *Gateway) { c.SendQueue = 65537 }, "WSGATE_SEND_QUEUE (65537) must be between 1 and 65536"},
		{"inbox limit zero", func(c *Gateway) { c.InboxLimit = 0 }, "WSGATE_INBOX_LIMIT (0) must be between 1 and 100000"},
		{"inbox limit big", func(c *Gateway) { c.InboxLimit = 100001 }, "WSGATE_INBOX_LIMIT (100001) must be between 1 and 100000"},
		{"inbox ttl", func(c *Gateway) { c.InboxTTL = 0 }, "WSGATE_INBOX_TTL (0s) must be positive"},
		{"room history ttl", func(c *Gateway) { c.RoomHistoryTTL = 0 }, "WSGATE_ROOM_HISTORY_TTL (0s) must be positive"},
		{"drain timeout", func(c *Gateway) { c.DrainTimeout = 0 }, "WSGATE_DRAIN_TIMEOUT (0s) must be positive"},
		{"drain rate negative", func(c *Gateway) { c.DrainRate = -1 }, "WSGATE_DRAIN_RATE (-1) must not be negative"},
		{"drain rate zero", func(c *Gateway) { c.DrainRate = 0 }, ""},
		{"warmup negative", func(c *Gateway) { c.Warmup = -time.Second }, "WSGATE_WARMUP (-1s) must not be negative"},
		{"warmup positive", func(c *Gateway) { c.Warmup = time.Minute }, ""},
		{"transports sse only", func(c *Gateway) { c.Transports = []string{"sse"} }, ""},
		{"transport unknown", func(c *Gateway) { c.Transports = []string{"ws", "polling"} },
			`WSGATE_TRANSPORTS entry "polling" is not a transport (want ws, sse, stream, pusher)`},
		{"pusher without its settings", func(c *Gateway) { c.Transports = []string{"ws", "pusher"}; c.PusherAppID, c.PusherKey = "1", "k" },
			"WSGATE_PUSHER_SECRET must be set: WSGATE_TRANSPORTS has pusher"},
		{"pusher settings without pusher", func(c *Gateway) { c.PusherAppID, c.PusherKey, c.PusherSecret = "1", "k", "s" },
			"WSGATE_TRANSPORTS has no pusher entry"},
		{"pusher key with a slash", func(c *Gateway) {
			c.Transports = []string{"pusher"}
			c.PusherAppID, c.PusherKey, c.PusherSecret = "1", "a/b", "s"
		}, "WSGATE_PUSHER_KEY and WSGATE_PUSHER_APP_ID must not hold"},
		{"pusher ok", func(c *Gateway) {
			c.Transports = []string{"ws", "pusher"}
			c.PusherAppID, c.PusherKey, c.PusherSecret = "1", "app-key", "0123456789abcdef0123"
		}, ""},
		{"pusher webhook ok", func(c *Gateway) {
			c.Transports = []string{"ws", "pusher"}
			c.PusherAppID, c.PusherKey, c.PusherSecret = "1", "app-key", "0123456789abcdef0123"
			c.PusherWebhookURL = "https://app.internal/pusher/webhook"
		}, ""},
		{"pusher webhook not a URL", func(c *Gateway) {
			c.Transports = []string{"ws", "pusher"}
			c.PusherAppID, c.PusherKey, c.PusherSecret = "1", "app-key", "0123456789abcdef0123"
			c.PusherWebhookURL = "app.internal/pusher/webhook"
		}, "WSGATE_PUSHER_WEBHOOK_URL must be an http:// or https:// URL with a host"},
		{"pusher webhook without pusher", func(c *Gateway) { c.PusherWebhookURL = "https://app.internal/hook" },
			"WSGATE_PUSHER_WEBHOOK_URL is set but WSGATE_TRANSPORTS has no pusher entry"},
		{"events ok", func(c *Gateway) { c.Events = []string{"connect", "offline", "undelivered"} }, ""},
		{"event unknown", func(c *Gateway) { c.Events = []string{"connect", "presence"} },
			`WSGATE_EVENTS entry "presence" is not an event (want connect, disconnect, online, offline, join, leave, ack, undelivered, occupied, vacated)`},
		{"undelivered negative", func(c *Gateway) { c.UndeliveredAfter = -time.Second }, "WSGATE_UNDELIVERED_AFTER (-1s) must not be negative"},
		{"connect url ok", func(c *Gateway) { c.ConnectURL = "http://auth.internal:8000/ws-auth" }, ""},
		{"connect url bad", func(c *Gateway) { c.ConnectURL = "auth.internal/ws" }, "WSGATE_CONNECT_URL must be an http:// or https:// URL with a host"},
		{"tls cert only", func(c *Gateway) { c.TLSCertFile = pem },
			"WSGATE_TLS_CERT_FILE and WSGATE_TLS_KEY_FILE must be set together (both or neither)"},
		{"tls key only", func(c *Gateway) { c.TLSKeyFile = pem }, "WSGATE_TLS_CERT_FILE and WSGATE_TLS_KEY_FILE must be set together"},
		{"tls both", func(c *Gateway) { c.TLSCertFile, c.TLSKeyFile = pem, pem }, ""},
		{"tls missing", func(c *Gateway) { c.TLSCertFile, c.TLSKeyFile = pem, dir+"/k.pem" }, "WSGATE_TLS_KEY_FILE|cannot be read"},
		{"reliable replicas", func(c *Gateway) { c.ReliableReplicas = -1 }, "WSGATE_RELIABLE_REPLICAS (-1) must not be negative"},
		{"log level", func(c *Gateway) { c.LogLevel = "trace" }, `WSGATE_LOG_LEVEL ("trace") must be debug, info, warn or error`},
		{"log level upper", func(c *Gateway) { c.LogLevel = "DEBUG" }, ""},
		{"first problem only", func(c *Gateway) { c.Listen = "x"; c.SendQueue = 0 }, "WSGATE_LISTEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validGateway(t)
			tt.edit(&c)
			err := c.Validate()
			wantErr(t, err, tt.err)
			if err != nil && !strings.HasPrefix(err.Error(), "WSGATE_") {
				t.Fatalf("error %q does not start with the setting", err)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error %q shows a password", err)
			}
		})
	}
}

// TestLoadThenValidate runs the sequence of main: env, Finish, Validate.
func TestLoadThenValidate(t *testing.T) {
	var c Gateway
	s := NewGatewaySet(&c)
	env := map[string]string{"WSGATE_JWT_SECRET": "x", "WSGATE_PING_INTERVAL": "70s"}
	if err := s.Load(nil, envOf(env)); err != nil {
		t.Fatal(err)
	}
	c.Finish()
	wantErr(t, c.Validate(), "WSGATE_PONG_TIMEOUT (60s) must exceed WSGATE_PING_INTERVAL (70s)")
}

func TestParseLogLevel(t *testing.T) {
	for _, s := range []string{"debug", "info", "warn", "warning", "error", "INFO"} {
		if _, err := ParseLogLevel(s); err != nil {
			t.Errorf("ParseLogLevel(%q): %v", s, err)
		}
	}
	if _, err := ParseLogLevel("loud"); err == nil {
		t.Error("ParseLogLevel(loud) succeeded")
	}
}

// The rooms: key of the config file lists namespaces as a rooms file does;
// WSGATE_ROOMS_FILE wins over it.
func TestRoomsKeyOfTheConfigFile(t *testing.T) {
	file := writeFile(t, "gw.yml", "jwt_secret: s3cret\nrooms:\n  - pattern: \"chat:*\"\n    presence: true\n")
	var c Gateway
	if err := NewGatewaySet(&c).Load([]string{"--config", file}, envOf(nil)); err != nil {
		t.Fatal(err)
	}
	c.Finish()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if ns := c.Rooms.Match("chat:1"); !ns.Presence || c.RoomsConfigFile != file {
		t.Fatalf("rooms: key gave %+v from %q", ns, c.RoomsConfigFile)
	}
	set, err := RoomsOfConfigFile(file)
	if err != nil || !set.Match("chat:1").Presence {
		t.Fatalf("reload: %v", err)
	}
	bad := writeFile(t, "bad.yml", "rooms:\n  - pattern: a\n    scope: tab\n")
	var b Gateway
	err = NewGatewaySet(&b).Load([]string{"--config", bad}, envOf(nil))
	if err == nil || !strings.Contains(err.Error(), `rooms: rooms[0] ("a"): scope must be user or connection`) {
		t.Fatalf("a bad rooms: key: %v", err)
	}
	over := writeFile(t, "rooms.yml", "rooms:\n  - pattern: \"chat:*\"\n")
	var o Gateway
	if err := NewGatewaySet(&o).Load([]string{"--config", file}, envOf(map[string]string{"WSGATE_ROOMS_FILE": over})); err != nil {
		t.Fatal(err)
	}
	o.Finish()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Rooms.Match("chat:1").Presence || o.RoomsConfigFile != "" {
		t.Fatal("WSGATE_ROOMS_FILE did not win over the config file's rooms: key")
	}
}

package config

import (
	"bytes"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// contractDefaults is the table of CONTRACT.md §1 (env -> default as text),
// plus our own settings.
var contractDefaults = map[string]string{
	"WSGATE_LISTEN":                ":8080",
	"WSGATE_ADMIN_LISTEN":          "",
	"WSGATE_API_KEY_FILE":          "",
	"WSGATE_JWT_SECRET_FILE":       "",
	"WSGATE_UPSTREAM_SECRET_FILE":  "",
	"WSGATE_NODE_ID":               "",
	"WSGATE_ADVERTISE_URL":         "",
	"WSGATE_REDIS_URL":             "",
	"WSGATE_REDIS_PREFIX":          "wsgate",
	"WSGATE_API_KEY":               "",
	"WSGATE_JWT_SECRET":            "",
	"WSGATE_JWT_PUBLIC_KEY_FILE":   "",
	"WSGATE_JWT_ISSUER":            "",
	"WSGATE_JWT_AUDIENCE":          "",
	"WSGATE_JWKS_URL":              "",
	"WSGATE_JWT_LEEWAY":            "0s",
	"WSGATE_JWT_MAX_LIFETIME":      "0s",
	"WSGATE_AUTH_INSECURE":         "false",
	"WSGATE_ALLOW_QUERY_TOKEN":     "true",
	"WSGATE_ALLOWED_ORIGINS":       "",
	"WSGATE_TRANSPORTS":            "ws,sse,stream",
	"WSGATE_MAX_MESSAGE_BYTES":     "65536",
	"WSGATE_MAX_CONNS_PER_IP":      "0",
	"WSGATE_MAX_CONNS_PER_USER":    "0",
	"WSGATE_MAX_ROOMS_PER_USER":    "1000",
	"WSGATE_HANDSHAKE_RATE_PER_IP": "0",
	"WSGATE_MESSAGE_RATE":          "0",
	"WSGATE_DEVICE_POLICY":         "multi",
	"WSGATE_COMPRESSION":           "on",
	"WSGATE_UPSTREAM_URL":          "",
	"WSGATE_UPSTREAM_SECRET":       "",
	"WSGATE_RPC_URL":               "",
	"WSGATE_PING_INTERVAL":         "25s",
	"WSGATE_PONG_TIMEOUT":          "60s",
	"WSGATE_ROUTE_TTL":             "90s",
	"WSGATE_SEND_QUEUE":            "256",
	"WSGATE_INBOX_LIMIT":           "100",
	"WSGATE_INBOX_TTL":             "24h",
	"WSGATE_ROOM_HISTORY_LIMIT":    "100",
	"WSGATE_ROOM_HISTORY_TTL":      "24h",
	"WSGATE_ROOMS_FILE":            "",
	"WSGATE_DRAIN_TIMEOUT":         "2m",
	"WSGATE_DRAIN_RATE":            "500",
	"WSGATE_WARMUP":                "0s",
	"WSGATE_EVENTS":                "",
	"WSGATE_UNDELIVERED_AFTER":     "0s",
	"WSGATE_CONNECT_URL":           "",
	"WSGATE_DOWNSTREAM_URL":        "", // v3, section 17
	"WSGATE_PUSHER_APP_ID":         "", // v3, section 21
	"WSGATE_PUSHER_KEY":            "",
	"WSGATE_PUSHER_SECRET":         "",
	"WSGATE_PUSHER_SECRET_FILE":    "",
}

var ownDefaults = map[string]string{
	"WSGATE_TLS_CERT_FILE":        "",
	"WSGATE_PARTIAL_FRAME_BUDGET": "67108864",
	"WSGATE_TLS_KEY_FILE":         "",
	"WSGATE_TLS_OWN_RECORDS":      "on",
	"WSGATE_RELIABLE_REPLICAS":    "0",
	"WSGATE_DOWNSTREAM_IN_FLIGHT": "256",
	"WSGATE_HEARTBEAT_INTERVAL":   "2s",
	"WSGATE_LOG_LEVEL":            "info",
	"WSGATE_DEBUG_LISTEN":         "",
	"WSGATE_TRUSTED_PROXIES":      "",
	"WSGATE_PUSHER_WEBHOOK_URL":   "",
}

func TestGatewayDefaults(t *testing.T) {
	var c Gateway
	s := NewGatewaySet(&c)
	if err := s.Load(nil, nil); err != nil {
		t.Fatal(err)
	}
	want := Gateway{
		Listen: ":8080", RedisPrefix: "wsgate", AllowQueryToken: true, AllowedOrigins: []string{}, TrustedProxies: []string{}, Events: []string{},
		MaxMessageBytes: 65536, PartialFrameBudget: 64 << 20, MaxRoomsPerUser: 1000, DevicePolicy: "multi", Compression: "on", Transports: []string{"ws", "sse", "stream"}, TLSOwnRecords: "on",
		PingInterval: 25 * time.Second, PongTimeout: 60 * time.Second, RouteTTL: 90 * time.Second,
		DownstreamInFlight: 256,
		SendQueue:          256, InboxLimit: 100, InboxTTL: 24 * time.Hour, RoomHistoryLimit: 100, RoomHistoryTTL: 24 * time.Hour, DrainTimeout: 2 * time.Minute,
		DrainRate: 500, HeartbeatInterval: 2 * time.Second, LogLevel: "info",
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c, want)
	}

	// Every contract setting is registered with its default (the same
	// value again, through the table of env names), and nothing else is
	// visible but our documented extras.
	seen := map[string]bool{}
	for _, st := range s.Settings() {
		if st.Hidden() {
			continue
		}
		env := st.Env()
		seen[env] = true
		def, ok := contractDefaults[env]
		if !ok {
			def, ok = ownDefaults[env]
		}
		if !ok {
			t.Errorf("unexpected setting %s", env)
			continue
		}
		if got := st.current(); got != def {
			t.Errorf("%s default = %q, want %q", env, got, def)
		}
		if st.Usage() == "" || strings.Contains(st.Usage(), "\n") {
			t.Errorf("%s needs a one-line description", env)
		}
	}
	for env := range contractDefaults {
		if !seen[env] {
			t.Errorf("contract setting %s is not registered", env)
		}
	}
	for env := range ownDefaults {
		if !seen[env] {
			t.Errorf("setting %s is not registered", env)
		}
	}
}

func TestDevDefaults(t *testing.T) {
	var c Gateway
	s := NewDevSet(&c)
	if err := s.Load(nil, nil); err != nil {
		t.Fatal(err)
	}
	if !c.Dev || !c.AuthInsecure || s.Command != "dev" {
		t.Fatalf("dev: Dev=%v AuthInsecure=%v", c.Dev, c.AuthInsecure)
	}
	// Its API is open: it listens on loopback only unless told.
	if c.Listen != "127.0.0.1:8080" {
		t.Fatalf("dev listens on %q, want 127.0.0.1:8080", c.Listen)
	}
	c.Finish()
	if err := c.Validate(); err != nil {
		t.Fatalf("dev defaults do not validate: %v", err)
	}
	// Dev needs no JWT key even with auth-insecure off.
	if err := s.Load([]string{"--auth-insecure=false"}, nil); err != nil {
		t.Fatal(err)
	}
	c.Finish()
	if err := c.Validate(); err != nil {
		t.Fatalf("dev without auth-insecure: %v", err)
	}
}

func TestHelpListsEverySetting(t *testing.T) {
	sets := map[string]func() *Set{
		"gateway":    func() *Set { return NewGatewaySet(new(Gateway)) },
		"dev":        func() *Set { return NewDevSet(new(Gateway)) },
		"allocator":  func() *Set { return NewAllocatorSet(new(Allocator)) },
		"autoscaler": func() *Set { return NewAutoscalerSet(new(Autoscaler)) },
	}
	for name, mk := range sets {
		t.Run(name, func(t *testing.T) {
			s := mk()
			var out bytes.Buffer
			s.SetOutput(&out)
			for _, arg := range []string{"--help", "-h"} {
				out.Reset()
				if err := s.Load([]string{arg}, nil); !errors.Is(err, ErrHelp) {
					t.Fatalf("%s: got %v, want ErrHelp", arg, err)
				}
				help := out.String()
				if !strings.HasPrefix(help, "Usage: wsgate "+name+" [flags]") {
					t.Fatalf("usage line: %q", strings.SplitN(help, "\n", 2)[0])
				}
				if !strings.Contains(help, "--config FILE") || !strings.Contains(help, ConfigEnv) {
					t.Fatal("help does not show --config")
				}
				last := -1
				for _, st := range s.Settings() {
					if st.Hidden() {
						continue
					}
					line := "env " + st.Env() + ", default " + helpDefault(st)
					i := strings.Index(help, line)
					if i < 0 {
						t.Fatalf("help lacks %q", line)
					}
					if i < last {
						t.Fatalf("help order: %s out of registration order", st.Env())
					}
					last = i
					if !strings.Contains(help, "  "+st.Flag()) || !strings.Contains(help, st.Usage()) {
						t.Fatalf("help lacks the flag or description of %s", st.Name())
					}
				}
			}
		})
	}
	// The gateway's help has every contract env name.
	var out bytes.Buffer
	s := NewGatewaySet(new(Gateway))
	s.SetOutput(&out)
	_ = s.Load([]string{"--help"}, nil)
	for env := range contractDefaults {
		if !strings.Contains(out.String(), "env "+env+",") {
			t.Errorf("gateway --help lacks %s", env)
		}
	}
	for _, want := range []string{"env WSGATE_PING_INTERVAL, default 25s", `env WSGATE_REDIS_URL, default ""`,
		"env WSGATE_INBOX_TTL, default 24h", "env WSGATE_DRAIN_TIMEOUT, default 2m", "--auth-insecure[=true|false]",
		"env WSGATE_NODE_ID, default hostname-<6 random hex digits>"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("gateway --help lacks %q", want)
		}
	}
}

func TestFinish(t *testing.T) {
	hostname = func() (string, error) { return "web 1.example", nil }
	t.Cleanup(func() { hostname = defaultHostname })
	c := Gateway{Listen: "0.0.0.0:9000"}
	c.Finish()
	if !regexp.MustCompile(`^web-1\.example-[0-9a-f]{6}$`).MatchString(c.NodeID) {
		t.Errorf("NodeID = %q", c.NodeID)
	}
	if c.AdvertiseURL != "ws://127.0.0.1:9000/ws" {
		t.Errorf("AdvertiseURL = %q", c.AdvertiseURL)
	}
	other := Gateway{Listen: "0.0.0.0:9000"}
	other.Finish()
	if other.NodeID == c.NodeID {
		t.Errorf("two node ids are equal: %q", c.NodeID)
	}
	set := Gateway{Listen: ":1", NodeID: "n1", AdvertiseURL: "wss://x/ws"}
	set.Finish()
	if set.NodeID != "n1" || set.AdvertiseURL != "wss://x/ws" {
		t.Errorf("Finish replaced given values: %+v", set)
	}
}

func TestAdvertiseURLFor(t *testing.T) {
	tests := []struct {
		listen string
		tls    bool
		want   string
	}{
		{":8080", false, "ws://127.0.0.1:8080/ws"},
		{"0.0.0.0:8080", false, "ws://127.0.0.1:8080/ws"},
		{"[::]:8080", false, "ws://127.0.0.1:8080/ws"},
		{"10.0.0.2:8080", false, "ws://10.0.0.2:8080/ws"},
		{"[fd00::2]:8080", false, "ws://[fd00::2]:8080/ws"},
		{"gw1.internal:443", true, "wss://gw1.internal:443/ws"},
		{"127.0.0.1:0", false, ""},
		{"nonsense", false, ""},
	}
	for _, tt := range tests {
		if got := AdvertiseURLFor(tt.listen, tt.tls); got != tt.want {
			t.Errorf("AdvertiseURLFor(%q, %v) = %q, want %q", tt.listen, tt.tls, got, tt.want)
		}
	}
	c := Gateway{Listen: ":8443", TLSCertFile: "c.pem"}
	c.Finish()
	if c.AdvertiseURL != "wss://127.0.0.1:8443/ws" {
		t.Errorf("TLS AdvertiseURL = %q", c.AdvertiseURL)
	}
}

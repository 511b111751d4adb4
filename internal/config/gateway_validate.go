package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/wsgate/wsgate/internal/downstream"
	"github.com/wsgate/wsgate/internal/rooms"
	"github.com/wsgate/wsgate/internal/upstream"
)

// Validate checks every setting and returns the first problem as one line
// starting with the environment name of the setting, e.g.
// "WSGATE_PONG_TIMEOUT (10s) must exceed WSGATE_PING_INTERVAL (25s)".
// Call it after Finish. The dev subcommand needs no JWT key (it has demo
// auth). It reads the rooms file (parsed into Rooms) and nothing but the TLS and JWT key files
// metadata (they must exist).
func (c *Gateway) Validate() error {
	var v checker
	v.listen("listen", c.Listen)
	if c.AdminListen != "" {
		v.listen("admin-listen", c.AdminListen)
		if v.ok() && c.AdminListen == c.Listen {
			v.failf("%s (%q) must differ from %s", EnvName("admin-listen"), c.AdminListen, EnvName("listen"))
		}
	}
	c.checkNodeID(&v)
	c.checkAdvertiseURL(&v)
	v.redisURL("redis-url", c.RedisURL)
	v.redisPrefix("redis-prefix", c.RedisPrefix)

	v.file("jwt-public-key-file", c.JWTPublicKeyFile)
	v.httpURL("jwks-url", c.JWKSURL)
	if v.ok() && c.JWTSecret != "" && len(c.JWTSecrets()) == 0 {
		v.failf("%s holds no secret (a comma list of HS256 secrets)", EnvName("jwt-secret"))
	}
	if v.ok() && c.JWTSecret == "" && c.JWTPublicKeyFile == "" && c.JWKSURL == "" && c.ConnectURL == "" && !c.AuthInsecure && !c.Dev {
		v.failf("%s, %s, %s or %s must be set to verify client tokens (or %s=true to accept ?user=ID without a token)",
			EnvName("jwt-secret"), EnvName("jwt-public-key-file"), EnvName("jwks-url"), EnvName("connect-url"), EnvName("auth-insecure"))
	}
	v.notNegativeDur("jwt-leeway", c.JWTLeeway)
	v.notNegativeDur("jwt-max-lifetime", c.JWTMaxLifetime)
	checkOrigins(&v, c.AllowedOrigins)
	if _, err := ParsePrefixes(c.TrustedProxies); v.ok() && err != nil {
		v.failf("%s: %v", EnvName("trusted-proxies"), err)
	}

	v.intRange("max-message-bytes", c.MaxMessageBytes, MinMessageBytes, MaxMessageBytes)
	v.notNegative("partial-frame-budget", c.PartialFrameBudget)
	v.notNegative("max-conns-per-ip", c.MaxConnsPerIP)
	v.notNegative("max-conns-per-user", c.MaxConnsPerUser)
	v.atLeast("max-rooms-per-user", c.MaxRoomsPerUser, 1)
	v.rate("handshake-rate-per-ip", c.HandshakeRatePerIP)
	v.rate("message-rate", c.MessageRate)
	v.oneOf("device-policy", c.DevicePolicy, DeviceMulti, DeviceSingle)
	v.oneOf("compression", c.Compression, "on", "off")
	v.oneOf("tls-own-records", c.TLSOwnRecords, "on", "off")
	if c.UpstreamURL != "" && v.ok() {
		if err := upstream.Check(c.UpstreamURL); err != nil {
			v.failf("%s: %v", EnvName("upstream-url"), err)
		}
	}
	if c.DownstreamURL != "" && v.ok() {
		if err := downstream.Check(c.DownstreamURL); err != nil {
			v.failf("%s: %v", EnvName("downstream-url"), err)
		}
	}
	v.intRange("downstream-in-flight", c.DownstreamInFlight, 1, 65536)
	if c.RPCURL != "" && v.ok() {
		if u, err := url.Parse(c.RPCURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.failf("%s must be an http:// or https:// URL with a host", EnvName("rpc-url"))
		}
	}

	v.positive("ping-interval", c.PingInterval)
	v.positive("pong-timeout", c.PongTimeout)
	if v.ok() && c.PongTimeout <= c.PingInterval {
		v.failf("%s (%s) must exceed %s (%s)", EnvName("pong-timeout"), formatDuration(c.PongTimeout),
			EnvName("ping-interval"), formatDuration(c.PingInterval))
	}
	v.positive("route-ttl", c.RouteTTL)
	v.positive("heartbeat-interval", c.HeartbeatInterval)
	if v.ok() && c.RouteTTL < 3*c.HeartbeatInterval {
		v.failf("%s (%s) must be at least 3 x %s (%s)", EnvName("route-ttl"), formatDuration(c.RouteTTL),
			EnvName("heartbeat-interval"), formatDuration(c.HeartbeatInterval))
	}
	v.intRange("send-queue", c.SendQueue, 1, MaxSendQueue)
	v.intRange("inbox-limit", c.InboxLimit, 1, MaxInboxLimit)
	v.positive("inbox-ttl", c.InboxTTL)
	v.intRange("room-history-limit", c.RoomHistoryLimit, 1, MaxInboxLimit)
	v.positive("room-history-ttl", c.RoomHistoryTTL)
	if c.RoomsFile != "" {
		set, err := rooms.Load(c.RoomsFile)
		if err != nil {
			v.failf("%s: %v", EnvName("rooms-file"), err)
		}
		c.Rooms, c.RoomsConfigFile = set, ""
	}
	if c.Dev && c.Rooms == nil {
		c.Rooms = DevRooms
	}
	v.positive("drain-timeout", c.DrainTimeout)
	v.rate("drain-rate", c.DrainRate)
	v.notNegativeDur("warmup", c.Warmup)
	c.checkEvents(&v)
	for _, tp := range c.Transports {
		if !slices.Contains(TransportNames, tp) {
			v.failf("%s entry %q is not a transport (want %s)", EnvName("transports"), tp, strings.Join(TransportNames, ", "))
		}
	}
	c.checkPusher(&v)

	v.bothOrNeither("tls-cert-file", c.TLSCertFile, "tls-key-file", c.TLSKeyFile)
	v.file("tls-cert-file", c.TLSCertFile)
	v.file("tls-key-file", c.TLSKeyFile)
	if v.ok() && c.ReliableReplicas < 0 {
		v.failf("%s (%d) must not be negative (0 = do not wait)", EnvName("reliable-replicas"), c.ReliableReplicas)
	}
	v.logLevel("log-level", c.LogLevel)
	return v.err
}

// Minimum secret lengths that CheckSecrets enforces.
const (
	MinHMACSecretBytes = 32
	MinAPIKeyBytes     = 16
)

// SecretPlaceholder starts the placeholders of the shipped manifests; a
// secret starting with it is refused.
const SecretPlaceholder = "CHANGE-ME"

// CheckSecrets refuses weak secrets: an HS256 secret (each of the comma
// list of WSGATE_JWT_SECRET) shorter than MinHMACSecretBytes, an API key
// shorter than MinAPIKeyBytes, and any secret starting with
// SecretPlaceholder. wsgate gateway calls it after Validate; wsgate dev
// and configurations built in code do not.
func (c *Gateway) CheckSecrets() error {
	var v checker
	v.secret("api-key", c.APIKey, MinAPIKeyBytes)
	v.secret("pusher-secret", c.PusherSecret, MinAPIKeyBytes)
	for s := range strings.SplitSeq(c.JWTSecret, ",") {
		if c.JWTSecret != "" {
			v.secret("jwt-secret", strings.TrimSpace(s), MinHMACSecretBytes)
		}
	}
	return v.err
}

func (c *Gateway) checkNodeID(v *checker) {
	switch {
	case !v.ok():
	case c.NodeID == "":
		v.failf("%s must not be empty", EnvName("node-id"))
	case len(c.NodeID) > 128:
		v.failf("%s is longer than 128 characters", EnvName("node-id"))
	case strings.IndexFunc(c.NodeID, func(r rune) bool { return !nodeIDRune(r) }) >= 0:
		v.failf("%s (%q) may hold only letters, digits, '.', '_' and '-'", EnvName("node-id"), c.NodeID)
	}
}

func (c *Gateway) checkAdvertiseURL(v *checker) {
	if !v.ok() || c.AdvertiseURL == "" {
		return
	}
	u, err := url.Parse(c.AdvertiseURL)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		v.failf("%s (%q) must be a ws:// or wss:// URL with a host, e.g. ws://10.0.0.2:8080/ws",
			EnvName("advertise-url"), c.AdvertiseURL)
	}
}

// checkOrigins accepts "*", "null" (the Origin of sandboxed documents) or
// scheme://host[:port] entries (an Origin header value has no path; a
// trailing slash is tolerated, as internal/auth ignores it).
func checkOrigins(v *checker, origins []string) {
	for _, o := range origins {
		if !v.ok() || o == "*" || o == "null" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") ||
			u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			v.failf("%s entry %q must be * or an origin scheme://host[:port], e.g. https://app.example.com",
				EnvName("allowed-origins"), o)
		}
	}
}

// ParsePrefixes parses IP addresses and CIDR prefixes (an address is a
// prefix of its full length).
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range list {
		e = strings.TrimSpace(e)
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil {
			return nil, fmt.Errorf("entry %q is neither an IP address nor a CIDR prefix (e.g. 10.0.0.0/8)", e)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// checkEvents refuses an unknown event name and a connect URL that is not
// an http(s) URL with a host.
func (c *Gateway) checkEvents(v *checker) {
	for _, e := range c.Events {
		if v.ok() && !slices.Contains(EventNames, e) {
			v.failf("%s entry %q is not an event (want %s)", EnvName("events"), e, strings.Join(EventNames, ", "))
		}
	}
	v.notNegativeDur("undelivered-after", c.UndeliveredAfter)
	if !v.ok() || c.ConnectURL == "" {
		return
	}
	u, err := url.Parse(c.ConnectURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.failf("%s must be an http:// or https:// URL with a host", EnvName("connect-url"))
	}
}

// EventOn reports whether WSGATE_EVENTS lists the event.
func (c *Gateway) EventOn(name string) bool { return slices.Contains(c.Events, name) }

// checkPusher: the pusher transport needs its app id, key and secret;
// they mean nothing without it.
func (c *Gateway) checkPusher(v *checker) {
	if !v.ok() {
		return
	}
	if !c.TransportOn("pusher") {
		if c.PusherAppID != "" || c.PusherKey != "" || c.PusherSecret != "" {
			v.failf("%s, %s and %s are set but %s has no pusher entry", EnvName("pusher-app-id"), EnvName("pusher-key"), EnvName("pusher-secret"), EnvName("transports"))
		} else if c.PusherWebhookURL != "" {
			v.failf("%s is set but %s has no pusher entry", EnvName("pusher-webhook-url"), EnvName("transports"))
		}
		return
	}
	if c.PusherWebhookURL != "" {
		if u, err := url.Parse(c.PusherWebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.failf("%s must be an http:// or https:// URL with a host", EnvName("pusher-webhook-url"))
			return
		}
	}
	for _, s := range []struct{ name, val string }{{"pusher-app-id", c.PusherAppID}, {"pusher-key", c.PusherKey}, {"pusher-secret", c.PusherSecret}} {
		if s.val == "" {
			v.failf("%s must be set: %s has pusher (the Pusher protocol needs %s, %s and %s)", EnvName(s.name), EnvName("transports"),
				EnvName("pusher-app-id"), EnvName("pusher-key"), EnvName("pusher-secret"))
			return
		}
	}
	if strings.ContainsAny(c.PusherKey, "/?#:% ") || strings.ContainsAny(c.PusherAppID, "/?#% ") {
		v.failf("%s and %s must not hold '/', '?', '#', '%%', ':' or spaces (they are parts of URLs)", EnvName("pusher-key"), EnvName("pusher-app-id"))
	}
}

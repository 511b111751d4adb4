package config

import "time"

// Allocator is the configuration of wsgate allocator (contract §6).
type Allocator struct {
	Listen            string
	RedisURL          string // empty = embedded backend: sees no gateway, answers 503
	RedisPrefix       string
	HeartbeatInterval time.Duration // the gateways' report period; older than 3 periods = gone
	AllowedOrigins    []string      // pages' origins that may fetch /v1/allocate (CORS), as the gateway's
	LogLevel          string
}

// NewAllocatorSet registers every allocator setting with cfg's fields and
// writes the defaults into cfg.
func NewAllocatorSet(cfg *Allocator) *Set {
	s := NewSet("allocator")
	s.Summary = "Runs the connection allocator: GET /v1/allocate?user=ID answers the node to connect to."
	s.String(&cfg.Listen, "listen", ":8080", "HTTP listen address")
	s.String(&cfg.RedisURL, "redis-url", "", "Redis of the cluster (same forms as for the gateway); "+
		"empty = embedded backend, which sees no gateway (only for tests)").SecretURL()
	s.String(&cfg.RedisPrefix, "redis-prefix", "wsgate", "prefix of every Redis key and channel of the cluster")
	s.Duration(&cfg.HeartbeatInterval, "heartbeat-interval", 2*time.Second,
		"the gateways' report period; a node silent for 3 periods is skipped")
	s.List(&cfg.AllowedOrigins, "allowed-origins", nil, "comma list of Origin values (* allows any) whose pages may fetch /v1/allocate "+
		"(CORS, as the gateways' WSGATE_ALLOWED_ORIGINS); empty = same host only")
	s.String(&cfg.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	return s
}

// Validate returns the first problem, as Gateway.Validate does.
func (c *Allocator) Validate() error {
	var v checker
	v.listen("listen", c.Listen)
	v.redisURL("redis-url", c.RedisURL)
	v.redisPrefix("redis-prefix", c.RedisPrefix)
	v.positive("heartbeat-interval", c.HeartbeatInterval)
	checkOrigins(&v, c.AllowedOrigins)
	v.logLevel("log-level", c.LogLevel)
	return v.err
}

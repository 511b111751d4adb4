package config

import (
	"reflect"
	"testing"
	"time"
)

func TestAllocator(t *testing.T) {
	var c Allocator
	s := NewAllocatorSet(&c)
	if err := s.Load(nil, nil); err != nil {
		t.Fatal(err)
	}
	want := Allocator{Listen: ":8080", RedisPrefix: "wsgate", HeartbeatInterval: 2 * time.Second, AllowedOrigins: []string{}, LogLevel: "info"}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults: got %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	// Other subcommands' variables in the environment are ignored.
	env := map[string]string{"WSGATE_REDIS_URL": "redis://r:6379", "WSGATE_API_KEY": "k", "WSGATE_LISTEN": "127.0.0.1:9"}
	if err := s.Load([]string{"--heartbeat-interval=1s"}, envOf(env)); err != nil {
		t.Fatal(err)
	}
	if c.RedisURL != "redis://r:6379" || c.Listen != "127.0.0.1:9" || c.HeartbeatInterval != time.Second {
		t.Fatalf("load: %+v", c)
	}

	tests := []struct {
		name string
		edit func(c *Allocator)
		err  string
	}{
		{"listen", func(c *Allocator) { c.Listen = "8080" }, "WSGATE_LISTEN (\"8080\") must be host:port"},
		{"redis", func(c *Allocator) { c.RedisURL = "mysql://x" }, "WSGATE_REDIS_URL (\"mysql://x\") is not a Redis address"},
		{"prefix", func(c *Allocator) { c.RedisPrefix = "" }, "WSGATE_REDIS_PREFIX must not be empty"},
		{"heartbeat", func(c *Allocator) { c.HeartbeatInterval = 0 }, "WSGATE_HEARTBEAT_INTERVAL (0s) must be positive"},
		{"log level", func(c *Allocator) { c.LogLevel = "x" }, "WSGATE_LOG_LEVEL (\"x\") must be debug, info, warn or error"},
		{"origins", func(c *Allocator) { c.AllowedOrigins = []string{"app.example"} }, "WSGATE_ALLOWED_ORIGINS entry \"app.example\" must be * or an origin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := want
			tt.edit(&c)
			wantErr(t, c.Validate(), tt.err)
		})
	}
}

func TestAutoscaler(t *testing.T) {
	var c Autoscaler
	s := NewAutoscalerSet(&c)
	if err := s.Load(nil, nil); err != nil {
		t.Fatal(err)
	}
	want := Autoscaler{
		Listen: ":9181", RedisPrefix: "wsgate", HeartbeatInterval: 2 * time.Second,
		Interval: 15 * time.Second, MaxConnsPerNode: 15000, ScaleOutAt: 0.75, ScaleInAt: 0.35,
		CPUOutAt: 0.80, CPUInAt: 0.30, MinNodes: 2, MaxNodes: 10, Cooldown: 5 * time.Minute, StartupGrace: 5 * time.Minute,
		Actuator: "exec", LocalBasePort: 8090, LogLevel: "info",
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c, want)
	}
	if err := s.Load([]string{"--max-conns-per-node", "100", "--scale-in-at=0.1"},
		envOf(map[string]string{"WSGATE_MAX_CONNS_PER_NODE": "50", "WSGATE_MIN_NODES": "1"})); err != nil {
		t.Fatal(err)
	}
	if c.MaxConnsPerNode != 100 || c.MinNodes != 1 || c.ScaleInAt != 0.1 {
		t.Fatalf("load: %+v", c)
	}

	valid := want
	valid.RedisURL = "redis://r:6379"
	valid.ExecCommand = "./scale.sh"
	tests := []struct {
		name string
		edit func(c *Autoscaler)
		err  string
	}{
		{"valid", func(c *Autoscaler) {}, ""},
		{"no redis", func(c *Autoscaler) { c.RedisURL = "" }, "WSGATE_REDIS_URL must be set"},
		{"listen", func(c *Autoscaler) { c.Listen = "" }, "WSGATE_LISTEN (\"\") must be host:port"},
		{"interval", func(c *Autoscaler) { c.Interval = 0 }, "WSGATE_INTERVAL (0s) must be positive"},
		{"capacity", func(c *Autoscaler) { c.MaxConnsPerNode = 0 }, "WSGATE_MAX_CONNS_PER_NODE (0) must be at least 1"},
		{"scale out zero", func(c *Autoscaler) { c.ScaleOutAt = 0 }, "WSGATE_SCALE_OUT_AT (0) must be a fraction of capacity above 0 and at most 1"},
		{"scale out above 1", func(c *Autoscaler) { c.ScaleOutAt = 1.5 }, "WSGATE_SCALE_OUT_AT (1.5) must be a fraction"},
		{"scale in negative", func(c *Autoscaler) { c.ScaleInAt = -0.1 }, "WSGATE_SCALE_IN_AT (-0.1) must not be negative"},
		{"scale in above out", func(c *Autoscaler) { c.ScaleInAt = 0.8 }, "WSGATE_SCALE_IN_AT (0.8) must be below WSGATE_SCALE_OUT_AT (0.75)"},
		{"scale in equals out", func(c *Autoscaler) { c.ScaleInAt = 0.75 }, "WSGATE_SCALE_IN_AT (0.75) must be below"},
		{"cpu out zero", func(c *Autoscaler) { c.CPUOutAt = 0 }, "WSGATE_CPU_OUT_AT (0) must be positive"},
		{"cpu in above out", func(c *Autoscaler) { c.CPUInAt = 0.9 }, "WSGATE_CPU_IN_AT (0.9) must be below WSGATE_CPU_OUT_AT (0.8)"},
		{"min nodes", func(c *Autoscaler) { c.MinNodes = 0 }, "WSGATE_MIN_NODES (0) must be at least 1"},
		{"max below min", func(c *Autoscaler) { c.MinNodes, c.MaxNodes = 3, 2 }, "WSGATE_MAX_NODES (2) must not be below WSGATE_MIN_NODES (3)"},
		{"max equals min", func(c *Autoscaler) { c.MinNodes, c.MaxNodes = 2, 2 }, ""},
		{"cooldown negative", func(c *Autoscaler) { c.Cooldown = -time.Second }, "WSGATE_COOLDOWN (-1s) must not be negative"},
		{"cooldown zero", func(c *Autoscaler) { c.Cooldown = 0 }, ""},
		{"startup grace negative", func(c *Autoscaler) { c.StartupGrace = -time.Second }, "WSGATE_STARTUP_GRACE (-1s) must not be negative"},
		{"startup grace zero", func(c *Autoscaler) { c.StartupGrace = 0 }, ""},
		{"actuator", func(c *Autoscaler) { c.Actuator = "docker" }, `WSGATE_ACTUATOR ("docker") must be exec, kubernetes or local`},
		{"exec without command", func(c *Autoscaler) { c.ExecCommand = "" }, "WSGATE_EXEC_COMMAND must be set when WSGATE_ACTUATOR=exec"},
		{"kubernetes without deployment", func(c *Autoscaler) { c.Actuator = "kubernetes" },
			"WSGATE_K8S_DEPLOYMENT must be set when WSGATE_ACTUATOR=kubernetes"},
		{"kubernetes", func(c *Autoscaler) { c.Actuator, c.K8sDeployment = "kubernetes", "wsgate" }, ""},
		{"k8s api url", func(c *Autoscaler) { c.K8sAPIURL = "ftp://k" }, `WSGATE_K8S_API_URL ("ftp://k") must be an http:// or https:// URL`},
		{"local", func(c *Autoscaler) { c.Actuator = "local" }, ""},
		{"local port", func(c *Autoscaler) { c.Actuator, c.LocalBasePort = "local", 65530 }, "WSGATE_LOCAL_BASE_PORT (65530) must leave room"},
		{"log level", func(c *Autoscaler) { c.LogLevel = "" }, `WSGATE_LOG_LEVEL ("") must be debug, info, warn or error`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.edit(&c)
			wantErr(t, c.Validate(), tt.err)
		})
	}
}

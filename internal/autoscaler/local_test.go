package autoscaler_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/autoscaler"
	"github.com/wsgate/wsgate/internal/cluster"
)

func TestLocalEnv(t *testing.T) {
	exe, _ := os.Executable()
	base := []string{"PATH=/usr/bin", "WSGATE_CONFIG=/etc/autoscaler.yaml", "WSGATE_LISTEN=:8081", "WSGATE_NODE_ID=x",
		"WSGATE_ADVERTISE_URL=ws://x/ws", "WSGATE_AUTH_INSECURE=true", "WSGATE_JWT_SECRET=from-env", "WSGATE_REDIS_URL=redis://old:1/0"}
	l, err := autoscaler.NewLocal(autoscaler.LocalConfig{Binary: exe, BasePort: 9000, MaxNodes: 3, RedisURL: "redis://r:6379/0",
		RedisPrefix: "p", APIKey: "k", HeartbeatInterval: time.Second, Env: base})
	if err != nil {
		t.Fatal(err)
	}
	env := autoscaler.LocalEnv(l, "local-9000", "127.0.0.1:9000")
	slices.Sort(env)
	want := []string{"PATH=/usr/bin", "WSGATE_API_KEY=k", "WSGATE_AUTH_INSECURE=true", "WSGATE_HEARTBEAT_INTERVAL=1s",
		"WSGATE_JWT_SECRET=from-env", "WSGATE_LISTEN=127.0.0.1:9000", "WSGATE_NODE_ID=local-9000", "WSGATE_REDIS_PREFIX=p",
		"WSGATE_REDIS_URL=redis://r:6379/0"}
	if strings.Join(env, "\n") != strings.Join(want, "\n") {
		t.Fatalf("env:\n%s\nwant:\n%s", strings.Join(env, "\n"), strings.Join(want, "\n"))
	}
	// An explicit --jwt-secret wins over the environment.
	l2, _ := autoscaler.NewLocal(autoscaler.LocalConfig{Binary: exe, BasePort: 9000, RedisURL: "redis://r:6379/0", JWTSecret: "flag", Env: base})
	if env := autoscaler.LocalEnv(l2, "a", "b"); !slices.Contains(env, "WSGATE_JWT_SECRET=flag") || slices.Contains(env, "WSGATE_JWT_SECRET=from-env") {
		t.Fatalf("jwt secret: %q", env)
	}
}

func TestLocalChecks(t *testing.T) {
	exe, _ := os.Executable()
	for _, cfg := range []autoscaler.LocalConfig{
		{Binary: "/nonexistent/wsgate", BasePort: 9000, RedisURL: "redis://r:1/0"},
		{Binary: exe, BasePort: 9000},
		{Binary: exe, BasePort: 0, RedisURL: "redis://r:1/0"},
	} {
		if _, err := autoscaler.NewLocal(cfg); err == nil {
			t.Errorf("NewLocal(%+v) accepted", cfg)
		}
	}
	// A node it did not start, without an API key: it cannot drain it.
	l, err := autoscaler.NewLocal(autoscaler.LocalConfig{Binary: exe, BasePort: 9000, RedisURL: "redis://r:1/0"})
	if err != nil {
		t.Fatal(err)
	}
	err = l.ScaleIn(context.Background(), cluster.NodeInfo{ID: "other", APIURL: "http://127.0.0.1:1"}, 1)
	if err == nil || !strings.Contains(err.Error(), "not started by this autoscaler") {
		t.Fatalf("got %v", err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

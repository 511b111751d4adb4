package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterServers is a Redis Cluster of three masters without replicas.
type ClusterServers struct {
	t       testing.TB
	Servers []*Server
}

// Cluster starts three cluster-enabled servers, joins them with
// `redis-cli --cluster create` and waits until every node reports
// cluster_state:ok.
func Cluster(t testing.TB) *ClusterServers {
	t.Helper()
	cli := binary(t, "REDIS_CLI", "redis-cli")
	root := t.TempDir()
	c := &ClusterServers{t: t}
	for i := range 3 {
		dir := filepath.Join(root, fmt.Sprintf("n%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		c.Servers = append(c.Servers, startServer(t, dir, true,
			"--appendonly", "no",
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "3000"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, tail(string(out), 3000))
	}
	deadline := time.Now().Add(readyTimeout)
	for _, s := range c.Servers {
		for {
			info, err := s.Client().ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_slots_ok:16384") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ok after %s: %v\n%s", s.Addr(), readyTimeout, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

func (c *ClusterServers) addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr()
	}
	return out
}

// Seeds is the comma list of the nodes' addresses (a cluster URL).
func (c *ClusterServers) Seeds() string { return strings.Join(c.addrs(), ",") }

// URL is the redis:// form of the seed list.
func (c *ClusterServers) URL() string { return "redis://" + c.Seeds() }

// Client returns a cluster client of the servers; close it when done.
func (c *ClusterServers) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs(), DisableIdentity: true})
}

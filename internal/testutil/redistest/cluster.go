package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterServers is a Redis Cluster of three masters, without replicas
// (Cluster) or with one each (ClusterWithReplicas).
type ClusterServers struct {
	t       testing.TB
	Servers []*Server // the masters, as created
	// Replicas[i] replicates Servers[i] (ClusterWithReplicas only).
	Replicas []*Server
}

// Cluster starts three cluster-enabled servers, joins them with
// `redis-cli --cluster create` and waits until every node reports
// cluster_state:ok.
func Cluster(t testing.TB) *ClusterServers {
	t.Helper()
	return startCluster(t, 0)
}

// ClusterWithReplicas is Cluster with one replica per master, for
// failovers (cluster-node-timeout 3 s): it waits until every replica is
// in sync with its master.
func ClusterWithReplicas(t testing.TB) *ClusterServers {
	t.Helper()
	c := startCluster(t, 1)
	all := c.Servers
	c.Servers = nil
	byPort := map[int]*Server{}
	for _, s := range all {
		byPort[s.Port] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	masterOf := map[*Server]int{}
	deadline := time.Now().Add(readyTimeout)
	for _, s := range all {
		for {
			info, err := s.Client().Info(ctx, "replication").Result()
			if err == nil && strings.Contains(info, "role:master") {
				c.Servers = append(c.Servers, s)
				break
			}
			if err == nil && strings.Contains(info, "master_link_status:up") {
				for _, line := range strings.Split(info, "\r\n") {
					if v, ok := strings.CutPrefix(line, "master_port:"); ok {
						port, _ := strconv.Atoi(v)
						masterOf[s] = port
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s neither master nor synced replica after %s: %v\n%s", s.Addr(), readyTimeout, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if len(c.Servers) != len(all)/2 {
		t.Fatalf("redistest: %d masters among %d nodes", len(c.Servers), len(all))
	}
	c.Replicas = make([]*Server, len(c.Servers))
	for r, port := range masterOf {
		for i, m := range c.Servers {
			if m.Port == port {
				c.Replicas[i] = r
			}
		}
	}
	for i, r := range c.Replicas {
		if r == nil {
			t.Fatalf("redistest: master %s has no replica", c.Servers[i].Addr())
		}
	}
	return c
}

func startCluster(t testing.TB, replicas int) *ClusterServers {
	t.Helper()
	cli := binary(t, "REDIS_CLI", "redis-cli")
	root := t.TempDir()
	c := &ClusterServers{t: t}
	for i := range 3 * (1 + replicas) {
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
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, tail(string(out), 3000))
	}
	deadline := time.Now().Add(readyTimeout)
	for _, s := range c.Servers {
		for {
			info, err := s.Client().ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_slots_ok:16384") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Servers))) {
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

// KillShardedSubscribers closes, on every master, the connections with
// sharded subscriptions (CLIENT LIST's ssub > 0) and returns how many.
func (c *ClusterServers) KillShardedSubscribers(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	killed := 0
	for _, s := range c.Servers {
		list, err := s.Client().ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			var id string
			ssub := 0
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "id":
					id = v
				case "ssub":
					ssub, _ = strconv.Atoi(v)
				}
			}
			if ssub == 0 {
				continue
			}
			if err := s.Client().Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
				t.Fatal(err)
			}
			killed++
		}
	}
	return killed
}

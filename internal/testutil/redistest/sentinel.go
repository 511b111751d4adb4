package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelMaster is the master name that SentinelSet monitors.
const SentinelMaster = "mymaster"

// SentinelSet is one master, one replica and one sentinel (quorum 1,
// down-after-milliseconds 1000, failover-timeout 3000).
type SentinelSet struct {
	t        testing.TB
	Master   *Server // the current master (swapped by Failover)
	Replica  *Server // the current replica
	Sentinel *Server
}

// Sentinel starts the set and waits until the replica is in sync and the
// sentinel knows it.
func Sentinel(t testing.TB) *SentinelSet {
	t.Helper()
	root := t.TempDir()
	mkdir := func(name string) string {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	s := &SentinelSet{t: t}
	// No delay before a full sync (the default waits 5 s for more replicas).
	s.Master = startServer(t, mkdir("master"), false, "--appendonly", "no", "--repl-diskless-sync-delay", "0")
	s.Replica = startServer(t, mkdir("replica"), false, "--appendonly", "no", "--repl-diskless-sync-delay", "0",
		"--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port))
	sdir := mkdir("sentinel")
	s.Sentinel = startWith(t, sdir, false, func(port int) []string {
		conf := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
daemonize no
dir %s
logfile redis.log
sentinel monitor %s 127.0.0.1 %d 1
sentinel down-after-milliseconds %[3]s 1000
sentinel failover-timeout %[3]s 3000
`, port, sdir, SentinelMaster, s.Master.Port)
		path := filepath.Join(sdir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{path, "--sentinel"}
	})
	s.WaitReplicaSynced()
	s.waitSentinelSeesReplica()
	return s
}

// URL is the redis-sentinel:// URL of the set.
func (s *SentinelSet) URL() string {
	return "redis-sentinel://" + s.Sentinel.Addr() + "/" + SentinelMaster
}

// WaitReplicaSynced waits until the current replica is linked to the
// current master and in sync (so that WAIT 1 succeeds).
func (s *SentinelSet) WaitReplicaSynced() {
	s.t.Helper()
	s.eventually("replica in sync", func(ctx context.Context) (bool, string) {
		info, err := s.Replica.Client().Info(ctx, "replication").Result()
		ok := err == nil && strings.Contains(info, "master_link_status:up") &&
			strings.Contains(info, "master_port:"+strconv.Itoa(s.Master.Port)) &&
			strings.Contains(info, "master_sync_in_progress:0")
		return ok, fmt.Sprintf("replica INFO: %v %s", err, info)
	})
}

// waitSentinelSeesReplica waits until the sentinel lists the replica as
// healthy, which SENTINEL FAILOVER needs.
func (s *SentinelSet) waitSentinelSeesReplica() {
	s.t.Helper()
	s.eventually("sentinel knows the replica", func(ctx context.Context) (bool, string) {
		reps, err := s.Sentinel.Client().Do(ctx, "SENTINEL", "REPLICAS", SentinelMaster).Slice()
		if err != nil {
			return false, err.Error()
		}
		for _, r := range reps {
			f := fields(r)
			if f["port"] == strconv.Itoa(s.Replica.Port) && f["flags"] == "slave" && f["master-link-status"] == "ok" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("sentinel replicas: %v", reps)
	})
}

// Failover makes the replica the master (SENTINEL FAILOVER) and waits
// until the sentinel reports the new master's address and that server
// answers as master. Master and Replica are swapped and the old master is
// made a replica of the new one; WaitReplicaSynced waits until it is in
// sync.
func (s *SentinelSet) Failover() {
	s.t.Helper()
	next := s.Replica
	s.waitSentinelSeesReplica()
	s.eventually("SENTINEL FAILOVER accepted", func(ctx context.Context) (bool, string) {
		err := s.Sentinel.Client().Do(ctx, "SENTINEL", "FAILOVER", SentinelMaster).Err()
		return err == nil, fmt.Sprint(err)
	})
	s.eventually("sentinel reports the new master", func(ctx context.Context) (bool, string) {
		addr, err := s.Sentinel.Client().Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster).StringSlice()
		if err != nil || len(addr) != 2 || addr[1] != strconv.Itoa(next.Port) {
			return false, fmt.Sprint(addr, err)
		}
		info, err := next.Client().Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master"), fmt.Sprint(err, info)
	})
	old := s.Master
	s.Master, s.Replica = next, old
	// The sentinel turns the old master into a replica of the new one only
	// after its next INFO round (up to ~20 s); do what it would do now.
	s.eventually("old master follows the new one", func(ctx context.Context) (bool, string) {
		err := old.Client().ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(next.Port)).Err()
		return err == nil, fmt.Sprint(err)
	})
}

func (s *SentinelSet) eventually(what string, cond func(ctx context.Context) (bool, string)) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok, state := cond(ctx)
		cancel()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: %s: not after 30s; last: %s", what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fields turns a sentinel reply entry (flat list or map) into a map.
func fields(v any) map[string]string {
	out := map[string]string{}
	switch e := v.(type) {
	case []any:
		for i := 0; i+1 < len(e); i += 2 {
			out[fmt.Sprint(e[i])] = fmt.Sprint(e[i+1])
		}
	case map[any]any:
		for k, v := range e {
			out[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	}
	return out
}

package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStandaloneRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, aof := range []bool{false, true} {
		s := Standalone(t, Options{AOF: aof})
		if s.Port == 6379 || s.Port == 26379 {
			t.Fatalf("default port %d used", s.Port)
		}
		c := s.Client()
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		s.Stop()
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("PING answered by a stopped server")
		}
		s.Start()
		v, err := c.Get(ctx, "k").Result()
		switch {
		case aof && v != "v":
			t.Fatalf("AOF server lost its data: %q %v", v, err)
		case !aof && !errors.Is(err, redis.Nil):
			t.Fatalf("server without persistence kept data: %q %v", v, err)
		}
		s.Flush()
		if n, _ := c.DBSize(ctx).Result(); n != 0 {
			t.Fatalf("DBSIZE after Flush = %d", n)
		}
		s.Kill()
		s.Start()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestClusterAndSentinel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := Cluster(t)
	cc := cl.Client()
	defer cc.Close()
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	set := Sentinel(t)
	oldMaster := set.Master.Port
	set.Failover()
	if set.Master.Port == oldMaster || set.Replica.Port != oldMaster {
		t.Fatalf("after failover master %d replica %d (old master %d)", set.Master.Port, set.Replica.Port, oldMaster)
	}
	set.WaitReplicaSynced()
}

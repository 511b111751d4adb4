package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseRedisURL(t *testing.T) {
	tests := []struct {
		in   string
		want RedisTarget // Options is not compared
		err  string
	}{
		{in: "redis://localhost:6379/0", want: RedisTarget{Mode: RedisSingle, Addrs: []string{"localhost:6379"}}},
		{in: "redis://u:p@r:6380/3", want: RedisTarget{Mode: RedisSingle, Addrs: []string{"r:6380"}, Username: "u", Password: "p", DB: 3}},
		{in: "rediss://r", want: RedisTarget{Mode: RedisSingle, Addrs: []string{"r:6379"}, TLS: true}},
		{in: "redis://r:6379?dial_timeout=3s", want: RedisTarget{Mode: RedisSingle, Addrs: []string{"r:6379"}}},
		{in: "redis://r:6379?bogus=1", err: "unexpected option: bogus"},
		{in: "redis://r:6379/x", err: "invalid database number"},
		{in: " r1:7000 ", want: RedisTarget{Mode: RedisSingle, Addrs: []string{"r1:7000"}}},
		{in: "r1:7000, r2:7000,", want: RedisTarget{Mode: RedisCluster, Addrs: []string{"r1:7000", "r2:7000"}}},
		{in: "r1", err: `address "r1": missing port in address`},
		{in: ":7000", err: `address ":7000" must be host:port with a host and a port`},
		{in: "r1:0", err: `address "r1:0" must be host:port with a host and a port`},
		{in: ",", err: "no host:port address"},
		{in: "redis://:pw@r1:7000,r2:7000", want: RedisTarget{Mode: RedisCluster, Addrs: []string{"r1:7000", "r2:7000"}, Password: "pw"}},
		{in: "rediss://u:pw@r1:7000,r2:7000/0", want: RedisTarget{Mode: RedisCluster, Addrs: []string{"r1:7000", "r2:7000"},
			Username: "u", Password: "pw", TLS: true}},
		{in: "redis://r1:7000,r2:7000/1", err: `a Redis Cluster has only database 0, not "1"`},
		{in: "redis://r1:7000,r2:7000?x=1", err: "a cluster URL takes no query"},
		{in: "redis-cluster://r1:7000", want: RedisTarget{Mode: RedisCluster, Addrs: []string{"r1:7000"}}},
		{in: "rediss-cluster://:pw@r1:7000", want: RedisTarget{Mode: RedisCluster, Addrs: []string{"r1:7000"}, Password: "pw", TLS: true}},
		{in: "redis-sentinel://s1:26379,s2:26379/mymaster",
			want: RedisTarget{Mode: RedisSentinel, Addrs: []string{"s1:26379", "s2:26379"}, MasterName: "mymaster"}},
		{in: "redis-sentinel://:p%40ss@s1:26379/m?db=2",
			want: RedisTarget{Mode: RedisSentinel, Addrs: []string{"s1:26379"}, MasterName: "m", Password: "p@ss", DB: 2}},
		{in: "redis-sentinel://u:pw@s1:26379/m/?sentinel_username=su&sentinel_password=sp",
			want: RedisTarget{Mode: RedisSentinel, Addrs: []string{"s1:26379"}, MasterName: "m", Username: "u", Password: "pw",
				SentinelUsername: "su", SentinelPassword: "sp"}},
		{in: "redis-sentinel://s1:26379", err: "needs the master name"},
		{in: "redis-sentinel://s1:26379/", err: "needs the master name"},
		{in: "redis-sentinel://s1:26379/m/x", err: "needs the master name"},
		{in: "redis-sentinel://:%zz@s1:26379/m", err: "bad credentials"},
		{in: "redis-sentinel://s1:26379/m?db=-1", err: `db "-1" is not a database number`},
		{in: "redis-sentinel://s1:26379/m?timeout=1", err: `unknown sentinel option "timeout"`},
		{in: "redis-sentinel:///m", err: "no host:port address"},
		{in: "unix:///tmp/redis.sock", err: `scheme "unix" not supported`},
		{in: "", err: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRedisURL(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(tt.in, "redis") && (got.Mode == RedisSingle) != (got.Options != nil) {
				t.Fatalf("Options = %v for mode %s", got.Options, got.Mode)
			}
			got.Options = nil
			if !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

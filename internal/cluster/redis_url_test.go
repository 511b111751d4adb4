package cluster

import (
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestRedisURLForms(t *testing.T) {
	standalone := []struct {
		url      string
		addr     string
		db       int
		password string
	}{
		{"redis://127.0.0.1:7000/2", "127.0.0.1:7000", 2, ""},
		{"redis://:s3cret@10.0.0.1:7000", "10.0.0.1:7000", 0, "s3cret"},
		{"127.0.0.1:7000", "127.0.0.1:7000", 0, ""},
	}
	for _, tc := range standalone {
		c, err := newRedisClient(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		cl, ok := c.(*redis.Client)
		if !ok {
			t.Fatalf("%s: %T, want *redis.Client", tc.url, c)
		}
		o := cl.Options()
		if o.Addr != tc.addr || o.DB != tc.db || o.Password != tc.password {
			t.Errorf("%s: addr %q db %d password %q", tc.url, o.Addr, o.DB, o.Password)
		}
		if o.DialTimeout != redisDialTimeout || o.ReadTimeout != redisReadTimeout || o.PoolTimeout != redisPoolTimeout || !o.ContextTimeoutEnabled {
			t.Errorf("%s: timeouts not applied: %+v", tc.url, o)
		}
		_ = c.Close()
	}

	clusters := []struct {
		url      string
		addrs    []string
		password string
	}{
		{"127.0.0.1:7000,127.0.0.1:7001", []string{"127.0.0.1:7000", "127.0.0.1:7001"}, ""},
		{"redis://:pw@h1:1,h2:2", []string{"h1:1", "h2:2"}, "pw"},
		{"redis://h1:1, h2:2/0", []string{"h1:1", "h2:2"}, ""},
		{"redis-cluster://h1:1", []string{"h1:1"}, ""},
	}
	for _, tc := range clusters {
		c, err := newRedisClient(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		cc, ok := c.(*redis.ClusterClient)
		if !ok {
			t.Fatalf("%s: %T, want *redis.ClusterClient", tc.url, c)
		}
		o := cc.Options()
		if !slices.Equal(o.Addrs, tc.addrs) || o.Password != tc.password {
			t.Errorf("%s: addrs %q password %q", tc.url, o.Addrs, o.Password)
		}
		_ = c.Close()
	}

	c, err := newRedisClient("redis-sentinel://:pw@s1:26000,s2:26001/mymaster?db=3&sentinel_password=sp")
	if err != nil {
		t.Fatal(err)
	}
	if o := c.(*redis.Client).Options(); o.DB != 3 || o.Password != "pw" {
		t.Errorf("sentinel: db %d password %q", o.DB, o.Password)
	}
	_ = c.Close()

	for _, bad := range []string{
		"", "ftp://h:1", "h1", "h1:port", "redis://h1:1,h2:2/3", "redis://h1:1,h2:2?x=1",
		"redis-sentinel://s1:26000", "redis-sentinel://s1:26000/a/b", "redis-sentinel://s1:26000/m?foo=1",
		"redis-sentinel://s1:26000/m?db=x",
	} {
		if c, err := newRedisClient(bad); err == nil {
			_ = c.Close()
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestInboxGap(t *testing.T) {
	for _, tc := range []struct{ since, acked, first, last, from, to int64 }{
		{0, 0, 0, 0, 0, 0},  // nothing ever
		{0, 0, 1, 3, 0, 0},  // all kept
		{0, 0, 3, 5, 1, 2},  // 1, 2 dropped
		{1, 0, 3, 5, 2, 2},  // reader has 1
		{0, 1, 3, 5, 2, 2},  // 1 acknowledged
		{2, 0, 3, 5, 0, 0},  // reader has what was dropped
		{0, 0, 0, 2, 1, 2},  // everything dropped
		{0, 2, 0, 3, 3, 3},  // 1, 2 acknowledged, 3 expired
		{7, 0, 0, 5, 0, 0},  // since above last
		{-1, 0, 2, 2, 1, 1}, // negative since reads as 0
	} {
		from, to := inboxGap(tc.since, tc.acked, tc.first, tc.last)
		if from != tc.from || to != tc.to {
			t.Errorf("inboxGap(since %d, acked %d, first %d, last %d) = %d..%d, want %d..%d",
				tc.since, tc.acked, tc.first, tc.last, from, to, tc.from, tc.to)
		}
	}
}

func TestRouteEncoding(t *testing.T) {
	for _, rt := range []Route{
		{Node: "n|1|2", ConnectedAt: 42, Device: DefaultDevice},
		{Node: "n|1|2", ConnectedAt: 42, Device: "phone.2"},
		{Node: "n", ConnectedAt: 42, Device: "123"},
	} {
		v := encodeRoute(rt, 99)
		got, exp, ok := decodeRoute(v)
		if !ok || got != rt || exp != 99 {
			t.Fatalf("decode(%q) = %+v %d %v", v, got, exp, ok)
		}
	}
	// The default device keeps the value nodes of the previous version read.
	if v := encodeRoute(Route{Node: "n", ConnectedAt: 1}, 2); v != "n|1|2" {
		t.Errorf("default device route = %q, want n|1|2", v)
	}
	for _, bad := range []string{"", "x", "n|1", "n|x|1", "n|1|x", "n|1|@d", "|@d"} {
		if _, _, ok := decodeRoute(bad); ok {
			t.Errorf("%q decoded", bad)
		}
	}
}

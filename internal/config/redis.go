package config

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisMode is the kind of Redis deployment a WSGATE_REDIS_URL names.
type RedisMode string

// Redis deployment kinds.
const (
	RedisSingle   RedisMode = "single"
	RedisCluster  RedisMode = "cluster"
	RedisSentinel RedisMode = "sentinel"
)

// RedisTarget is a parsed WSGATE_REDIS_URL.
type RedisTarget struct {
	Mode RedisMode
	// Addrs is the server (single), the seed nodes (cluster) or the
	// sentinels (sentinel), each host:port.
	Addrs    []string
	Username string
	Password string // of the server, the cluster or the Sentinel master
	DB       int    // single, sentinel (a cluster has only 0)
	TLS      bool   // rediss:// or rediss-cluster://
	// Sentinel only.
	MasterName       string
	SentinelUsername string
	SentinelPassword string
	// Options is the go-redis form of a redis:// or rediss:// URL naming
	// one server, with every query option of redis.ParseURL applied; nil
	// otherwise.
	Options *redis.Options
}

// ParseRedisURL parses the forms WSGATE_REDIS_URL accepts:
//
//	host:port                                              one server
//	host:port,host:port[,...]                              Redis Cluster seeds
//	redis://[[user]:password@]host:port[/db][?option=value] one server (rediss:// for TLS)
//	redis://[[user]:password@]host:port,host:port[/0]      Redis Cluster (rediss:// for TLS)
//	redis-cluster://[[user]:password@]host:port[,...][/0]   Redis Cluster, even with one seed
//	                                                       (rediss-cluster:// for TLS)
//	redis-sentinel://[[user]:password@]host:port[,...]/master[?db=N&sentinel_username=U&sentinel_password=P]
//
// It accepts exactly what the cluster backend connects to (the grammar of
// internal/cluster's newRedisClient), so that a URL that passes Validate
// does not fail later. Error texts never contain the password.
func ParseRedisURL(raw string) (*RedisTarget, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("empty")
	}
	scheme, rest, hasScheme := strings.Cut(raw, "://")
	if !hasScheme {
		addrs, err := parseAddrs(raw)
		if err != nil {
			return nil, err
		}
		if len(addrs) == 1 {
			return &RedisTarget{Mode: RedisSingle, Addrs: addrs}, nil
		}
		return &RedisTarget{Mode: RedisCluster, Addrs: addrs}, nil
	}
	switch scheme {
	case "redis", "rediss":
		host := rest
		if i := strings.IndexAny(host, "/?#"); i >= 0 {
			host = host[:i]
		}
		if i := strings.LastIndex(host, "@"); i >= 0 {
			host = host[i+1:]
		}
		if strings.Contains(host, ",") {
			return parseClusterURL(rest, scheme == "rediss")
		}
		return parseSingle(raw)
	case "redis-cluster", "rediss-cluster":
		return parseClusterURL(rest, scheme == "rediss-cluster")
	case "redis-sentinel":
		return parseSentinel(rest)
	}
	return nil, fmt.Errorf("scheme %q not supported (want redis, rediss, redis-cluster, rediss-cluster, "+
		"redis-sentinel, or host:port[,host:port...] without a scheme)", scheme)
}

func parseSingle(raw string) (*RedisTarget, error) {
	opt, err := redis.ParseURL(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password included
		}
		return nil, err
	}
	return &RedisTarget{
		Mode:     RedisSingle,
		Addrs:    []string{opt.Addr},
		Username: opt.Username,
		Password: opt.Password,
		DB:       opt.DB,
		TLS:      opt.TLSConfig != nil,
		Options:  opt,
	}, nil
}

// parseClusterURL parses what follows the scheme of a cluster URL:
// [[user]:password@]h1:p1[,h2:p2...][/0], no query.
func parseClusterURL(rest string, tls bool) (*RedisTarget, error) {
	if strings.ContainsAny(rest, "?#") {
		return nil, errors.New("a cluster URL takes no query")
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if path != "" && path != "0" {
		return nil, fmt.Errorf("a Redis Cluster has only database 0, not %q", path)
	}
	t := &RedisTarget{Mode: RedisCluster, TLS: tls}
	var err error
	if t.Username, t.Password, t.Addrs, err = splitCredentials(hosts); err != nil {
		return nil, err
	}
	return t, nil
}

// parseSentinel parses what follows redis-sentinel://.
func parseSentinel(rest string) (*RedisTarget, error) {
	rest, query, _ := strings.Cut(rest, "?")
	hosts, master, _ := strings.Cut(rest, "/")
	master = strings.Trim(master, "/")
	t := &RedisTarget{Mode: RedisSentinel}
	var err error
	if t.Username, t.Password, t.Addrs, err = splitCredentials(hosts); err != nil {
		return nil, err
	}
	if master == "" || strings.Contains(master, "/") {
		return nil, errors.New("a sentinel URL needs the master name as its path: redis-sentinel://host:port/mymaster")
	}
	t.MasterName = master
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("bad query: %v", err)
	}
	for k, v := range q {
		last := v[len(v)-1]
		switch k {
		case "db":
			if t.DB, err = strconv.Atoi(last); err != nil || t.DB < 0 {
				return nil, fmt.Errorf("db %q is not a database number", last)
			}
		case "sentinel_username":
			t.SentinelUsername = last
		case "sentinel_password":
			t.SentinelPassword = last
		default:
			return nil, fmt.Errorf("unknown sentinel option %q (want db, sentinel_username, sentinel_password)", k)
		}
	}
	return t, nil
}

// splitCredentials splits "[[user]:password@]host:port[,host:port...]".
func splitCredentials(hosts string) (user, password string, addrs []string, err error) {
	if i := strings.LastIndex(hosts, "@"); i >= 0 {
		u, perr := url.Parse("redis://" + hosts[:i] + "@x")
		if perr != nil || u.User == nil {
			return "", "", nil, errors.New("bad credentials (want [user]:password@, %-escaped)")
		}
		user = u.User.Username()
		password, _ = u.User.Password()
		hosts = hosts[i+1:]
	}
	addrs, err = parseAddrs(hosts)
	return user, password, addrs, err
}

// parseAddrs parses a comma list of host:port.
func parseAddrs(s string) ([]string, error) {
	var addrs []string
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := splitListen(a)
		if err != nil {
			return nil, fmt.Errorf("address %q: %v", a, err)
		}
		if host == "" || port == 0 {
			return nil, fmt.Errorf("address %q must be host:port with a host and a port", a)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, errors.New("no host:port address")
	}
	return addrs, nil
}

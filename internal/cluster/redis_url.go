package cluster

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Timeouts of every Redis call (see RedisOptions). A call whose context has
// no deadline is further bounded by RedisOptions.OpTimeout.
const (
	redisDialTimeout  = 2 * time.Second
	redisReadTimeout  = 2 * time.Second
	redisWriteTimeout = 2 * time.Second
	redisPoolTimeout  = 3 * time.Second
)

// newRedisClient builds the go-redis client that rawURL names; see
// RedisOptions.URL for the forms.
func newRedisClient(rawURL string) (redis.UniversalClient, error) {
	rawURL = strings.TrimSpace(rawURL)
	scheme, rest, hasScheme := strings.Cut(rawURL, "://")
	if !hasScheme {
		// A bare "host:port" is a standalone server; a comma list of them
		// is the seed list of a Redis Cluster.
		addrs, err := splitAddrs(rawURL)
		if err != nil {
			return nil, err
		}
		if len(addrs) == 1 {
			return redis.NewClient(standaloneOptions(&redis.Options{Addr: addrs[0]})), nil
		}
		return redis.NewClusterClient(clusterOptions(&redis.ClusterOptions{Addrs: addrs})), nil
	}
	switch scheme {
	case "redis", "rediss":
		hostPart := rest
		if i := strings.IndexAny(hostPart, "/?#"); i >= 0 {
			hostPart = hostPart[:i]
		}
		if i := strings.LastIndex(hostPart, "@"); i >= 0 {
			hostPart = hostPart[i+1:]
		}
		if strings.Contains(hostPart, ",") {
			return parseClusterURL(rawURL, scheme == "rediss")
		}
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis url: %w", err)
		}
		return redis.NewClient(standaloneOptions(opt)), nil
	case "redis-cluster", "rediss-cluster":
		return parseClusterURL(rawURL, scheme == "rediss-cluster")
	case "redis-sentinel":
		return parseSentinelURL(rawURL)
	default:
		return nil, fmt.Errorf("redis url: unknown scheme %q (want redis, rediss, redis-cluster, rediss-cluster or redis-sentinel)", scheme)
	}
}

// splitCredentials splits "[[user]:password@]host:port[,host:port...]".
func splitCredentials(hostPart string) (user, password string, addrs []string, err error) {
	if i := strings.LastIndex(hostPart, "@"); i >= 0 {
		u, perr := url.Parse("redis://" + hostPart[:i] + "@x")
		if perr != nil || u.User == nil {
			return "", "", nil, fmt.Errorf("redis url: bad credentials")
		}
		user = u.User.Username()
		password, _ = u.User.Password()
		hostPart = hostPart[i+1:]
	}
	addrs, err = splitAddrs(hostPart)
	return user, password, addrs, err
}

func splitAddrs(list string) ([]string, error) {
	var addrs []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			return nil, fmt.Errorf("redis url: %q is not host:port", a)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return nil, fmt.Errorf("redis url: bad port in %q", a)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("redis url: no address")
	}
	return addrs, nil
}

// parseClusterURL reads redis[s]://[user:pass@]h1:p1,h2:p2[/0] (or the
// redis-cluster scheme, which allows a single seed).
func parseClusterURL(rawURL string, useTLS bool) (redis.UniversalClient, error) {
	_, rest, _ := strings.Cut(rawURL, "://")
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		return nil, fmt.Errorf("redis url: cluster URLs take no query")
	}
	hostPart, path, _ := strings.Cut(rest, "/")
	if path != "" && path != "0" {
		return nil, fmt.Errorf("redis url: Redis Cluster has only database 0, not %q", path)
	}
	opt := &redis.ClusterOptions{}
	var addrs []string
	var err error
	opt.Username, opt.Password, addrs, err = splitCredentials(hostPart)
	if err != nil {
		return nil, err
	}
	opt.Addrs = addrs
	if useTLS {
		host, _, _ := net.SplitHostPort(addrs[0])
		opt.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	return redis.NewClusterClient(clusterOptions(opt)), nil
}

// parseSentinelURL reads
// redis-sentinel://[[user]:password@]host:port[,host:port...]/mastername[?db=N&sentinel_password=P].
func parseSentinelURL(rawURL string) (redis.UniversalClient, error) {
	_, rest, _ := strings.Cut(rawURL, "://")
	rest, rawQuery, _ := strings.Cut(rest, "?")
	hostPart, master, _ := strings.Cut(rest, "/")
	master = strings.Trim(master, "/")
	if master == "" || strings.Contains(master, "/") {
		return nil, fmt.Errorf("redis url: sentinel URL needs exactly one master name as its path")
	}
	opt := &redis.FailoverOptions{MasterName: master}
	var err error
	opt.Username, opt.Password, opt.SentinelAddrs, err = splitCredentials(hostPart)
	if err != nil {
		return nil, err
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	for k, v := range q {
		switch k {
		case "db":
			if opt.DB, err = strconv.Atoi(v[len(v)-1]); err != nil || opt.DB < 0 {
				return nil, fmt.Errorf("redis url: bad db %q", v[len(v)-1])
			}
		case "sentinel_password":
			opt.SentinelPassword = v[len(v)-1]
		case "sentinel_username":
			opt.SentinelUsername = v[len(v)-1]
		default:
			return nil, fmt.Errorf("redis url: unknown sentinel option %q", k)
		}
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = redisDialTimeout, redisReadTimeout, redisWriteTimeout
	opt.PoolTimeout = redisPoolTimeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1 // the backend retries what is safe to retry (see Redis.do)
	opt.DialerRetries = 2
	opt.DisableIdentity = true
	return redis.NewFailoverClient(opt), nil
}

func standaloneOptions(opt *redis.Options) *redis.Options {
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = redisDialTimeout, redisReadTimeout, redisWriteTimeout
	opt.PoolTimeout = redisPoolTimeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DialerRetries = 2
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opt
}

func clusterOptions(opt *redis.ClusterOptions) *redis.ClusterOptions {
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = redisDialTimeout, redisReadTimeout, redisWriteTimeout
	opt.PoolTimeout = redisPoolTimeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DialerRetries = 2
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opt
}

// NewRedisClient builds a go-redis client for any URL that WSGATE_REDIS_URL
// accepts, with the timeouts of the cluster backend (the upstream Redis
// Streams sink uses it, so both speak the same URL grammar). go-redis's
// own log lines go to slog at debug level, as the backend's do.
func NewRedisClient(rawURL string) (redis.UniversalClient, error) {
	redisLogOnce.Do(func() { redis.SetLogger(goRedisLogger{}) })
	return newRedisClient(rawURL)
}

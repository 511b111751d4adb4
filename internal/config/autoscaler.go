package config

import "time"

// Autoscaler is the configuration of wsgate autoscaler (contract §8).
type Autoscaler struct {
	Listen            string
	RedisURL          string // required: the load comes from the cluster's Redis
	RedisPrefix       string
	HeartbeatInterval time.Duration // the gateways' report period; older than 3 periods = gone

	Interval        time.Duration // decision period
	MaxConnsPerNode int           // capacity of one node
	ScaleOutAt      float64       // fraction of capacity
	ScaleInAt       float64       // fraction of capacity, below ScaleOutAt
	CPUOutAt        float64       // mean node CPU load, in cores used by the gateway process
	CPUInAt         float64       // node CPU load, below CPUOutAt
	MinNodes        int
	MaxNodes        int
	Cooldown        time.Duration // after a scale-out before the next; after any action before a scale-in
	StartupGrace    time.Duration // after the start before any scale-in; 0 = none

	Actuator      string // ActuatorExec, ActuatorKubernetes or ActuatorLocal
	ExecCommand   string
	ExecTimeout   time.Duration // exec actuator: limit of one run; 0 = DefaultExecTimeout
	K8sNamespace  string
	K8sDeployment string
	K8sAPIURL     string
	LocalBinary   string
	LocalBasePort int

	APIKey    string // the gateways' server API key (drain calls)
	JWTSecret string // local actuator: WSGATE_JWT_SECRET of the nodes it starts
	LogLevel  string
}

// DefaultExecTimeout bounds one run of the exec actuator's command when
// WSGATE_EXEC_TIMEOUT is 0 (its default).
const DefaultExecTimeout = 2 * time.Minute

// Actuators (WSGATE_ACTUATOR).
const (
	ActuatorExec       = "exec"
	ActuatorKubernetes = "kubernetes"
	ActuatorLocal      = "local"
)

// NewAutoscalerSet registers every autoscaler setting with cfg's fields
// and writes the defaults into cfg.
func NewAutoscalerSet(cfg *Autoscaler) *Set {
	s := NewSet("autoscaler")
	s.Summary = "Runs the scaling controller: reads the nodes' load and scales the gateway fleet through an actuator."
	s.String(&cfg.Listen, "listen", ":9181", "HTTP listen address (metrics, health, /v1/status)")
	s.String(&cfg.RedisURL, "redis-url", "", "Redis of the cluster (same forms as for the gateway); required").SecretURL()
	s.String(&cfg.RedisPrefix, "redis-prefix", "wsgate", "prefix of every Redis key and channel of the cluster")
	s.Duration(&cfg.HeartbeatInterval, "heartbeat-interval", 2*time.Second,
		"the gateways' report period; a node silent for 3 periods is not counted")
	s.Duration(&cfg.Interval, "interval", 15*time.Second, "period of the scaling decision")
	s.Int(&cfg.MaxConnsPerNode, "max-conns-per-node", 15000, "connections one node is sized for (its capacity)")
	s.Float(&cfg.ScaleOutAt, "scale-out-at", 0.75, "add a node when connections exceed this fraction of capacity")
	s.Float(&cfg.ScaleInAt, "scale-in-at", 0.35, "remove a node when connections stay below this fraction of capacity")
	s.Float(&cfg.CPUOutAt, "cpu-out-at", 0.80, "add a node when the mean node CPU load (cores used by a gateway process) exceeds this")
	s.Float(&cfg.CPUInAt, "cpu-in-at", 0.30, "a node may be removed only when the mean node CPU load (cores) is below this")
	s.Int(&cfg.MinNodes, "min-nodes", 2, "never fewer nodes than this")
	s.Int(&cfg.MaxNodes, "max-nodes", 10, "never more nodes than this")
	s.Duration(&cfg.Cooldown, "cooldown", 5*time.Minute, "least time after a scale-out before the next one, and after any action before a scale-in")
	s.Duration(&cfg.StartupGrace, "startup-grace", 5*time.Minute, "no scale-in until this long after the autoscaler started "+
		"(it does not remember its last actions across restarts, and new nodes need time to report their load); 0 = none")
	s.String(&cfg.Actuator, "actuator", ActuatorExec, "how to scale: exec, kubernetes or local")
	s.String(&cfg.ExecCommand, "exec-command", "", "exec actuator: command run with the desired node count, or with drain NODE, as last arguments")
	s.Duration(&cfg.ExecTimeout, "exec-timeout", 0, "exec actuator: time limit of one run of the command, killed after it (0 = 2m)")
	s.String(&cfg.K8sNamespace, "k8s-namespace", "", "kubernetes actuator: namespace of the Deployment (empty = the pod's own namespace)")
	s.String(&cfg.K8sDeployment, "k8s-deployment", "", "kubernetes actuator: name of the gateway Deployment")
	s.String(&cfg.K8sAPIURL, "k8s-api-url", "", "kubernetes actuator: API server URL (empty = in-cluster service account)")
	s.String(&cfg.LocalBinary, "local-binary", "", "local actuator: wsgate binary to start (empty = this executable)")
	s.Int(&cfg.LocalBasePort, "local-base-port", 8090, "local actuator: port of the first node; the others follow")
	s.String(&cfg.APIKey, "api-key", "", "the gateways' server API key, used to drain a node").Secret()
	s.String(&cfg.JWTSecret, "jwt-secret", "", "local actuator: HS256 secret passed to the gateways it starts (WSGATE_JWT_SECRET)").Secret()
	s.String(&cfg.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	return s
}

// Validate returns the first problem, as Gateway.Validate does.
func (c *Autoscaler) Validate() error {
	var v checker
	v.listen("listen", c.Listen)
	if c.RedisURL == "" {
		v.failf("%s must be set: the autoscaler reads the nodes' load from the cluster's Redis", EnvName("redis-url"))
	}
	v.redisURL("redis-url", c.RedisURL)
	v.redisPrefix("redis-prefix", c.RedisPrefix)
	v.positive("heartbeat-interval", c.HeartbeatInterval)
	v.positive("interval", c.Interval)
	if v.ok() && c.MaxConnsPerNode < 1 {
		v.failf("%s (%d) must be at least 1", EnvName("max-conns-per-node"), c.MaxConnsPerNode)
	}
	if v.ok() && (c.ScaleOutAt <= 0 || c.ScaleOutAt > 1) {
		v.failf("%s (%g) must be a fraction of capacity above 0 and at most 1", EnvName("scale-out-at"), c.ScaleOutAt)
	}
	v.rate("scale-in-at", c.ScaleInAt)
	if v.ok() && c.ScaleInAt >= c.ScaleOutAt {
		v.failf("%s (%g) must be below %s (%g)", EnvName("scale-in-at"), c.ScaleInAt, EnvName("scale-out-at"), c.ScaleOutAt)
	}
	if v.ok() && c.CPUOutAt <= 0 {
		v.failf("%s (%g) must be positive", EnvName("cpu-out-at"), c.CPUOutAt)
	}
	v.rate("cpu-in-at", c.CPUInAt)
	if v.ok() && c.CPUInAt >= c.CPUOutAt {
		v.failf("%s (%g) must be below %s (%g)", EnvName("cpu-in-at"), c.CPUInAt, EnvName("cpu-out-at"), c.CPUOutAt)
	}
	if v.ok() && c.MinNodes < 1 {
		v.failf("%s (%d) must be at least 1", EnvName("min-nodes"), c.MinNodes)
	}
	if v.ok() && c.MaxNodes < c.MinNodes {
		v.failf("%s (%d) must not be below %s (%d)", EnvName("max-nodes"), c.MaxNodes, EnvName("min-nodes"), c.MinNodes)
	}
	v.notNegativeDur("cooldown", c.Cooldown)
	v.notNegativeDur("startup-grace", c.StartupGrace)
	v.notNegativeDur("exec-timeout", c.ExecTimeout)
	v.oneOf("actuator", c.Actuator, ActuatorExec, ActuatorKubernetes, ActuatorLocal)
	switch {
	case !v.ok():
	case c.Actuator == ActuatorExec && c.ExecCommand == "":
		v.failf("%s must be set when %s=%s", EnvName("exec-command"), EnvName("actuator"), ActuatorExec)
	case c.Actuator == ActuatorKubernetes && c.K8sDeployment == "":
		v.failf("%s must be set when %s=%s", EnvName("k8s-deployment"), EnvName("actuator"), ActuatorKubernetes)
	case c.Actuator == ActuatorLocal && (c.LocalBasePort < 1 || c.LocalBasePort+c.MaxNodes-1 > 65535):
		v.failf("%s (%d) must leave room for %s ports below 65536", EnvName("local-base-port"), c.LocalBasePort, EnvName("max-nodes"))
	}
	v.httpURL("k8s-api-url", c.K8sAPIURL)
	v.logLevel("log-level", c.LogLevel)
	return v.err
}

package autoscaler

import (
	"fmt"
	"log/slog"

	"github.com/wsgate/wsgate/internal/config"
)

// PolicyFrom returns the policy of the autoscaler's settings.
func PolicyFrom(cfg config.Autoscaler) Policy {
	return Policy{
		MaxConnsPerNode: cfg.MaxConnsPerNode,
		ScaleOutAt:      cfg.ScaleOutAt,
		ScaleInAt:       cfg.ScaleInAt,
		CPUOutAt:        cfg.CPUOutAt,
		CPUInAt:         cfg.CPUInAt,
		MinNodes:        cfg.MinNodes,
		MaxNodes:        cfg.MaxNodes,
		Cooldown:        cfg.Cooldown,
		StartupGrace:    cfg.StartupGrace,
		StaleAfter:      3 * cfg.HeartbeatInterval,
	}
}

// NewActuator builds the actuator WSGATE_ACTUATOR names.
func NewActuator(cfg config.Autoscaler, log *slog.Logger) (Actuator, error) {
	switch cfg.Actuator {
	case config.ActuatorExec:
		timeout := cfg.ExecTimeout
		if timeout <= 0 {
			timeout = config.DefaultExecTimeout
		}
		if cfg.APIKey == "" {
			log.Warn("exec actuator without WSGATE_API_KEY: nodes are not drained through the API; the command given `drain NODE` must drain it (SIGTERM)")
		}
		return NewExec(ExecConfig{Command: cfg.ExecCommand, Timeout: timeout, APIKey: cfg.APIKey, Logger: log})
	case config.ActuatorKubernetes:
		return NewKubernetes(KubernetesConfig{APIURL: cfg.K8sAPIURL, Namespace: cfg.K8sNamespace,
			Deployment: cfg.K8sDeployment, APIKey: cfg.APIKey, Logger: log})
	case config.ActuatorLocal:
		return NewLocal(LocalConfig{Binary: cfg.LocalBinary, BasePort: cfg.LocalBasePort, MaxNodes: cfg.MaxNodes,
			RedisURL: cfg.RedisURL, RedisPrefix: cfg.RedisPrefix, APIKey: cfg.APIKey, JWTSecret: cfg.JWTSecret,
			HeartbeatInterval: cfg.HeartbeatInterval, Logger: log})
	}
	return nil, fmt.Errorf("WSGATE_ACTUATOR (%q) must be exec, kubernetes or local", cfg.Actuator)
}

package autoscaler

// LocalEnv exposes the environment the local actuator gives a node.
func LocalEnv(l *Local, id, listen string) []string { return l.env(id, listen) }

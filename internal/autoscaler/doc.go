// Package autoscaler is the scaling controller behind `wsgate autoscaler`
// (contract §8, docs/autoscaler.md).
//
// Decide is the policy: a pure function from the cluster's node records,
// the settings, the times of the last actions and the drain in progress to
// a Decision (scale out, scale in one node, or nothing) that carries its
// reasons as text. Capacity is the fresh active and warming nodes; the load
// ratio is connections / (capacity nodes x MaxConnsPerNode); a scale-in
// always drains the least-loaded active node and waits until it has left the
// cluster before the next one.
//
// Controller runs Decide every interval against a NodeSource (the cluster
// backend), logs each decision as one JSON line, exports the
// wsgate_autoscaler_* metrics and serves /metrics, /healthz, /readyz and
// /v1/status. Actuators carry decisions out: Exec (a command), Kubernetes
// (the scale subresource of a Deployment) and Local (gateway processes on
// this machine).
package autoscaler

// Package helmtest renders the Helm chart deploy/helm/wsgate with Helm's
// own packages and checks the result. It is a module of its own so that
// Helm and the Kubernetes libraries it brings stay out of the gateway's
// module graph (make test runs it).
package helmtest

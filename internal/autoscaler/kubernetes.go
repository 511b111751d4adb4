package autoscaler

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// In-cluster service account files.
const (
	ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// DeletionCostAnnotation makes the ReplicaSet controller delete the
	// drained pod first when the replicas are lowered.
	DeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"
)

// KubernetesConfig configures the kubernetes actuator.
type KubernetesConfig struct {
	// APIURL is the API server; empty = in-cluster:
	// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
	APIURL     string
	Namespace  string // empty = the pod's namespace (NamespaceFile)
	Deployment string // the gateway Deployment
	// The service account files (defaults under ServiceAccountDir). A
	// missing token file is an error in-cluster; with APIURL set, requests
	// then go without a token. A missing CA file means the system roots.
	TokenFile, CAFile, NamespaceFile string
	// APIKey is the gateways' server API key: required, a scale-in drains
	// the pod's node through the gateway API before lowering the replicas.
	APIKey string
	// ReadyWait bounds the wait for the drained pod to turn NotReady
	// (default 30s) so that the ReplicaSet picks it when replicas drop.
	ReadyWait time.Duration
	Getenv    func(string) string // default os.Getenv
	HTTP      *http.Client        // gateway API calls
	Logger    *slog.Logger
}

// Kubernetes sets the replicas of the gateway Deployment through its scale
// subresource (GET and PUT of autoscaling/v1 Scale). The node id of each
// gateway must be its pod name (WSGATE_NODE_ID from metadata.name, as in
// deploy/kubernetes). A scale-in drains that node through the gateway API,
// marks its pod with a low pod-deletion-cost, waits (bounded) for the pod
// to turn NotReady, then lowers the replicas by one.
type Kubernetes struct {
	cfg    KubernetesConfig
	base   string // API server URL, no trailing slash
	client *http.Client
}

var _ Actuator = (*Kubernetes)(nil)

// NewKubernetes resolves the API server, namespace and credentials.
func NewKubernetes(cfg KubernetesConfig) (*Kubernetes, error) {
	if cfg.Deployment == "" {
		return nil, errors.New("kubernetes actuator: WSGATE_K8S_DEPLOYMENT must be set")
	}
	if cfg.APIKey == "" {
		return nil, errors.New("kubernetes actuator: WSGATE_API_KEY must be set: a scale-in drains the pod's gateway through its server API first")
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.TokenFile == "" {
		cfg.TokenFile = ServiceAccountDir + "/token"
	}
	if cfg.CAFile == "" {
		cfg.CAFile = ServiceAccountDir + "/ca.crt"
	}
	if cfg.NamespaceFile == "" {
		cfg.NamespaceFile = ServiceAccountDir + "/namespace"
	}
	if cfg.ReadyWait <= 0 {
		cfg.ReadyWait = 30 * time.Second
	}
	if cfg.HTTP == nil {
		cfg.HTTP = newHTTPClient()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	k := &Kubernetes{cfg: cfg}
	inCluster := cfg.APIURL == ""
	if inCluster {
		host, port := cfg.Getenv("KUBERNETES_SERVICE_HOST"), cfg.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("kubernetes actuator: not in a pod (KUBERNETES_SERVICE_HOST/PORT unset); set WSGATE_K8S_API_URL")
		}
		k.base = "https://" + net.JoinHostPort(host, port)
		if _, err := os.Stat(cfg.TokenFile); err != nil {
			return nil, fmt.Errorf("kubernetes actuator: service account token: %w", err)
		}
	} else {
		u, err := url.Parse(cfg.APIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("kubernetes actuator: WSGATE_K8S_API_URL %q is not an http(s) URL", cfg.APIURL)
		}
		k.base = strings.TrimSuffix(cfg.APIURL, "/")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if pem, err := os.ReadFile(cfg.CAFile); err == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kubernetes actuator: %s holds no PEM certificate", cfg.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	} else if inCluster {
		return nil, fmt.Errorf("kubernetes actuator: service account CA: %w", err)
	}
	k.client = &http.Client{Transport: tr, Timeout: 15 * time.Second}
	if k.cfg.Namespace == "" {
		b, err := os.ReadFile(cfg.NamespaceFile)
		if err != nil || strings.TrimSpace(string(b)) == "" {
			return nil, errors.New("kubernetes actuator: WSGATE_K8S_NAMESPACE must be set outside a pod (no service account namespace file)")
		}
		k.cfg.Namespace = strings.TrimSpace(string(b))
	}
	return k, nil
}

// Name implements Actuator.
func (k *Kubernetes) Name() string { return "kubernetes" }

// Close implements Actuator.
func (k *Kubernetes) Close(context.Context) error { return nil }

// Scale is the autoscaling/v1 Scale object of the scale subresource.
// Metadata is kept whole so that a PUT sends back the resourceVersion
// (optimistic concurrency: a concurrent change makes the PUT fail with 409).
type Scale struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       ScaleSpec      `json:"spec"`
	Status     ScaleStatus    `json:"status"`
}

// ScaleSpec is the wanted replica count.
type ScaleSpec struct {
	Replicas int32 `json:"replicas"`
}

// ScaleStatus is the observed replica count.
type ScaleStatus struct {
	Replicas int32  `json:"replicas"`
	Selector string `json:"selector,omitempty"`
}

// ScaleOut raises the replicas to desired; it never lowers them (pods
// still starting are counted by the Deployment, not yet by the cluster).
func (k *Kubernetes) ScaleOut(ctx context.Context, desired int, _ []cluster.NodeInfo) error {
	return k.updateScale(ctx, func(cur int32) (int32, error) {
		if cur >= int32(desired) {
			k.cfg.Logger.Info("kubernetes actuator: replicas already at or above the desired count", "replicas", cur, "desired", desired)
			return cur, nil
		}
		return int32(desired), nil
	})
}

// ScaleIn drains node, marks its pod for deletion, waits for it to turn
// NotReady, and lowers the replicas to min(replicas-1, desired).
func (k *Kubernetes) ScaleIn(ctx context.Context, node cluster.NodeInfo, desired int) error {
	if err := drainNode(ctx, k.cfg.HTTP, node, k.cfg.APIKey); err != nil {
		return fmt.Errorf("kubernetes actuator: %w", err)
	}
	log := k.cfg.Logger.With("node", node.ID, "pod", node.ID)
	log.Info("kubernetes actuator: node asked to drain")
	if err := k.markPod(ctx, node.ID); err != nil {
		log.Warn("kubernetes actuator: could not set the pod's deletion cost (is the node id the pod name? RBAC pods patch?)", "err", err.Error())
	}
	if err := k.waitNotReady(ctx, node.ID); err != nil {
		log.Warn("kubernetes actuator: pod readiness not confirmed; lowering the replicas anyway", "err", err.Error())
	}
	return k.updateScale(ctx, func(cur int32) (int32, error) {
		next := min(cur-1, int32(desired))
		if next < 1 {
			return cur, fmt.Errorf("the deployment has %d replicas: will not lower them to %d", cur, next)
		}
		return next, nil
	})
}

func (k *Kubernetes) scalePath() string {
	return "/apis/apps/v1/namespaces/" + url.PathEscape(k.cfg.Namespace) + "/deployments/" + url.PathEscape(k.cfg.Deployment) + "/scale"
}

func (k *Kubernetes) podPath(pod string) string {
	return "/api/v1/namespaces/" + url.PathEscape(k.cfg.Namespace) + "/pods/" + url.PathEscape(pod)
}

// updateScale reads the Scale, asks next for the new replica count (the
// same count: nothing to do) and writes it back, retrying a conflict (409)
// with a fresh read.
func (k *Kubernetes) updateScale(ctx context.Context, next func(cur int32) (int32, error)) error {
	var lastErr error
	for range 3 {
		var s Scale
		if err := k.do(ctx, http.MethodGet, k.scalePath(), "", nil, &s); err != nil {
			return fmt.Errorf("kubernetes actuator: read the scale of deployment %s/%s: %w", k.cfg.Namespace, k.cfg.Deployment, err)
		}
		from := s.Spec.Replicas
		n, err := next(from)
		if err != nil {
			return fmt.Errorf("kubernetes actuator: deployment %s/%s: %w", k.cfg.Namespace, k.cfg.Deployment, err)
		}
		if n == from {
			return nil
		}
		put := Scale{APIVersion: "autoscaling/v1", Kind: "Scale", Metadata: s.Metadata, Spec: ScaleSpec{Replicas: n}}
		var got Scale
		err = k.do(ctx, http.MethodPut, k.scalePath(), "application/json", put, &got)
		var se *statusError
		if errors.As(err, &se) && se.code == http.StatusConflict {
			lastErr = err
			continue
		}
		if err != nil {
			return fmt.Errorf("kubernetes actuator: set the replicas of deployment %s/%s to %d: %w", k.cfg.Namespace, k.cfg.Deployment, n, err)
		}
		k.cfg.Logger.Info("kubernetes actuator: replicas set", "deployment", k.cfg.Deployment, "namespace", k.cfg.Namespace,
			"from", from, "to", got.Spec.Replicas)
		return nil
	}
	return fmt.Errorf("kubernetes actuator: deployment %s/%s kept changing: %w", k.cfg.Namespace, k.cfg.Deployment, lastErr)
}

// markPod sets the pod's deletion cost very low.
func (k *Kubernetes) markPod(ctx context.Context, pod string) error {
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{DeletionCostAnnotation: "-1000000"}}}
	return k.do(ctx, http.MethodPatch, k.podPath(pod), "application/merge-patch+json", patch, nil)
}

// waitNotReady polls the pod until its Ready condition is not True (or
// it is gone), at most ReadyWait.
func (k *Kubernetes) waitNotReady(ctx context.Context, pod string) error {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.ReadyWait)
	defer cancel()
	for {
		var p struct {
			Status struct {
				Conditions []struct {
					Type   string `json:"type"`
					Status string `json:"status"`
				} `json:"conditions"`
			} `json:"status"`
		}
		err := k.do(ctx, http.MethodGet, k.podPath(pod), "", nil, &p)
		var se *statusError
		switch {
		case errors.As(err, &se) && se.code == http.StatusNotFound:
			return nil
		case errors.As(err, &se) && (se.code == http.StatusForbidden || se.code == http.StatusUnauthorized):
			return err // no permission: do not wait
		case err == nil:
			ready := false
			for _, c := range p.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" {
					ready = true
				}
			}
			if !ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("pod still Ready")
			}
			return fmt.Errorf("after %s: %w", k.cfg.ReadyWait, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.code, http.StatusText(e.code), e.msg)
}

// do makes one API call with the service account token.
func (k *Kubernetes) do(ctx context.Context, method, path, contentType string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	// The token is read for every call: the kubelet rotates it.
	if tok, err := os.ReadFile(k.cfg.TokenFile); err == nil {
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		// The API server answers errors as a Status object.
		var st struct {
			Message string `json:"message"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		return &statusError{code: resp.StatusCode, msg: msg}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: bad answer: %w", method, path, err)
		}
	}
	return nil
}

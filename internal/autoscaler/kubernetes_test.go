package autoscaler_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/autoscaler"
	"github.com/wsgate/wsgate/internal/cluster"
)

// fakeK8s is an API server that speaks the JSON of the scale subresource
// (autoscaling/v1 Scale) and of pods, and records every call in order.
type fakeK8s struct {
	t *testing.T

	mu              sync.Mutex
	replicas        int32
	resourceVersion int
	conflicts       int             // PUTs to refuse with 409 (a concurrent change)
	notReady        map[string]bool // pods whose readiness failed
	drained         map[string]bool // set by the fake gateway
	events          []string
	puts            []map[string]any // bodies of the PUTs, decoded
}

func (f *fakeK8s) event(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf(format, a...))
}

func (f *fakeK8s) takeEvents() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.events
	f.events = nil
	return e
}

func (f *fakeK8s) scaleJSON() map[string]any {
	return map[string]any{
		"kind":       "Scale",
		"apiVersion": "autoscaling/v1",
		"metadata": map[string]any{
			"name":              "wsgate",
			"namespace":         "chat",
			"uid":               "5b2f8d4e-1c1a-4f57-9f7e-2b8a9a0c3d11",
			"resourceVersion":   fmt.Sprint(f.resourceVersion),
			"creationTimestamp": "2026-04-30T10:00:00Z",
		},
		"spec":   map[string]any{"replicas": f.replicas},
		"status": map[string]any{"replicas": f.replicas, "selector": "app.kubernetes.io/name=wsgate"},
	}
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": msg, "reason": reason, "code": code})
}

func (f *fakeK8s) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer sa-token-1" {
		status(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	const scalePath = "/apis/apps/v1/namespaces/chat/deployments/wsgate/scale"
	const podPrefix = "/api/v1/namespaces/chat/pods/"
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == scalePath && r.Method == http.MethodGet:
		f.mu.Lock()
		b, _ := json.Marshal(f.scaleJSON())
		f.events = append(f.events, fmt.Sprintf("get scale (replicas %d)", f.replicas))
		f.mu.Unlock()
		w.Write(b)
	case r.URL.Path == scalePath && r.Method == http.MethodPut:
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			status(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType", "content type "+ct)
			return
		}
		var body struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name            string `json:"name"`
				Namespace       string `json:"namespace"`
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Spec struct {
				Replicas *int32 `json:"replicas"`
			} `json:"spec"`
		}
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil || body.Spec.Replicas == nil {
			status(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("bad Scale: %v %s", err, raw))
			return
		}
		var generic map[string]any
		json.Unmarshal(raw, &generic)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.puts = append(f.puts, generic)
		if body.APIVersion != "autoscaling/v1" || body.Kind != "Scale" || body.Metadata.Name != "wsgate" || body.Metadata.Namespace != "chat" {
			status(w, http.StatusBadRequest, "BadRequest", "not a Scale of chat/wsgate: "+string(raw))
			return
		}
		if body.Metadata.ResourceVersion != fmt.Sprint(f.resourceVersion) {
			status(w, http.StatusConflict, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
			return
		}
		if f.conflicts > 0 {
			f.conflicts--
			f.resourceVersion++ // someone else changed the Deployment meanwhile
			f.events = append(f.events, "put scale refused: conflict")
			status(w, http.StatusConflict, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
			return
		}
		f.replicas = *body.Spec.Replicas
		f.resourceVersion++
		f.events = append(f.events, fmt.Sprintf("put scale %d", f.replicas))
		b, _ := json.Marshal(f.scaleJSON())
		w.Write(b)
	case strings.HasPrefix(r.URL.Path, podPrefix) && r.Method == http.MethodPatch:
		pod := strings.TrimPrefix(r.URL.Path, podPrefix)
		raw, _ := io.ReadAll(r.Body)
		var patch struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if r.Header.Get("Content-Type") != "application/merge-patch+json" || json.Unmarshal(raw, &patch) != nil ||
			patch.Metadata.Annotations[autoscaler.DeletionCostAnnotation] == "" {
			status(w, http.StatusBadRequest, "BadRequest", "bad patch "+string(raw))
			return
		}
		f.event("patch pod %s deletion-cost %s", pod, patch.Metadata.Annotations[autoscaler.DeletionCostAnnotation])
		fmt.Fprintf(w, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":"chat"}}`, pod)
	case strings.HasPrefix(r.URL.Path, podPrefix) && r.Method == http.MethodGet:
		pod := strings.TrimPrefix(r.URL.Path, podPrefix)
		f.mu.Lock()
		// The kubelet's readiness probe notices the drain at the second look.
		ready := "True"
		if f.drained[pod] {
			if f.notReady[pod] {
				ready = "False"
			}
			f.notReady[pod] = true
		}
		f.events = append(f.events, fmt.Sprintf("get pod %s (ready %s)", pod, ready))
		f.mu.Unlock()
		fmt.Fprintf(w, `{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":"chat"},"status":{"phase":"Running",`+
			`"conditions":[{"type":"Initialized","status":"True"},{"type":"Ready","status":%q},{"type":"ContainersReady","status":%q}]}}`, pod, ready, ready)
	default:
		status(w, http.StatusNotFound, "NotFound", r.Method+" "+r.URL.Path)
	}
}

func TestKubernetesActuator(t *testing.T) {
	f := &fakeK8s{t: t, replicas: 3, resourceVersion: 100, notReady: map[string]bool{}, drained: map[string]bool{}}
	api := httptest.NewTLSServer(f)
	defer api.Close()
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer gw-key" || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if !strings.HasPrefix(r.URL.Path, "/api/v1/nodes/") || !strings.HasSuffix(r.URL.Path, "/drain") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/api/v1/nodes/"), "/drain")
		f.mu.Lock()
		f.drained[id] = true
		f.events = append(f.events, "drain "+id)
		f.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"node":%q,"status":"draining"}`, id)
	}))
	defer gw.Close()

	// The service account files, as mounted in a pod.
	sa := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(sa, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokenFile := write("token", "sa-token-1\n")
	caFile := write("ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})))
	nsFile := write("namespace", "chat")
	u, _ := url.Parse(api.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	env := map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}

	k, err := autoscaler.NewKubernetes(autoscaler.KubernetesConfig{
		Deployment: "wsgate", APIKey: "gw-key", TokenFile: tokenFile, CAFile: caFile, NamespaceFile: nsFile,
		Getenv: func(k string) string { return env[k] }, ReadyWait: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Scale out 3 -> 5, with one conflicting concurrent change on the way.
	f.conflicts = 1
	if err := k.ScaleOut(ctx, 5, nil); err != nil {
		t.Fatal(err)
	}
	if ev := f.takeEvents(); strings.Join(ev, "; ") != "get scale (replicas 3); put scale refused: conflict; get scale (replicas 3); put scale 5" {
		t.Fatalf("scale-out calls: %q", ev)
	}
	last := f.puts[len(f.puts)-1]
	meta := last["metadata"].(map[string]any)
	if last["apiVersion"] != "autoscaling/v1" || last["kind"] != "Scale" || meta["resourceVersion"] != "101" ||
		meta["uid"] != "5b2f8d4e-1c1a-4f57-9f7e-2b8a9a0c3d11" || last["spec"].(map[string]any)["replicas"] != float64(5) {
		t.Fatalf("PUT body: %v", last)
	}

	// A scale-out never lowers the replicas (pods still starting).
	if err := k.ScaleOut(ctx, 4, nil); err != nil {
		t.Fatal(err)
	}
	if ev := f.takeEvents(); len(ev) != 1 || ev[0] != "get scale (replicas 5)" {
		t.Fatalf("a scale-out to fewer replicas changed something: %q", ev)
	}

	// Scale in: drain the pod's gateway, mark the pod, wait for NotReady, then lower the replicas.
	node := cluster.NodeInfo{ID: "wsgate-7d9f-abcde", APIURL: gw.URL, Status: cluster.StatusActive}
	if err := k.ScaleIn(ctx, node, 4); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"drain wsgate-7d9f-abcde",
		"patch pod wsgate-7d9f-abcde deletion-cost -1000000",
		"get pod wsgate-7d9f-abcde (ready True)",
		"get pod wsgate-7d9f-abcde (ready False)",
		"get scale (replicas 5)",
		"put scale 4",
	}
	if ev := f.takeEvents(); strings.Join(ev, "\n") != strings.Join(want, "\n") {
		t.Fatalf("scale-in calls:\n%s\nwant:\n%s", strings.Join(ev, "\n"), strings.Join(want, "\n"))
	}
	// Lower by one even if the policy's count is lower (pods it does not see).
	node.ID = "wsgate-7d9f-fghij"
	if err := k.ScaleIn(ctx, node, 1); err != nil {
		t.Fatal(err)
	}
	if f.replicas != 1 {
		t.Fatalf("replicas %d, want min(4-1, 1) = 1", f.replicas)
	}
	f.takeEvents()
	// Never to zero.
	if err := k.ScaleIn(ctx, node, 1); err == nil || !strings.Contains(err.Error(), "will not lower") {
		t.Fatalf("scale-in of the last replica: %v", err)
	}
	if f.replicas != 1 {
		t.Fatalf("replicas %d after a refused scale-in", f.replicas)
	}

	// A drain the gateway refuses stops the scale-in before the replicas change.
	f.takeEvents()
	bad := cluster.NodeInfo{ID: "x", APIURL: gw.URL + "/nope"}
	f.replicas = 3
	if err := k.ScaleIn(ctx, bad, 2); err == nil {
		t.Fatal("a refused drain was not an error")
	}
	for _, e := range f.takeEvents() {
		if strings.HasPrefix(e, "put scale") || strings.HasPrefix(e, "get scale") {
			t.Fatalf("replicas touched after a failed drain: %s", e)
		}
	}
}

func TestKubernetesActuatorConfig(t *testing.T) {
	none := func(string) string { return "" }
	tests := []struct {
		cfg autoscaler.KubernetesConfig
		err string
	}{
		{autoscaler.KubernetesConfig{APIKey: "k", Getenv: none}, "WSGATE_K8S_DEPLOYMENT"},
		{autoscaler.KubernetesConfig{Deployment: "d", Getenv: none}, "WSGATE_API_KEY must be set"},
		{autoscaler.KubernetesConfig{Deployment: "d", APIKey: "k", Getenv: none}, "not in a pod"},
		{autoscaler.KubernetesConfig{Deployment: "d", APIKey: "k", APIURL: "http://127.0.0.1:1", Getenv: none,
			TokenFile: "/nonexistent", CAFile: "/nonexistent", NamespaceFile: "/nonexistent"}, "WSGATE_K8S_NAMESPACE must be set"},
		{autoscaler.KubernetesConfig{Deployment: "d", APIKey: "k", APIURL: "ftp://x", Getenv: none}, "not an http(s) URL"},
	}
	for _, tt := range tests {
		_, err := autoscaler.NewKubernetes(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%+v: got %v, want %q", tt.cfg, err, tt.err)
		}
	}
	// Outside a pod, with --k8s-api-url and --k8s-namespace: no token, no CA needed.
	k, err := autoscaler.NewKubernetes(autoscaler.KubernetesConfig{Deployment: "d", APIKey: "k", APIURL: "http://127.0.0.1:1",
		Namespace: "n", Getenv: none, TokenFile: "/nonexistent", CAFile: "/nonexistent"})
	if err != nil || k.Name() != "kubernetes" {
		t.Fatalf("%v %v", k, err)
	}
}

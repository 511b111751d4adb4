// Package deploy_test checks the deployment files of deploy/: every
// Kubernetes manifest, the Prometheus rules and the Grafana dashboard parse,
// hold together (drain timeouts, probes, RBAC, settings that exist), and
// reference only metrics that a running wsgate exports (metrics_test.go).
package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wsgate/wsgate/internal/config"
)

// doc is one YAML document with its file.
type doc struct {
	file string
	v    map[string]any
}

// yamlDocs parses every document of every .yaml/.yml file under dir.
func yamlDocs(t *testing.T, dir string) []doc {
	t.Helper()
	var out []doc
	files, _ := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	if len(files) == 0 {
		t.Fatalf("no YAML files in %s", dir)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var v map[string]any
			err := dec.Decode(&v)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			if v != nil {
				out = append(out, doc{file: filepath.Base(f), v: v})
			}
		}
	}
	return out
}

// get walks a path of map keys and list indexes ("spec", "template", 0).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any) string {
	if v == nil {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func list(v any) []any { l, _ := v.([]any); return l }

// k8s is the Kubernetes objects of deploy/kubernetes, by "Kind/name".
func k8s(t *testing.T) map[string]doc {
	t.Helper()
	objs := map[string]doc{}
	for _, d := range yamlDocs(t, "kubernetes") {
		kind, api := str(d.v["kind"]), str(d.v["apiVersion"])
		if kind == "" {
			continue // prometheus-adapter.yaml: Helm values, not an object
		}
		name := str(get(d.v, "metadata", "name"))
		if api == "" || (name == "" && kind != "Kustomization") {
			t.Errorf("%s: %s without apiVersion or metadata.name", d.file, kind)
		}
		if kind != "Kustomization" && kind != "Namespace" && str(get(d.v, "metadata", "namespace")) != "wsgate" {
			t.Errorf("%s: %s/%s not in namespace wsgate", d.file, kind, name)
		}
		key := kind + "/" + name
		if _, dup := objs[key]; dup {
			t.Errorf("%s: %s defined twice", d.file, key)
		}
		objs[key] = d
	}
	return objs
}

func mustObj(t *testing.T, objs map[string]doc, key string) map[string]any {
	t.Helper()
	d, ok := objs[key]
	if !ok {
		t.Fatalf("deploy/kubernetes has no %s", key)
	}
	return d.v
}

// container returns the first container of a Deployment.
func container(dep map[string]any) map[string]any {
	c, _ := get(dep, "spec", "template", "spec", "containers", 0).(map[string]any)
	return c
}

// envOf returns a container's explicit env entries by name (value or
// "valueFrom").
func envOf(c map[string]any) map[string]string {
	out := map[string]string{}
	for _, e := range list(c["env"]) {
		name := str(get(e, "name"))
		if get(e, "valueFrom") != nil {
			out[name] = "valueFrom:" + str(get(e, "valueFrom"))
		} else {
			out[name] = str(get(e, "value"))
		}
	}
	return out
}

func settingsOf(s *config.Set) map[string]bool {
	out := map[string]bool{}
	for _, st := range s.Settings() {
		out[st.Env()] = true
	}
	return out
}

func TestKubernetesManifests(t *testing.T) {
	objs := k8s(t)
	gatewaySettings := settingsOf(config.NewGatewaySet(new(config.Gateway)))
	allocatorSettings := settingsOf(config.NewAllocatorSet(new(config.Allocator)))
	autoscalerSettings := settingsOf(config.NewAutoscalerSet(new(config.Autoscaler)))

	// Shared settings: each key is a setting of some subcommand.
	cm := mustObj(t, objs, "ConfigMap/wsgate-config")
	secret := mustObj(t, objs, "Secret/wsgate-secrets")
	shared := map[string]string{}
	for _, m := range []any{cm["data"], secret["stringData"]} {
		for k, v := range m.(map[string]any) {
			shared[k] = str(v)
			if strings.HasPrefix(k, "WSGATE_") && !gatewaySettings[k] && !allocatorSettings[k] && !autoscalerSettings[k] {
				t.Errorf("ConfigMap/Secret key %s is no wsgate setting", k)
			}
		}
	}
	for _, k := range []string{"WSGATE_REDIS_URL", "WSGATE_API_KEY", "WSGATE_JWT_SECRET"} {
		if _, ok := secret["stringData"].(map[string]any)[k]; !ok {
			t.Errorf("Secret wsgate-secrets lacks %s", k)
		}
	}

	// Every Deployment: explicit WSGATE_ env entries are settings of its subcommand.
	for key, d := range objs {
		if !strings.HasPrefix(key, "Deployment/") {
			continue
		}
		c := container(d.v)
		args := list(c["args"])
		if len(args) == 0 {
			t.Errorf("%s: no args (the subcommand)", key)
			continue
		}
		known := map[string]map[string]bool{"gateway": gatewaySettings, "allocator": allocatorSettings, "autoscaler": autoscalerSettings}[str(args[0])]
		if known == nil {
			t.Errorf("%s: unknown subcommand %v", key, args[0])
			continue
		}
		for name := range envOf(c) {
			if strings.HasPrefix(name, "WSGATE_") && !known[name] {
				t.Errorf("%s: env %s is no setting of wsgate %s", key, name, args[0])
			}
		}
		if get(c, "securityContext", "runAsNonRoot") != true || get(c, "securityContext", "allowPrivilegeEscalation") != false {
			t.Errorf("%s: container securityContext must run as non-root without privilege escalation", key)
		}
		if get(c, "resources", "requests") == nil || get(c, "resources", "limits") == nil {
			t.Errorf("%s: resource requests and limits required", key)
		}
		if get(c, "readinessProbe", "httpGet", "path") != "/readyz" || get(c, "livenessProbe", "httpGet", "path") != "/healthz" {
			t.Errorf("%s: readiness must probe /readyz and liveness /healthz", key)
		}
	}

	// The gateway: drain fits in the grace period, node id = pod name.
	gw := mustObj(t, objs, "Deployment/wsgate")
	if get(gw, "spec", "replicas") != nil {
		t.Error("Deployment/wsgate sets replicas: kubectl apply would reset what the autoscaler chose")
	}
	c := container(gw)
	drain, err := time.ParseDuration(shared["WSGATE_DRAIN_TIMEOUT"])
	if err != nil {
		t.Fatalf("WSGATE_DRAIN_TIMEOUT in the ConfigMap: %v", err)
	}
	preStop := time.Duration(toInt(get(c, "lifecycle", "preStop", "sleep", "seconds"))) * time.Second
	if preStop < 5*time.Second {
		t.Errorf("preStop sleep %s: the load balancer needs a few seconds to notice", preStop)
	}
	grace := time.Duration(toInt(get(gw, "spec", "template", "spec", "terminationGracePeriodSeconds"))) * time.Second
	if grace <= preStop+drain+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %s must exceed preStop %s + WSGATE_DRAIN_TIMEOUT %s + 10s", grace, preStop, drain)
	}
	env := envOf(c)
	if !strings.Contains(env["WSGATE_NODE_ID"], "metadata.name") {
		t.Errorf("WSGATE_NODE_ID must be the pod name (the kubernetes actuator drains pods by node id), got %q", env["WSGATE_NODE_ID"])
	}
	if env["WSGATE_ADVERTISE_URL"] == "" {
		t.Error("WSGATE_ADVERTISE_URL must be set (redirects and allocations point there)")
	}
	if get(gw, "spec", "strategy", "rollingUpdate", "maxUnavailable") != 0 {
		t.Error("rolling updates must keep every old pod until its replacement is ready (maxUnavailable 0)")
	}

	svc := mustObj(t, objs, "Service/wsgate")
	if get(svc, "spec", "externalTrafficPolicy") != "Local" {
		t.Error("Service/wsgate: externalTrafficPolicy must be Local")
	}

	// The admin plane apart (contract §1, §2 v2): its own port, only on a
	// ClusterIP Service; the LoadBalancer carries the public port only.
	ports := map[string]int{}
	for _, p := range list(c["ports"]) {
		ports[str(get(p, "name"))] = toInt(get(p, "containerPort"))
	}
	if env["WSGATE_ADMIN_LISTEN"] != fmt.Sprintf(":%d", ports["admin"]) || ports["admin"] == 0 || ports["admin"] == ports["http"] {
		t.Errorf("WSGATE_ADMIN_LISTEN %q must be the container port named admin (ports %v)", env["WSGATE_ADMIN_LISTEN"], ports)
	}
	for _, p := range list(get(svc, "spec", "ports")) {
		if tp := get(p, "targetPort"); tp != "http" && toInt(tp) != ports["http"] {
			t.Errorf("Service/wsgate (public) exposes port %v: only the public port (http) may be there", tp)
		}
	}
	for key, d := range objs {
		if !strings.HasPrefix(key, "Service/") || key == "Service/wsgate" {
			continue
		}
		for _, p := range list(get(d.v, "spec", "ports")) {
			if tp := get(p, "targetPort"); (tp == "admin" || toInt(tp) == ports["admin"]) && get(d.v, "spec", "type") != "ClusterIP" {
				t.Errorf("%s exposes the admin port with type %v: ClusterIP only", key, get(d.v, "spec", "type"))
			}
		}
	}
	apiSvc := mustObj(t, objs, "Service/wsgate-api")
	if get(apiSvc, "spec", "type") != "ClusterIP" || get(list(get(apiSvc, "spec", "ports"))[0], "targetPort") != "admin" {
		t.Errorf("Service/wsgate-api must be ClusterIP on the admin port: %v", get(apiSvc, "spec"))
	}
	if a := str(get(gw, "spec", "template", "metadata", "annotations", "prometheus.io/port")); a != fmt.Sprint(ports["admin"]) {
		t.Errorf("prometheus.io/port %q: /metrics is on the admin port %d", a, ports["admin"])
	}
	// Secrets come from the Secret (env), never from args.
	for _, a := range list(c["args"]) {
		if s := str(a); strings.Contains(s, "secret") || strings.Contains(s, "key") {
			t.Errorf("gateway args carry a secret setting: %q", s)
		}
	}
	if get(mustObj(t, objs, "PodDisruptionBudget/wsgate"), "spec", "maxUnavailable") != 1 {
		t.Error("PodDisruptionBudget/wsgate: maxUnavailable 1")
	}

	// The autoscaler: kubernetes actuator on this Deployment, with RBAC on its scale subresource.
	as := mustObj(t, objs, "Deployment/wsgate-autoscaler")
	ac := container(as)
	aenv := envOf(ac)
	if aenv["WSGATE_ACTUATOR"] != "kubernetes" || aenv["WSGATE_K8S_DEPLOYMENT"] != "wsgate" {
		t.Errorf("autoscaler env: actuator %q deployment %q", aenv["WSGATE_ACTUATOR"], aenv["WSGATE_K8S_DEPLOYMENT"])
	}
	if toInt(get(as, "spec", "replicas")) != 1 {
		t.Error("exactly one autoscaler replica")
	}
	var asCfg config.Autoscaler
	lookup := func(k string) (string, bool) {
		if v, ok := aenv[k]; ok {
			return v, true
		}
		v, ok := shared[k]
		return v, ok
	}
	if err := config.NewAutoscalerSet(&asCfg).Load(nil, lookup); err != nil {
		t.Fatalf("autoscaler settings: %v", err)
	}
	if err := asCfg.Validate(); err != nil {
		t.Errorf("the autoscaler's settings do not validate: %v", err)
	}
	var gwCfg config.Gateway
	if err := config.NewGatewaySet(&gwCfg).Load(nil, func(k string) (string, bool) { v, ok := shared[k]; return v, ok }); err != nil {
		t.Fatalf("gateway settings: %v", err)
	}
	gwCfg.NodeID = "wsgate-0"
	gwCfg.AdvertiseURL = "ws://10.0.0.1:8080/ws"
	if err := gwCfg.Validate(); err != nil {
		t.Errorf("the gateways' settings do not validate: %v", err)
	}
	// The placeholders cannot start a gateway (contract §1 v1.1).
	if err := gwCfg.CheckSecrets(); err == nil || !strings.Contains(err.Error(), "CHANGE-ME") {
		t.Errorf("the Secret's CHANGE-ME placeholders must be refused at start, got %v", err)
	}
	sa := str(get(as, "spec", "template", "spec", "serviceAccountName"))
	mustObj(t, objs, "ServiceAccount/"+sa)
	role := mustObj(t, objs, "Role/wsgate-autoscaler")
	verbs := map[string]bool{}
	for _, r := range list(role["rules"]) {
		for _, res := range list(get(r, "resources")) {
			if res == "deployments/scale" {
				for _, v := range list(get(r, "verbs")) {
					verbs[str(v)] = true
				}
			}
		}
	}
	for _, v := range []string{"get", "update", "patch"} {
		if !verbs[v] {
			t.Errorf("Role wsgate-autoscaler: no %q on deployments/scale", v)
		}
	}
	rb := mustObj(t, objs, "RoleBinding/wsgate-autoscaler")
	if str(get(rb, "roleRef", "name")) != "wsgate-autoscaler" || str(get(rb, "subjects", 0, "name")) != sa {
		t.Errorf("RoleBinding does not bind the Role to the autoscaler's ServiceAccount %q", sa)
	}

	// The HPA alternative scales the gateway Deployment on the pods metric wsgate_connections.
	hpa := mustObj(t, objs, "HorizontalPodAutoscaler/wsgate")
	if str(get(hpa, "spec", "scaleTargetRef", "name")) != "wsgate" || str(get(hpa, "spec", "metrics", 0, "type")) != "Pods" ||
		str(get(hpa, "spec", "metrics", 0, "pods", "metric", "name")) != "wsgate_connections" {
		t.Errorf("HPA: want the Pods metric wsgate_connections on Deployment wsgate: %v", get(hpa, "spec"))
	}

	// kustomization.yaml lists files that exist, and never both scalers.
	kz := mustObj(t, objs, "Kustomization/")
	hasAS, hasHPA := false, false
	for _, r := range list(kz["resources"]) {
		if _, err := os.Stat(filepath.Join("kubernetes", str(r))); err != nil {
			t.Errorf("kustomization.yaml: %v", err)
		}
		hasAS = hasAS || r == "autoscaler.yaml"
		hasHPA = hasHPA || r == "hpa.yaml"
	}
	if hasAS == hasHPA {
		t.Errorf("kustomization.yaml must enable exactly one of autoscaler.yaml and hpa.yaml")
	}
}

func toInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case float64:
		return int(x)
	case string:
		n, _ := strconv.Atoi(x)
		return n
	}
	return -1
}

// rule is one alerting rule of alerts.yml.
type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

func TestAlertRules(t *testing.T) {
	rules := loadRules(t)
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rules {
		if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
			t.Errorf("rule without alert name or expr: %+v", r)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("alert %s twice", r.Alert)
		}
		seen[r.Alert] = true
		if r.For != "" {
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
		}
		if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["runbook"] == "" {
			t.Errorf("%s: needs labels.severity and annotations summary and runbook", r.Alert)
		}
		if err := balanced(r.Expr); err != nil {
			t.Errorf("%s: %v", r.Alert, err)
		}
		// Every alert has its section in docs/operations.md.
		if !bytes.Contains(ops, []byte("### "+r.Alert+"\n")) {
			t.Errorf("docs/operations.md has no section \"### %s\"", r.Alert)
		}
		if want := "docs/operations.md#" + strings.ToLower(r.Alert); r.Annotations["runbook"] != want {
			t.Errorf("%s: runbook %q, want %q", r.Alert, r.Annotations["runbook"], want)
		}
	}
	for _, a := range []string{"WsgateNodeDown", "WsgateNodeNotReady", "WsgateBackendUnreachable", "WsgateBackendErrors",
		"WsgateHighDropRate", "WsgateDeliveryLatencyHigh", "WsgateConnectionsNearCapacity", "WsgateFileDescriptorsHigh", "WsgateDrainStuck"} {
		if !seen[a] {
			t.Errorf("alerts.yml lacks %s", a)
		}
	}
}

// dashboard returns the dashboard's PromQL expressions and its template
// variable queries.
func dashboard(t *testing.T) (exprs, varQueries []string) {
	t.Helper()
	b, err := os.ReadFile("grafana/wsgate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
			GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("wsgate-dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatal("dashboard without title, uid or panels")
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q overflows the grid", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if err := balanced(tg.Expr); err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			varQueries = append(varQueries, str(q["query"]))
		}
	}
	// What the brief asks the dashboard to show.
	all := strings.Join(exprs, "\n")
	for _, m := range []string{"wsgate_connections", "wsgate_messages_published_total", "wsgate_messages_delivered_total",
		"wsgate_messages_dropped_total", "wsgate_delivery_latency_seconds_bucket", "wsgate_backend_latency_seconds_bucket",
		"wsgate_backend_errors_total", "wsgate_drain_remaining", "wsgate_node_status", "go_goroutines", "go_gc_duration_seconds"} {
		if !strings.Contains(all, m) {
			t.Errorf("the dashboard shows nothing of %s", m)
		}
	}
	return exprs, varQueries
}

func TestDashboard(t *testing.T) { dashboard(t) }

// balanced checks brackets and quotes of a PromQL expression.
func balanced(expr string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inStr := rune(0)
	for _, r := range expr {
		switch {
		case inStr != 0:
			if r == inStr {
				inStr = 0
			}
		case r == '"' || r == '\'' || r == '`':
			inStr = r
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case r == ')' || r == ']' || r == '}':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return errors.New("unbalanced " + string(r) + " in " + expr)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 || inStr != 0 {
		return errors.New("unclosed bracket or quote in " + expr)
	}
	return nil
}

var (
	promStrings   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers  = regexp.MustCompile(`\{[^{}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\[\]]*\]`)
	promLabelList = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords  = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true, "atan2": true}
)

// metricNames returns the metric names a PromQL expression selects: the
// identifiers left after removing strings, label matchers, ranges, label
// lists of by/on/..., function and aggregation names (an identifier
// followed by "(") and keywords.
func metricNames(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promLabelList.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		if loc[0] > 0 && (e[loc[0]-1] == '$' || (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9') || e[loc[0]-1] == '.') {
			continue // a Grafana variable, or the exponent of a number (1e9)
		}
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || promKeywords[strings.ToLower(name)] {
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestMetricNamesParser(t *testing.T) {
	tests := map[string][]string{
		`up{job="wsgate"} == 0`: {"up"},
		`sum by (instance, op) (rate(wsgate_backend_errors_total{job="wsgate"}[5m])) > 0.5`:                                                           {"wsgate_backend_errors_total"},
		`histogram_quantile(0.99, sum by (le) (rate(wsgate_delivery_latency_seconds_bucket{job="wsgate", instance=~"$instance"}[$__rate_interval])))`: {"wsgate_delivery_latency_seconds_bucket"},
		`(max by (instance) (wsgate_node_status{status="draining"}) == 1) and on (instance) (max by (instance) (wsgate_drain_remaining) > 0)`:         {"wsgate_node_status", "wsgate_drain_remaining"},
		`process_open_fds / process_max_fds > 0.8`:  {"process_open_fds", "process_max_fds"},
		`process_resident_memory_bytes > 0.9 * 2e9`: {"process_resident_memory_bytes"},
		`sum(x{a="b(c)"}) / clamp_min(sum(y), 1)`:   {"x", "y"},
	}
	for expr, want := range tests {
		got := metricNames(expr)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

// referencedMetrics collects every metric name the deploy files use: the
// PromQL of the rules and the dashboard (and its variables), and every
// wsgate_* word in the YAML and JSON files (HPA metric, adapter rules).
func referencedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	refs := map[string][]string{} // name -> where
	add := func(name, where string) {
		for _, w := range refs[name] {
			if w == where {
				return
			}
		}
		refs[name] = append(refs[name], where)
	}
	for _, r := range loadRules(t) {
		for _, n := range metricNames(r.Expr) {
			add(n, "alerts.yml "+r.Alert)
		}
	}
	exprs, vars := dashboard(t)
	for _, e := range exprs {
		for _, n := range metricNames(e) {
			add(n, "dashboard")
		}
	}
	labelValues := regexp.MustCompile(`label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)`)
	for _, q := range vars {
		for _, m := range labelValues.FindAllStringSubmatch(q, -1) {
			add(m[1], "dashboard variable")
		}
	}
	word := regexp.MustCompile(`\bwsgate_[a-z0-9_]*[a-z0-9]\b`)
	var files []string
	// The Helm chart's sources too: deploy/helmtest checks that what it
	// renders names no metric beyond them and alerts.yml.
	for _, pat := range []string{"kubernetes/*.y*ml", "prometheus/*.y*ml", "grafana/*.json", "helm/wsgate/*.yaml", "helm/wsgate/templates/*"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range word.FindAllString(string(b), -1) {
			add(n, f)
		}
	}
	if len(refs) < 15 {
		t.Fatalf("only %d metric names found: the extraction is broken", len(refs))
	}
	return refs
}

func sortedKeys[V any](m map[string]V) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// The nginx example keeps the admin plane off the public server: the
// public server proxies only the client paths to the gateways' public
// port; the admin listeners are behind an internal server with deny all.
func TestNginxKeepsTheAdminPlaneInternal(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("nginx", "wsgate.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string // without comments
	for l := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l)
		}
	}
	conf := strings.Join(lines, "\n")
	pub := conf[strings.Index(conf, "listen 80;"):strings.Index(conf, "upstream wsgate_admin")]
	if strings.Contains(pub, "wsgate_admin") || strings.Contains(pub, ":9090") || strings.Contains(pub, "/api/") || strings.Contains(pub, "/metrics") {
		t.Errorf("the public server reaches the admin plane:\n%s", pub)
	}
	if !strings.Contains(pub, "location / {\n            return 404;") {
		t.Error("the public server must answer 404 for every path but the client paths")
	}
	adm := conf[strings.Index(conf, "upstream wsgate_admin"):]
	if !strings.Contains(adm, ":9090") || !strings.Contains(adm, "deny all;") {
		t.Errorf("the admin server must proxy to the admin listeners and deny all but the internal network:\n%s", adm)
	}
}

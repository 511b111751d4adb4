package helmtest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/wsgate/wsgate/internal/config"
)

const chartDir = "../helm/wsgate"

// obj is one rendered Kubernetes object.
type obj = map[string]any

// kube131 is the Kubernetes version the chart's value sets are rendered
// for (helm template --kube-version 1.31).
var kube131 = chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}

// render renders the chart with the given values (YAML) as helm template
// --kube-version 1.31 does for a release "wsgate" in namespace "wsgate".
func render(t *testing.T, values string) (map[string]obj, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = kube131
	return renderChart(t, ch, caps, values)
}

// renderChart renders ch for the cluster caps describes, as helm template
// does: the chart's kubeVersion constraint first, then the templates.
func renderChart(t *testing.T, ch *chart.Chart, caps *chartutil.Capabilities, values string) (map[string]obj, error) {
	t.Helper()
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", ch.Metadata.KubeVersion, caps.KubeVersion.Version)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "wsgate", Namespace: "wsgate", Revision: 1, IsInstall: true}, caps)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	objs := map[string]obj{}
	for name, text := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		dec := yaml.NewDecoder(strings.NewReader(text))
		for {
			var o obj
			if err := dec.Decode(&o); err != nil {
				if err.Error() != "EOF" {
					t.Fatalf("%s: %v\n%s", name, err, text)
				}
				break
			}
			if o == nil {
				continue
			}
			key := str(o["kind"]) + "/" + str(get(o, "metadata", "name"))
			if _, dup := objs[key]; dup {
				t.Fatalf("%s rendered twice", key)
			}
			objs[key] = o
		}
	}
	return objs, nil
}

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
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	}
	b, _ := yaml.Marshal(v)
	return strings.TrimSpace(string(b))
}

func list(v any) []any { l, _ := v.([]any); return l }

func toInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case string:
		n, _ := strconv.Atoi(x)
		return n
	}
	return -1
}

func must(t *testing.T, objs map[string]obj, key string) obj {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		keys := make([]string, 0, len(objs))
		for k := range objs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Fatalf("no %s among %v", key, keys)
	}
	return o
}

func container(dep obj) obj {
	c, _ := get(dep, "spec", "template", "spec", "containers", 0).(obj)
	return c
}

// env returns a container's env entries by name; a valueFrom entry is
// its source ("field:metadata.name", "secret:name/key").
func env(c obj) map[string]string {
	out := map[string]string{}
	for _, e := range list(c["env"]) {
		name := str(get(e, "name"))
		switch {
		case get(e, "valueFrom", "fieldRef") != nil:
			out[name] = "field:" + str(get(e, "valueFrom", "fieldRef", "fieldPath"))
		case get(e, "valueFrom", "secretKeyRef") != nil:
			out[name] = "secret:" + str(get(e, "valueFrom", "secretKeyRef", "name")) + "/" + str(get(e, "valueFrom", "secretKeyRef", "key"))
		default:
			out[name] = str(get(e, "value"))
		}
	}
	return out
}

// pending are settings the chart uses before internal/config has them
// (none today); once they are settings there, they are checked like every
// other.
var pending = map[string]bool{}

func settings(s *config.Set) map[string]bool {
	out := map[string]bool{}
	for _, st := range s.Settings() {
		out[st.Env()] = true
	}
	return out
}

var subcommands = map[string]func() *config.Set{
	"gateway":    func() *config.Set { return config.NewGatewaySet(new(config.Gateway)) },
	"allocator":  func() *config.Set { return config.NewAllocatorSet(new(config.Allocator)) },
	"autoscaler": func() *config.Set { return config.NewAutoscalerSet(new(config.Autoscaler)) },
}

// lookup is a container's environment as the kubelet gives it: the
// ConfigMap, then the env entries in order with $(VAR) expanded, field
// and secret references filled with test values, secret files written.
// Where a _FILE form is not a setting of sub yet (pending), the secret
// is given as the value its file form would set.
func lookup(t *testing.T, cm obj, c obj) func(string) (string, bool) {
	known := settings(subcommands[str(get(c, "args", 0))]())
	vals := map[string]string{}
	if cm != nil {
		for k, v := range get(cm, "data").(map[string]any) {
			vals[k] = str(v)
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	dir := t.TempDir()
	for _, e := range list(c["env"]) {
		name := str(get(e, "name"))
		v := str(get(e, "value"))
		switch {
		case get(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name":
			v = "wsgate-0"
		case get(e, "valueFrom", "fieldRef", "fieldPath") == "status.podIP":
			v = "10.0.0.1"
		case get(e, "valueFrom", "secretKeyRef") != nil:
			v = "redis://:pw@redis:6379/0"
			if name == "REDIS_PASSWORD" {
				v = "test-password"
			}
		}
		v = ref.ReplaceAllStringFunc(v, func(m string) string { return vals[m[2:len(m)-1]] })
		if strings.HasSuffix(name, "_FILE") {
			f := filepath.Join(dir, filepath.Base(v))
			os.WriteFile(f, []byte(strings.Repeat("s3cr3t-", 8)+"\n"), 0o600)
			v = f
			if !known[name] {
				vals[strings.TrimSuffix(name, "_FILE")] = strings.Repeat("s3cr3t-", 8)
			}
		}
		vals[name] = v
	}
	return func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
}

// checkCommon checks what every value set must give: each Deployment's
// WSGATE_ env is settings of its subcommand, probes on named ports,
// non-root containers with resources, no secret value in the output,
// and metric names only those of the chart's sources and alerts.yml.
func checkCommon(t *testing.T, objs map[string]obj) {
	t.Helper()
	for key, o := range objs {
		if !strings.HasPrefix(key, "Deployment/") {
			continue
		}
		c := container(o)
		sub := str(get(c, "args", 0))
		known := settings(subcommands[sub]())
		for name := range env(c) {
			if strings.HasPrefix(name, "WSGATE_") && !known[name] && !pending[name] {
				t.Errorf("%s: env %s is no setting of wsgate %s", key, name, sub)
			}
		}
		ports := map[string]bool{}
		for _, p := range list(c["ports"]) {
			ports[str(get(p, "name"))] = true
		}
		if get(c, "readinessProbe", "httpGet", "path") != "/readyz" || get(c, "livenessProbe", "httpGet", "path") != "/healthz" {
			t.Errorf("%s: readiness must probe /readyz and liveness /healthz", key)
		}
		for _, pr := range []string{"readinessProbe", "livenessProbe"} {
			if p := str(get(c, pr, "httpGet", "port")); !ports[p] {
				t.Errorf("%s: %s on port %q, which the container does not name", key, pr, p)
			}
		}
		if get(c, "securityContext", "runAsNonRoot") != true || get(c, "securityContext", "allowPrivilegeEscalation") != false {
			t.Errorf("%s: container must run as non-root without privilege escalation", key)
		}
		if get(c, "resources", "requests") == nil || get(c, "resources", "limits") == nil {
			t.Errorf("%s: resource requests and limits required", key)
		}
		if str(get(c, "image")) != "ghcr.io/wsgate/wsgate:0.1.0" {
			t.Errorf("%s: image %v", key, get(c, "image"))
		}
	}
	out, _ := yaml.Marshal(objs)
	for _, secret := range []string{"test-password", "s3cr3t"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("a secret value (%s) is in the rendered objects", secret)
		}
	}
	sources := chartSources(t)
	for _, name := range regexp.MustCompile(`\bwsgate_[a-z0-9_]*[a-z0-9]\b`).FindAllString(string(out), -1) {
		if !strings.Contains(sources, name) {
			t.Errorf("metric %s is in the rendered objects but in none of the files deploy's metric test checks", name)
		}
	}
}

// chartSources is the text of the files deploy/manifests_test.go scans
// for metric names (its referencedMetrics), which TestReferencedMetricsExist
// checks against a running node.
func chartSources(t *testing.T) string {
	var b strings.Builder
	for _, pat := range []string{chartDir + "/*.yaml", chartDir + "/templates/*", "../prometheus/*.y*ml"} {
		files, _ := filepath.Glob(pat)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(data)
		}
	}
	return b.String()
}

const base = `
secrets:
  existingSecret: wsgate-credentials
redis:
  url: redis://redis-master.data.svc:6379/0
`

// gateway checks the gateway's Deployment and Services for every value
// set: drain arithmetic, ports, probes, admin listener on ClusterIP only,
// secret files, node id, settings that validate.
func gateway(t *testing.T, objs map[string]obj, preStop, drain, shutdown int) {
	t.Helper()
	gw := must(t, objs, "Deployment/wsgate")
	cm := must(t, objs, "ConfigMap/wsgate-config")
	c := container(gw)
	e := env(c)
	d, err := time.ParseDuration(str(get(cm, "data", "WSGATE_DRAIN_TIMEOUT")))
	if err != nil || d != time.Duration(drain)*time.Second {
		t.Errorf("WSGATE_DRAIN_TIMEOUT %v (%v), want %ds", get(cm, "data", "WSGATE_DRAIN_TIMEOUT"), err, drain)
	}
	ps := toInt(get(c, "lifecycle", "preStop", "sleep", "seconds"))
	grace := toInt(get(gw, "spec", "template", "spec", "terminationGracePeriodSeconds"))
	if ps != preStop || grace != preStop+drain+shutdown {
		t.Errorf("preStop %d, grace %d: want %d and %d+%d+%d", ps, grace, preStop, preStop, drain, shutdown)
	}
	if time.Duration(grace)*time.Second <= time.Duration(ps)*time.Second+d+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d must exceed preStop %d + WSGATE_DRAIN_TIMEOUT %s + 10s", grace, ps, d)
	}
	ports := map[string]int{}
	for _, p := range list(c["ports"]) {
		ports[str(get(p, "name"))] = toInt(get(p, "containerPort"))
	}
	if e["WSGATE_LISTEN"] != ":"+strconv.Itoa(ports["http"]) || e["WSGATE_ADMIN_LISTEN"] != ":"+strconv.Itoa(ports["admin"]) || ports["http"] == ports["admin"] {
		t.Errorf("listen %q admin %q, container ports %v", e["WSGATE_LISTEN"], e["WSGATE_ADMIN_LISTEN"], ports)
	}
	if e["WSGATE_NODE_ID"] != "field:metadata.name" || !strings.Contains(e["WSGATE_ADVERTISE_URL"], "$(POD_IP)") {
		t.Errorf("node id %q advertise %q", e["WSGATE_NODE_ID"], e["WSGATE_ADVERTISE_URL"])
	}
	if get(gw, "spec", "strategy", "rollingUpdate", "maxUnavailable") != 0 {
		t.Error("rolling updates must keep every old pod until its replacement is ready (maxUnavailable 0)")
	}
	// Secrets: the existing Secret mounted read-only, the _FILE settings
	// pointing into it, no plain secret setting.
	mount := str(get(c, "volumeMounts", 0, "mountPath"))
	if str(get(gw, "spec", "template", "spec", "volumes", 0, "secret", "secretName")) != "wsgate-credentials" || get(c, "volumeMounts", 0, "readOnly") != true {
		t.Errorf("the credentials Secret is not mounted read-only: %v", get(gw, "spec", "template", "spec", "volumes"))
	}
	if e["WSGATE_API_KEY_FILE"] != mount+"/api-key" || e["WSGATE_JWT_SECRET_FILE"] != mount+"/jwt-secret" {
		t.Errorf("secret files %q %q, mount %q", e["WSGATE_API_KEY_FILE"], e["WSGATE_JWT_SECRET_FILE"], mount)
	}
	for _, plain := range []string{"WSGATE_API_KEY", "WSGATE_JWT_SECRET", "WSGATE_UPSTREAM_SECRET"} {
		if _, ok := e[plain]; ok {
			t.Errorf("%s given as a value, not as a file", plain)
		}
	}
	// Services: the public one has the WebSocket port only, the admin
	// port is on a ClusterIP Service.
	pub := must(t, objs, "Service/wsgate")
	if get(pub, "spec", "type") != "LoadBalancer" || get(pub, "spec", "externalTrafficPolicy") != "Local" {
		t.Errorf("public Service: type %v, externalTrafficPolicy %v", get(pub, "spec", "type"), get(pub, "spec", "externalTrafficPolicy"))
	}
	if ps := list(get(pub, "spec", "ports")); len(ps) != 1 || str(get(ps[0], "targetPort")) != "http" {
		t.Errorf("public Service ports %v: want the http port only", ps)
	}
	adm := must(t, objs, "Service/wsgate-admin")
	if get(adm, "spec", "type") != "ClusterIP" || str(get(adm, "spec", "ports", 0, "targetPort")) != "admin" {
		t.Errorf("admin Service: %v", get(adm, "spec"))
	}
	for key, o := range objs {
		if strings.HasPrefix(key, "Service/") && key != "Service/wsgate-admin" {
			for _, p := range list(get(o, "spec", "ports")) {
				if str(get(p, "targetPort")) == "admin" || toInt(get(p, "targetPort")) == ports["admin"] {
					t.Errorf("%s exposes the admin port", key)
				}
			}
		}
	}
	// The settings load and validate as the binary would see them.
	var cfg config.Gateway
	if err := config.NewGatewaySet(&cfg).Load(nil, lookup(t, cm, c)); err != nil {
		t.Fatalf("gateway settings: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the gateway's settings do not validate: %v", err)
	}
	if cfg.AdvertiseURL != "ws://10.0.0.1:"+strconv.Itoa(ports["http"])+"/ws" {
		t.Errorf("advertise URL %q", cfg.AdvertiseURL)
	}
}

func TestChartDefaults(t *testing.T) {
	objs, err := render(t, base)
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, objs)
	gateway(t, objs, 10, 120, 30)
	if r := get(must(t, objs, "Deployment/wsgate"), "spec", "replicas"); r != 3 {
		t.Errorf("replicas %v: with no scaler the chart sets gateway.replicas", r)
	}
	al := container(must(t, objs, "Deployment/wsgate-allocator"))
	if env(al)["WSGATE_REDIS_URL"] != "redis://redis-master.data.svc:6379/0" {
		t.Errorf("allocator redis %q", env(al)["WSGATE_REDIS_URL"])
	}
	var acfg config.Allocator
	if err := config.NewAllocatorSet(&acfg).Load(nil, lookup(t, nil, al)); err != nil || acfg.Validate() != nil {
		t.Errorf("allocator settings: %v %v", err, acfg.Validate())
	}
	must(t, objs, "Service/wsgate-allocator")
	must(t, objs, "PodDisruptionBudget/wsgate")
	for _, absent := range []string{"Deployment/wsgate-autoscaler", "HorizontalPodAutoscaler/wsgate", "ServiceMonitor/wsgate", "PrometheusRule/wsgate"} {
		if _, ok := objs[absent]; ok {
			t.Errorf("%s rendered by default", absent)
		}
	}
	// helm lint on the same values.
	vals, _ := chartutil.ReadValues([]byte(base))
	for _, m := range lint.AllWithKubeVersion(chartDir, vals, "wsgate", &kube131).Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %v", m)
		}
	}
}

func TestChartSentinelAndMonitoring(t *testing.T) {
	objs, err := render(t, `
secrets:
  existingSecret: wsgate-credentials
  upstreamSecretKey: upstream-secret
redis:
  sentinel:
    enabled: true
    masterName: mymaster
    addresses: [sentinel-0.data.svc:26379, sentinel-1.data.svc:26379, sentinel-2.data.svc:26379]
    db: 2
    passwordSecret: {name: redis-auth, key: password}
gateway:
  preStopSeconds: 15
  drainTimeoutSeconds: 300
  shutdownSeconds: 20
metrics:
  serviceMonitor: {enabled: true, labels: {release: kube-prometheus}}
  prometheusRule: {enabled: true}
`)
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, objs)
	gateway(t, objs, 15, 300, 20)
	for _, dep := range []string{"Deployment/wsgate", "Deployment/wsgate-allocator"} {
		e := env(container(must(t, objs, dep)))
		if e["REDIS_PASSWORD"] != "secret:redis-auth/password" ||
			e["WSGATE_REDIS_URL"] != "redis-sentinel://:$(REDIS_PASSWORD)@sentinel-0.data.svc:26379,sentinel-1.data.svc:26379,sentinel-2.data.svc:26379/mymaster?db=2" {
			t.Errorf("%s: redis env %q %q", dep, e["REDIS_PASSWORD"], e["WSGATE_REDIS_URL"])
		}
	}
	// The password entry comes before the URL that refers to it.
	var order []string
	for _, x := range list(container(must(t, objs, "Deployment/wsgate"))["env"]) {
		order = append(order, str(get(x, "name")))
	}
	if slices.Index(order, "REDIS_PASSWORD") > slices.Index(order, "WSGATE_REDIS_URL") {
		t.Errorf("REDIS_PASSWORD after WSGATE_REDIS_URL: %v", order)
	}
	if e := env(container(must(t, objs, "Deployment/wsgate"))); e["WSGATE_UPSTREAM_SECRET_FILE"] != "/etc/wsgate/secrets/upstream-secret" {
		t.Errorf("upstream secret file %q", e["WSGATE_UPSTREAM_SECRET_FILE"])
	}
	sm := must(t, objs, "ServiceMonitor/wsgate")
	if str(get(sm, "spec", "endpoints", 0, "port")) != "admin" || str(get(sm, "spec", "endpoints", 0, "path")) != "/metrics" ||
		str(get(sm, "metadata", "labels", "release")) != "kube-prometheus" || str(get(sm, "spec", "selector", "matchLabels", "wsgate.io/admin")) != "true" {
		t.Errorf("ServiceMonitor: %v", sm)
	}
	// The PrometheusRule holds exactly the rules of alerts.yml.
	var want struct {
		Groups []any `yaml:"groups"`
	}
	b, err := os.ReadFile("../prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	yaml.Unmarshal(b, &want)
	pr := must(t, objs, "PrometheusRule/wsgate")
	if got := list(get(pr, "spec", "groups")); len(want.Groups) == 0 || str(got) != str(want.Groups) {
		t.Errorf("PrometheusRule groups differ from alerts.yml:\n%s\nwant\n%s", str(got), str(want.Groups))
	}
}

func TestChartAutoscaler(t *testing.T) {
	objs, err := render(t, base+`
autoscaler:
  enabled: true
`)
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, objs)
	gateway(t, objs, 10, 120, 30)
	if r := get(must(t, objs, "Deployment/wsgate"), "spec", "replicas"); r != nil {
		t.Errorf("replicas %v: the autoscaler owns the count, a helm upgrade must not reset it", r)
	}
	as := must(t, objs, "Deployment/wsgate-autoscaler")
	c := container(as)
	e := env(c)
	if e["WSGATE_ACTUATOR"] != "kubernetes" || e["WSGATE_K8S_DEPLOYMENT"] != "wsgate" || e["WSGATE_K8S_NAMESPACE"] != "wsgate" || toInt(get(as, "spec", "replicas")) != 1 {
		t.Errorf("autoscaler: env %v replicas %v", e, get(as, "spec", "replicas"))
	}
	var cfg config.Autoscaler
	if err := config.NewAutoscalerSet(&cfg).Load(nil, lookup(t, nil, c)); err != nil {
		t.Fatalf("autoscaler settings: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the autoscaler's settings do not validate: %v", err)
	}
	sa := str(get(as, "spec", "template", "spec", "serviceAccountName"))
	must(t, objs, "ServiceAccount/"+sa)
	if get(as, "spec", "template", "spec", "automountServiceAccountToken") == false {
		t.Error("the autoscaler needs its token for the Kubernetes API")
	}
	verbs := map[string]bool{}
	for _, r := range list(get(must(t, objs, "Role/wsgate-autoscaler"), "rules")) {
		if slices.Contains(list(get(r, "resources")), any("deployments/scale")) && slices.Contains(list(get(r, "resourceNames")), any("wsgate")) {
			for _, v := range list(get(r, "verbs")) {
				verbs[str(v)] = true
			}
		}
	}
	for _, v := range []string{"get", "update", "patch"} {
		if !verbs[v] {
			t.Errorf("Role wsgate-autoscaler: no %q on deployments/scale of wsgate", v)
		}
	}
	rb := must(t, objs, "RoleBinding/wsgate-autoscaler")
	if str(get(rb, "roleRef", "name")) != "wsgate-autoscaler" || str(get(rb, "subjects", 0, "name")) != sa || str(get(rb, "subjects", 0, "namespace")) != "wsgate" {
		t.Errorf("RoleBinding does not bind the Role to %q: %v", sa, rb)
	}
}

func TestChartHPA(t *testing.T) {
	objs, err := render(t, base+`
hpa:
  enabled: true
`)
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, objs)
	gateway(t, objs, 10, 120, 30)
	hpa := must(t, objs, "HorizontalPodAutoscaler/wsgate")
	if str(get(hpa, "spec", "scaleTargetRef", "name")) != "wsgate" || str(get(hpa, "spec", "metrics", 0, "pods", "metric", "name")) != "wsgate_connections" {
		t.Errorf("HPA: %v", get(hpa, "spec"))
	}
	if r := get(must(t, objs, "Deployment/wsgate"), "spec", "replicas"); r != nil {
		t.Errorf("replicas %v with the HPA", r)
	}
}

func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{"redis: {url: redis://r:6379}", "secrets.existingSecret is required"},
		{base + "autoscaler: {enabled: true}\nhpa: {enabled: true}", "choose one owner"},
		{"secrets: {existingSecret: s}\nredis: {url: redis://r:6379, existingSecret: r}", "exactly one of redis.url"},
		{"secrets: {existingSecret: s}", "exactly one of redis.url"},
		{"secrets: {existingSecret: s}\nredis: {sentinel: {enabled: true}}", "redis.sentinel.addresses"},
	} {
		_, err := render(t, tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %q: %v, want an error mentioning %q", tc.values, err, tc.want)
		}
	}
}

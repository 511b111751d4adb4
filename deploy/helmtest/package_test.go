package helmtest

import (
	"bytes"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// quietLoad loads a chart as helm template and helm package do, and fails
// the test on anything Helm logs meanwhile (a symbolic link in the chart,
// for one, is logged as a warning).
func quietLoad(t *testing.T, path string) *chart.Chart {
	t.Helper()
	var logged bytes.Buffer
	defer log.SetOutput(log.Writer())
	log.SetOutput(&logged)
	ch, err := loader.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if logged.Len() > 0 {
		t.Errorf("helm warns loading %s: %s", path, logged.String())
	}
	return ch
}

// helm template without --kube-version: Helm's default capabilities
// (Kubernetes 1.20 and the API versions Helm knows) satisfy the chart; the
// objects use API versions of those capabilities (or the Prometheus
// operator's CRDs); the preStop sleep, which needs 1.30, is left out there
// and rendered for 1.30.
func TestChartRendersWithHelmDefaults(t *testing.T) {
	ch := quietLoad(t, chartDir)
	caps := chartutil.DefaultCapabilities.Copy()
	values := base + `
hpa: {enabled: true}
metrics:
  serviceMonitor: {enabled: true}
  prometheusRule: {enabled: true}
`
	objs, err := renderChart(t, ch, caps, values)
	if err != nil {
		t.Fatalf("helm template with Helm's defaults (Kubernetes %s): %v", caps.KubeVersion.Version, err)
	}
	for key, o := range objs {
		api := str(o["apiVersion"])
		if !caps.APIVersions.Has(api) && !caps.APIVersions.Has(api+"/"+str(o["kind"])) && api != "monitoring.coreos.com/v1" {
			t.Errorf("%s: apiVersion %s is not one Helm's default capabilities know", key, api)
		}
	}
	for _, want := range []string{"Deployment/wsgate", "HorizontalPodAutoscaler/wsgate", "PodDisruptionBudget/wsgate", "PrometheusRule/wsgate"} {
		must(t, objs, want)
	}
	if lc := get(container(must(t, objs, "Deployment/wsgate")), "lifecycle"); lc != nil {
		t.Errorf("Kubernetes %s has no native sleep action, yet the gateway has lifecycle %v", caps.KubeVersion.Version, lc)
	}
	for _, v := range []chartutil.KubeVersion{{Version: "v1.30.0", Major: "1", Minor: "30"}, kube131} {
		caps.KubeVersion = v
		objs, err := renderChart(t, ch, caps, base)
		if err != nil {
			t.Fatal(err)
		}
		if s := toInt(get(container(must(t, objs, "Deployment/wsgate")), "lifecycle", "preStop", "sleep", "seconds")); s != 10 {
			t.Errorf("Kubernetes %s: preStop sleep %d, want 10", v.Version, s)
		}
	}
	// Only the Secret is required: without it, one line saying so.
	caps.KubeVersion = chartutil.DefaultCapabilities.KubeVersion
	if _, err := renderChart(t, ch, caps, ""); err == nil || !strings.Contains(err.Error(), "secrets.existingSecret is required") {
		t.Errorf("no values: %v", err)
	}
	// helm lint with Helm's default Kubernetes version.
	vals, _ := chartutil.ReadValues([]byte(values))
	for _, m := range lint.AllWithKubeVersion(chartDir, vals, "wsgate", nil).Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %v", m)
		}
	}
}

// helm package: the chart holds no symbolic link (Helm warns and a
// packaged link breaks), its archive holds every file of the chart
// directory but the ignored ones, and renders as the directory does.
func TestChartPackage(t *testing.T) {
	err := filepath.WalkDir(chartDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink != 0 {
			t.Errorf("%s is a symbolic link: helm package warns and copies its target", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := quietLoad(t, chartDir)
	if err := ch.Validate(); err != nil {
		t.Fatalf("chart metadata: %v", err)
	}
	tgz, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(tgz) != "wsgate-"+ch.Metadata.Version+".tgz" {
		t.Errorf("archive %s", tgz)
	}
	packed := quietLoad(t, tgz)
	var names, want []string
	for _, f := range append(packed.Raw, packed.Templates...) {
		names = append(names, f.Name)
	}
	for _, f := range append(ch.Raw, ch.Templates...) {
		want = append(want, f.Name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(names, want) || !slices.Contains(names, "files/alerts.yml") || !slices.Contains(names, "README.md") {
		t.Errorf("archive files %v, want %v (with files/alerts.yml and README.md)", names, want)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = kube131
	fromDir, err := renderChart(t, ch, caps, base+"metrics: {prometheusRule: {enabled: true}}\n")
	if err != nil {
		t.Fatal(err)
	}
	fromTgz, err := renderChart(t, packed, caps, base+"metrics: {prometheusRule: {enabled: true}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if str(fromDir) != str(fromTgz) {
		t.Errorf("the packaged chart renders otherwise than its directory")
	}
}

// files/alerts.yml is deploy/prometheus/alerts.yml, byte for byte: edit
// the latter and copy it (cp deploy/prometheus/alerts.yml
// deploy/helm/wsgate/files/alerts.yml).
func TestChartAlertsAreThePrometheusOnes(t *testing.T) {
	a, err := os.ReadFile("../prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "files/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s/files/alerts.yml differs from deploy/prometheus/alerts.yml: copy it", chartDir)
	}
}

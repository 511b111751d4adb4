package deploy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/proc"
	"github.com/wsgate/wsgate/internal/testutil/wsgatebin"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/autoscaler"
	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/protocol"
)

// synthetic are names Prometheus itself makes for every target.
var synthetic = map[string]string{"up": "set by Prometheus for every scrape target"}

// TestReferencedMetricsExist builds wsgate, runs `wsgate dev`, makes it
// count a little of everything (connections, publishes to every target
// type, a rate-limited frame, a refused handshake, a close), reads its
// /metrics and checks that every metric the rules, the dashboard and the
// manifests reference is exported. The autoscaler's metrics are checked
// against its registry. A gateway metric with labels that only appears
// after a failure this test cannot cause on an embedded node (backend
// errors) is accepted when the gateway registers it, and logged.
func TestReferencedMetricsExist(t *testing.T) {
	refs := referencedMetrics(t)
	bin := wsgatebin.Path(t)
	port := wsgatebin.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	p := startDev(t, bin, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--message-rate", "1")
	waitHTTP(t, p, base+"/readyz")

	// Activity.
	ctx := context.Background()
	conn, w, err := client.Dial(ctx, fmt.Sprintf("ws://127.0.0.1:%d/ws", port), client.DialOptions{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if w.User != "alice" {
		t.Fatalf("welcome %+v", w)
	}
	frames := make(chan *protocol.ServerFrame, 100)
	go func() {
		defer close(frames)
		for {
			f, err := conn.ReadFrame()
			if err != nil {
				return
			}
			frames <- f
		}
	}()
	if err := conn.WriteFrame(&protocol.ClientFrame{Type: "join", ID: "j1", Room: "lobby"}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"target":{"type":"user","id":"alice"},"event":"e","data":1}`,
		`{"target":{"type":"user","id":"alice"},"event":"e","data":2,"reliable":true}`,
		`{"target":{"type":"room","id":"lobby"},"event":"e","data":3}`,
		`{"target":{"type":"broadcast"},"event":"e","data":4}`,
	} {
		post(t, base+"/api/v1/publish", body)
	}
	// Over --message-rate 1 (burst 1): the second frame is refused, dropped
	// and counted (not over twice the rate: the connection stays).
	for i := range 2 {
		if err := conn.WriteFrame(&protocol.ClientFrame{Type: "ping", ID: fmt.Sprint("p", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// A handshake refused before the upgrade.
	if resp, err := http.Get(base + "/ws"); err == nil {
		resp.Body.Close()
	}
	// A second connection that closes.
	c2, _, err := client.Dial(ctx, fmt.Sprintf("ws://127.0.0.1:%d/ws", port), client.DialOptions{User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	c2.WriteClose(1000, "bye")
	c2.Close()

	var names map[string]bool
	deadline := time.Now().Add(15 * time.Second)
	for {
		names = scrape(t, base+"/metrics")
		if names["wsgate_messages_dropped_total"] && names["wsgate_connection_closes_total"] && names["wsgate_delivery_latency_seconds_bucket"] &&
			names["wsgate_handshake_rejected_total"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dev node never exported the activity's metrics; it has: %v", sortedKeys(names))
		}
		time.Sleep(100 * time.Millisecond)
	}

	asNames := map[string]bool{}
	mfs, err := autoscaler.NewMetrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		addFamily(asNames, mf.GetName(), mf.GetType().String())
	}
	declared := declaredGatewayMetrics(t)

	for _, name := range sortedKeys(refs) {
		where := strings.Join(refs[name], ", ")
		switch {
		case strings.HasPrefix(name, "wsgate_autoscaler_"):
			if !asNames[name] {
				t.Errorf("%s (used in %s) is not an autoscaler metric", name, where)
			}
		case names[name]:
		case synthetic[name] != "":
			t.Logf("%s: %s", name, synthetic[name])
		case declared[name]:
			t.Logf("%s (used in %s): registered by the gateway, not exported by the dev node until it happens", name, where)
		default:
			t.Errorf("%s (used in %s) is not exported by a running gateway", name, where)
		}
	}
	t.Logf("%d metric names referenced by deploy/, checked against a running node (%d names) and the autoscaler (%d names)",
		len(refs), len(names), len(asNames))
}

// scrape returns the sample names of a /metrics page, with the _bucket,
// _sum and _count forms of histograms and summaries and their base names.
func scrape(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			addFamily(names, f[2], strings.ToUpper(f[3]))
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// addFamily adds a metric family's name and, for histograms and
// summaries, the names of its series.
func addFamily(names map[string]bool, name, typ string) {
	names[name] = true
	switch typ {
	case "HISTOGRAM":
		names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
	case "SUMMARY":
		names[name+"_sum"], names[name+"_count"] = true, true
	}
}

// declaredGatewayMetrics returns the names of every collector the
// gateway's metrics.New registers (labelled vectors included, which
// /metrics shows only once a label value was used).
func declaredGatewayMetrics(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New()
	out := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var collectors []prometheus.Collector
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) { // the struct and the groups embedded in it (Upstream, Downstream, ...)
		for i := range v.NumField() {
			f := v.Field(i)
			if v.Type().Field(i).Name == "Registry" {
				continue
			}
			if f.Kind() == reflect.Struct && v.Type().Field(i).Anonymous {
				walk(f)
				continue
			}
			if c, ok := f.Interface().(prometheus.Collector); ok {
				collectors = append(collectors, c)
			}
		}
	}
	walk(reflect.ValueOf(m).Elem())
	for _, c := range collectors {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if mm := fq.FindStringSubmatch(d.String()); mm != nil {
				out[mm[1]] = true
				// Vectors of histograms: their series names.
				if _, isHist := c.(*prometheus.HistogramVec); isHist {
					addFamily(out, mm[1], "HISTOGRAM")
				}
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("could not read the gateway's registered metrics: %v", out)
	}
	return out
}

func post(t *testing.T, url, body string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s %s: %s %s", url, body, resp.Status, b)
	}
}

// ---- processes -----------------------------------------------------------------

func TestMain(m *testing.M) {
	os.Exit(wsgatebin.Main(m))
}

// startDev runs `wsgate dev` with args; killed at cleanup.
func startDev(t *testing.T, bin string, args ...string) *proc.Proc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dev"}, args...)...)
	cmd.Env = append(os.Environ(), "WSGATE_CONFIG=")
	p := proc.Start(t, "wsgate dev", cmd)
	p.OnFailure(func() { t.Logf("---- wsgate dev output ----\n%s", p.Output()) })
	return p
}

func waitHTTP(t *testing.T, p *proc.Proc, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if p.Exited() {
			t.Fatalf("wsgate dev exited:\n%s", p.Output())
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 15s", url)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

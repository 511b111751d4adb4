package deploy_test

import (
	"encoding/json"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/wsgate/wsgate/internal/config"
)

// stage is one FROM of a Dockerfile with its instructions.
type stage struct {
	image, name string
	lines       []string // instructions after FROM, continuation lines joined
}

// dockerStages parses a Dockerfile into its stages.
func dockerStages(t *testing.T, path string) []stage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		out  []stage
		cont string
	)
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, cont = cont+line, ""
		f := strings.Fields(line)
		if strings.EqualFold(f[0], "FROM") {
			s := stage{image: f[1]}
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				s.name = f[3]
			}
			out = append(out, s)
			continue
		}
		if len(out) == 0 {
			if strings.EqualFold(f[0], "ARG") {
				continue
			}
			t.Fatalf("%s: %q before the first FROM", path, line)
		}
		out[len(out)-1].lines = append(out[len(out)-1].lines, line)
	}
	return out
}

// instr returns the arguments of the stage's instructions named op.
func (s stage) instr(op string) []string {
	var out []string
	for _, l := range s.lines {
		if f := strings.SplitN(l, " ", 2); strings.EqualFold(f[0], op) && len(f) == 2 {
			out = append(out, strings.TrimSpace(f[1]))
		}
	}
	return out
}

// serverVersion is the version cmd/wsgate reports.
func serverVersion(t *testing.T) string {
	b, err := os.ReadFile("../cmd/wsgate/main.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^var version = "([^"]+)"`).FindSubmatch(b)
	if m == nil {
		t.Fatal("cmd/wsgate/main.go: no version variable")
	}
	return string(m[1])
}

// The image: built in one stage, run from distroless or scratch as a
// non-root user, the binary the build stage writes is the one copied and
// run, the version stamped is the server's, the health endpoints named.
func TestDockerfile(t *testing.T) {
	const path = "docker/Dockerfile"
	stages := dockerStages(t, path)
	if len(stages) < 2 {
		t.Fatalf("%d stages: want a build stage and a runtime stage", len(stages))
	}
	build, run := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(run.image, "gcr.io/distroless/") && run.image != "scratch" {
		t.Errorf("runtime image %s: want distroless or scratch", run.image)
	}
	users := run.instr("USER")
	if len(users) == 0 {
		t.Fatal("runtime stage has no USER: it would run as root")
	}
	if u := strings.Split(users[len(users)-1], ":")[0]; u == "0" || u == "root" {
		t.Errorf("USER %s is root", users[len(users)-1])
	}

	// go build -o OUT ./cmd/wsgate in the build stage.
	var out string
	for _, r := range build.instr("RUN") {
		if m := regexp.MustCompile(`go build .*-o (\S+) \./cmd/wsgate\b`).FindStringSubmatch(r); m != nil {
			out = m[1]
			if !strings.Contains(r, "CGO_ENABLED=0") && !strings.HasPrefix(run.image, "gcr.io/distroless/base") {
				t.Errorf("the binary is not static (CGO_ENABLED=0) but %s has no libc", run.image)
			}
			if !strings.Contains(r, "-X main.version=${VERSION}") {
				t.Errorf("the build does not stamp the version: %s", r)
			}
		}
	}
	if out == "" {
		t.Fatal("no `go build -o OUT ./cmd/wsgate` in the build stage")
	}
	for _, a := range build.instr("ARG") {
		if v, ok := strings.CutPrefix(a, "VERSION="); ok && v != serverVersion(t) {
			t.Errorf("ARG VERSION=%s, the server's version is %s", v, serverVersion(t))
		}
	}
	var bin string
	for _, c := range run.instr("COPY") {
		f := strings.Fields(c)
		if len(f) == 3 && f[0] == "--from="+build.name && f[1] == out {
			bin = f[2]
		}
	}
	if bin == "" {
		t.Fatalf("the runtime stage does not copy %s from stage %q", out, build.name)
	}
	var entry, cmd []string
	for _, e := range run.instr("ENTRYPOINT") {
		if err := json.Unmarshal([]byte(e), &entry); err != nil {
			t.Errorf("ENTRYPOINT %s: want the exec (JSON) form, the image has no shell", e)
		}
	}
	for _, c := range run.instr("CMD") {
		if err := json.Unmarshal([]byte(c), &cmd); err != nil {
			t.Errorf("CMD %s: want the exec (JSON) form", c)
		}
	}
	if len(entry) != 1 || entry[0] != bin {
		t.Errorf("ENTRYPOINT %v, want [%s]", entry, bin)
	}
	if len(cmd) != 1 || cmd[0] != "gateway" {
		t.Errorf("CMD %v, want [gateway]", cmd)
	}
	if ex := run.instr("EXPOSE"); !slices.Contains(ex, "8080") {
		t.Errorf("EXPOSE %v: the gateway listens on :8080 by default", ex)
	}
	if len(run.instr("HEALTHCHECK")) == 0 {
		b, _ := os.ReadFile(path)
		if !strings.Contains(string(b), "/healthz") || !strings.Contains(string(b), "/readyz") {
			t.Error("no HEALTHCHECK and no word on the health endpoints (/healthz, /readyz)")
		}
	}
}

// composeVar replaces compose's ${VAR:?message} and ${VAR:-default} the
// way `docker compose` does with env.
func composeVar(t *testing.T, s string, env map[string]string) string {
	return regexp.MustCompile(`\$\{(\w+)(:[?-])?([^}]*)\}`).ReplaceAllStringFunc(s, func(m string) string {
		p := regexp.MustCompile(`\$\{(\w+)(:[?-])?([^}]*)\}`).FindStringSubmatch(m)
		if v := env[p[1]]; v != "" {
			return v
		}
		if p[2] == ":?" {
			t.Errorf("compose needs %s: %s", p[1], p[3])
		}
		return p[3]
	})
}

// docker-compose.yml: Redis, two gateways and the allocator from the
// image of deploy/docker/Dockerfile; every variable a setting of the
// subcommand it runs, the settings valid (secrets of the lengths the
// docs ask for), each node reachable at the URL it advertises.
func TestComposeQuickStart(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Build       map[string]string `yaml:"build"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"WSGATE_API_KEY": strings.Repeat("k", 32), "WSGATE_JWT_SECRET": strings.Repeat("s", 64)}
	sets := map[string]func() (*config.Set, func() error){
		"gateway": func() (*config.Set, func() error) {
			c := new(config.Gateway)
			return config.NewGatewaySet(c), func() error {
				if err := c.Validate(); err != nil {
					return err
				}
				return c.CheckSecrets()
			}
		},
		"allocator": func() (*config.Set, func() error) {
			c := new(config.Allocator)
			return config.NewAllocatorSet(c), c.Validate
		},
	}
	count := map[string]int{}
	hostPorts := map[string]string{}
	nodeIDs := map[string]bool{}
	for name, svc := range file.Services {
		if strings.HasPrefix(svc.Image, "redis:") {
			count["redis"]++
			continue
		}
		if len(svc.Command) == 0 || sets[svc.Command[0]] == nil {
			t.Errorf("service %s: command %v is not gateway or allocator", name, svc.Command)
			continue
		}
		sub := svc.Command[0]
		count[sub]++
		if svc.Build["dockerfile"] != "deploy/docker/Dockerfile" || svc.Build["context"] != "." {
			t.Errorf("service %s: build %v, want the repository root and deploy/docker/Dockerfile", name, svc.Build)
		}
		set, validate := sets[sub]()
		known := settingsOf(set)
		vals := map[string]string{}
		for k, v := range svc.Environment {
			if !known[k] {
				t.Errorf("service %s: %s is not a setting of wsgate %s", name, k, sub)
			}
			vals[k] = composeVar(t, v, env)
		}
		if err := set.Load(nil, func(k string) (string, bool) { v, ok := vals[k]; return v, ok }); err != nil {
			t.Errorf("service %s: %v", name, err)
			continue
		}
		if err := validate(); err != nil {
			t.Errorf("service %s: wsgate %s would not start: %v", name, sub, err)
		}
		if u, err := url.Parse(vals["WSGATE_REDIS_URL"]); err != nil || file.Services[u.Hostname()].Image == "" ||
			!strings.HasPrefix(file.Services[u.Hostname()].Image, "redis:") {
			t.Errorf("service %s: WSGATE_REDIS_URL %q does not name the Redis service", name, vals["WSGATE_REDIS_URL"])
		}
		// One published port, the container's listen port (default :8080).
		if len(svc.Ports) != 1 || !strings.HasSuffix(svc.Ports[0], ":8080") {
			t.Errorf("service %s: ports %v, want one HOST:8080", name, svc.Ports)
			continue
		}
		host := strings.TrimSuffix(svc.Ports[0], ":8080")
		if other, dup := hostPorts[host]; dup {
			t.Errorf("services %s and %s both publish port %s", name, other, host)
		}
		hostPorts[host] = name
		if sub == "gateway" {
			id := vals["WSGATE_NODE_ID"]
			if id == "" || nodeIDs[id] {
				t.Errorf("service %s: WSGATE_NODE_ID %q missing or repeated", name, id)
			}
			nodeIDs[id] = true
			if adv := vals["WSGATE_ADVERTISE_URL"]; adv != "ws://localhost:"+host+"/ws" {
				t.Errorf("service %s: WSGATE_ADVERTISE_URL %q, want the published port ws://localhost:%s/ws", name, adv, host)
			}
		}
	}
	if count["redis"] != 1 || count["gateway"] < 2 || count["allocator"] != 1 {
		t.Errorf("services: %v; want one Redis, two gateways or more and one allocator", count)
	}
}

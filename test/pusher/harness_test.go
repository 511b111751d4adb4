package pusher

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/proc"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/internal/testutil/wsgatebin"
)

func TestMain(m *testing.M) { os.Exit(wsgatebin.Main(m)) }

// The Pusher app every node of a test cluster speaks for.
const (
	appID     = "4242"
	appKey    = "pusher-test-key"
	appSecret = "pusher-test-secret-0123456789abcdef"
	apiKey    = "pusher-test-api-key-0123456789abcdef"
	jwtSecret = "pusher-test-jwt-secret-0123456789abcdef"
)

// node is one `wsgate gateway` process; it can be killed and started again
// on the same port.
type node struct {
	ID   string
	Port int
	c    *cluster

	mu sync.Mutex
	p  *proc.Proc
}

func (g *node) base() string { return "http://127.0.0.1:" + strconv.Itoa(g.Port) }

func (g *node) proc() *proc.Proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.p
}

// start runs the process and waits until it is ready.
func (g *node) start(t testing.TB) error {
	cmd := exec.Command(wsgatebin.Path(t), "gateway")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WSGATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range g.c.settings(g) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p, err := proc.TryStart(t, "gateway "+g.ID, cmd)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.p = p
	g.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p.Exited() {
			return fmt.Errorf("gateway %s exited at start: %v\n%s", g.ID, p.Err(), p.Tail(20))
		}
		if res, err := http.Get(g.base() + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway %s not ready within 20s", g.ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cluster is Redis, gateway nodes on it, and a TCP balancer in front of
// them that sends each new connection to the first node of its pool (a
// load balancer whose health checks take a node out before it is killed
// or drained).
type cluster struct {
	redis   *redistest.Server
	nodes   []*node
	extra   map[string]string // settings of every node
	lb      net.Listener
	mu      sync.Mutex
	pool    []*node
	backend map[net.Conn]*node
	hooks   *hookRecorder // WSGATE_PUSHER_WEBHOOK_URL of every node
}

func (c *cluster) settings(g *node) map[string]string {
	s := map[string]string{
		"WSGATE_LISTEN":             "127.0.0.1:" + strconv.Itoa(g.Port),
		"WSGATE_NODE_ID":            g.ID,
		"WSGATE_ADVERTISE_URL":      "ws://127.0.0.1:" + strconv.Itoa(g.Port) + "/ws",
		"WSGATE_REDIS_URL":          c.redis.URL(),
		"WSGATE_API_KEY":            apiKey,
		"WSGATE_JWT_SECRET":         jwtSecret,
		"WSGATE_TRANSPORTS":         "ws,pusher",
		"WSGATE_PUSHER_APP_ID":      appID,
		"WSGATE_PUSHER_KEY":         appKey,
		"WSGATE_PUSHER_SECRET":      appSecret,
		"WSGATE_HEARTBEAT_INTERVAL": "500ms",
		"WSGATE_ROUTE_TTL":          "3s",
		"WSGATE_DRAIN_TIMEOUT":      "10s",
		"WSGATE_DRAIN_RATE":         "200",
		"WSGATE_LOG_LEVEL":          "info",
		"WSGATE_PUSHER_WEBHOOK_URL": c.hooks.url,
	}
	for k, v := range c.extra {
		s[k] = v
	}
	return s
}

// startCluster starts Redis and n nodes (n1, n2, ...), all in the
// balancer's pool in that order.
func startCluster(t *testing.T, n int, extra map[string]string) *cluster {
	t.Helper()
	c := &cluster{redis: redistest.Standalone(t, redistest.Options{}), extra: extra, backend: map[net.Conn]*node{}, hooks: newHookRecorder(t)}
	for i := range n {
		g := &node{ID: fmt.Sprintf("n%d", i+1), Port: wsgatebin.FreePort(t), c: c}
		if err := g.start(t); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, g)
	}
	c.pool = append([]*node(nil), c.nodes...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.lb = ln
	t.Cleanup(func() { ln.Close() })
	go c.balance()
	return c
}

func (c *cluster) lbPort() int { return c.lb.Addr().(*net.TCPAddr).Port }

func (c *cluster) node(id string) *node {
	for _, g := range c.nodes {
		if g.ID == id {
			return g
		}
	}
	return nil
}

func (c *cluster) balance() {
	for {
		in, err := c.lb.Accept()
		if err != nil {
			return
		}
		c.mu.Lock()
		var g *node
		if len(c.pool) > 0 {
			g = c.pool[0]
		}
		c.mu.Unlock()
		if g == nil {
			in.Close()
			continue
		}
		go pipe(in, g)
	}
}

// pipe copies both ways between a client and node g until either side
// closes; a node that dies closes its clients' connections.
func pipe(in net.Conn, g *node) {
	out, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(g.Port))
	if err != nil {
		in.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
	in.Close()
	out.Close()
}

// setPool takes id out of the balancer's pool (in=false) or puts it
// first (in=true).
func (c *cluster) setPool(id string, in bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pool []*node
	for _, g := range c.pool {
		if g.ID != id {
			pool = append(pool, g)
		}
	}
	if in {
		pool = append([]*node{c.node(id)}, pool...)
	}
	c.pool = pool
}

// control is the HTTP server the Node tests drive the cluster with:
// POST /kill/{id} (out of the pool, then SIGKILL; answered once the
// process ended), /start/{id} (started again, then first in the pool;
// answered once ready), /drain/{id} (out of the pool, then the server
// API's drain; answered at once with the API's status); GET
// /webhooks?after=N lists the Pusher webhook requests the nodes made.
func (c *cluster) control(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /kill/{id}", func(w http.ResponseWriter, r *http.Request) {
		g := c.node(r.PathValue("id"))
		c.setPool(g.ID, false)
		g.proc().Kill()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /start/{id}", func(w http.ResponseWriter, r *http.Request) {
		g := c.node(r.PathValue("id"))
		if err := g.start(t); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		c.setPool(g.ID, true)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /drain/{id}", func(w http.ResponseWriter, r *http.Request) {
		g := c.node(r.PathValue("id"))
		c.setPool(g.ID, false)
		req, _ := http.NewRequest(http.MethodPost, g.base()+"/api/v1/nodes/"+g.ID+"/drain", nil)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		res.Body.Close()
		w.WriteHeader(res.StatusCode)
	})
	mux.HandleFunc("GET /webhooks", c.hooks.serveList)
	return serve(t, mux)
}

// hookRecorder is the nodes' Pusher webhook endpoint: it answers 200 and
// keeps each request (headers and body) for the Node tests, which check
// them with the server library's webhook().
type hookRecorder struct {
	url  string
	mu   sync.Mutex
	reqs []hookRequest
	more chan struct{} // closed and replaced at each request
}

type hookRequest struct {
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

func newHookRecorder(t *testing.T) *hookRecorder {
	h := &hookRecorder{more: make(chan struct{})}
	h.url = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hr := hookRequest{Headers: map[string]string{}, Body: string(body)}
		for k := range r.Header {
			hr.Headers[strings.ToLower(k)] = r.Header.Get(k)
		}
		h.mu.Lock()
		h.reqs = append(h.reqs, hr)
		close(h.more)
		h.more = make(chan struct{})
		h.mu.Unlock()
	})) + "/pusher/webhook"
	return h
}

// serveList is GET /webhooks?after=N: the requests after the first N,
// waiting up to 10 s for one when there is none yet.
func (h *hookRecorder) serveList(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.Atoi(r.URL.Query().Get("after"))
	timeout := time.After(10 * time.Second)
	for {
		h.mu.Lock()
		reqs, more := h.reqs, h.more
		h.mu.Unlock()
		if len(reqs) > after {
			_ = json.NewEncoder(w).Encode(reqs[after:])
			return
		}
		select {
		case <-more:
		case <-timeout:
			_ = json.NewEncoder(w).Encode([]hookRequest{})
			return
		case <-r.Context().Done():
			return
		}
	}
}

// serve runs an HTTP server with h on a loopback port until the test
// ends, and returns its base URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// nodeModules is test/pusher/node_modules, which `npm ci` (make test)
// installs; a test that needs it fails without it.
func nodeModules(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("node_modules")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"pusher-js", "pusher", "laravel-echo"} {
		if _, err := os.Stat(filepath.Join(dir, pkg, "package.json")); err != nil {
			t.Fatalf("%s is not installed in test/pusher: run `npm ci` there (make test does)", pkg)
		}
	}
	return dir
}

// runNode runs `node --test` on the given files of test/pusher with the
// cluster described in the environment, and fails the test unless every
// Node test passed; want is the number of Node tests that must have run.
func runNode(t *testing.T, c *cluster, want int, files ...string) {
	t.Helper()
	nodeModules(t)
	nodes := map[string]string{}
	for _, g := range c.nodes {
		nodes[g.ID] = g.base()
	}
	nb, _ := json.Marshal(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"--test", "--test-reporter=tap", "--test-concurrency=1"}, files...)...)
	cmd.Env = append(os.Environ(),
		"PUSHER_APP_ID="+appID, "PUSHER_KEY="+appKey, "PUSHER_SECRET="+appSecret,
		"WSGATE_TEST_LB_PORT="+strconv.Itoa(c.lbPort()),
		"WSGATE_TEST_NODES="+string(nb),
		"WSGATE_TEST_CONTROL="+c.control(t),
	)
	out, err := cmd.CombinedOutput()
	tap := string(out)
	if err != nil {
		t.Fatalf("node --test %v: %v\n%s", files, err, tap)
	}
	if !strings.Contains(tap, fmt.Sprintf("# pass %d\n", want)) || !strings.Contains(tap, "# fail 0\n") {
		t.Fatalf("node --test %v: want %d passed and none failed:\n%s", files, want, tap)
	}
	t.Logf("node --test %v:\n%s", files, tap)
}

package e2e

// The harness: builds the binary once, starts gateway processes on free
// loopback ports against a Redis deployment, and wraps the server API,
// /metrics, tokens and raw client connections. Every process is killed by
// PID at the test's cleanup and gets SIGKILL if the test binary dies.

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/testutil/proc"
	"github.com/wsgate/wsgate/protocol"
)

const (
	apiKey    = "e2e-api-key-0123456789"
	jwtSecret = "e2e-jwt-secret-0123456789abcdef0123"
)

// wsgateBin is the gateway binary, built once by TestMain.
var wsgateBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wsgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	wsgateBin = filepath.Join(dir, "wsgate")
	args := []string{"build", "-o", wsgateBin}
	if raceBuild || os.Getenv("WSGATE_E2E_RACE") != "" {
		args = append(args, "-race")
	}
	args = append(args, "github.com/wsgate/wsgate/cmd/wsgate")
	goBin, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: the go command is not on PATH:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	if out, err := exec.Command(goBin, args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %s: %v\n%s", strings.Join(args, " "), err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// shortSettings are the fast liveness settings every test starts from.
func shortSettings() map[string]string {
	return map[string]string{
		"WSGATE_HEARTBEAT_INTERVAL": "500ms",
		"WSGATE_ROUTE_TTL":          "3s",
		"WSGATE_PING_INTERVAL":      "2s",
		"WSGATE_PONG_TIMEOUT":       "6s",
		"WSGATE_DRAIN_TIMEOUT":      "10s",
		"WSGATE_DRAIN_RATE":         "200",
		"WSGATE_LOG_LEVEL":          "info",
	}
}

// ---- the cluster of gateway processes ----

// gwCluster is a set of gateway processes sharing one Redis deployment and
// one key prefix (unique per cluster, so tests can share a Redis).
type gwCluster struct {
	t        *testing.T
	redisURL string
	prefix   string
	settings map[string]string
	http     *http.Client

	mu    sync.Mutex
	nodes []*gateway
}

// newCluster prepares a cluster; settings override shortSettings.
func newCluster(t *testing.T, redisURL string, settings map[string]string) *gwCluster {
	t.Helper()
	s := shortSettings()
	for k, v := range settings {
		s[k] = v
	}
	var b [4]byte
	_, _ = crand.Read(b[:])
	c := &gwCluster{
		t:        t,
		redisURL: redisURL,
		prefix:   "e2e-" + hex.EncodeToString(b[:]),
		settings: s,
		http: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 16,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		}},
	}
	t.Cleanup(c.cleanup)
	return c
}

func (c *gwCluster) cleanup() {
	c.mu.Lock()
	nodes := append([]*gateway(nil), c.nodes...)
	c.mu.Unlock()
	for _, g := range nodes {
		g.Kill()
	}
	for _, g := range nodes {
		// Only a race-built gateway (go test -race, or WSGATE_E2E_RACE=1)
		// reports races.
		if log := g.log(); strings.Contains(log, "WARNING: DATA RACE") {
			i := strings.Index(log, "WARNING: DATA RACE")
			c.t.Errorf("gateway %s reported a data race:\n%s", g.ID, log[i:min(len(log), i+6000)])
		}
	}
	if c.t.Failed() {
		for _, g := range nodes {
			c.t.Logf("---- log of gateway %s (port %d), last lines:\n%s", g.ID, g.Port, g.logTail(40))
		}
	}
	c.http.CloseIdleConnections()
}

// gateway is one `wsgate gateway` process (and its restarts).
type gateway struct {
	c     *gwCluster
	ID    string
	Port  int
	extra map[string]string
	bin   string // the binary; empty: wsgateBin

	mu   sync.Mutex
	runs []run // every start, the last one current
}

// run is one start of a gateway: a heading for the log, and the process.
type run struct {
	head string
	*proc.Proc
}

// startNode starts a gateway with the given id and per-node settings and
// waits until /readyz answers 200.
func (c *gwCluster) startNode(id string, extra map[string]string) *gateway {
	c.t.Helper()
	g := c.startNodeNoFatal(id, extra)
	if g == nil {
		c.t.FailNow()
	}
	return g
}

// startNodes starts n nodes named prefix1..prefixN (in parallel).
func (c *gwCluster) startNodes(prefix string, n int, extra map[string]string) []*gateway {
	c.t.Helper()
	out := make([]*gateway, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c.startNodeNoFatal(fmt.Sprintf("%s%d", prefix, i+1), extra)
		}()
	}
	wg.Wait()
	for i, g := range out {
		if g == nil {
			c.t.Fatalf("gateway %s%d did not start", prefix, i+1)
		}
	}
	return out
}

func (c *gwCluster) startNodeNoFatal(id string, extra map[string]string) *gateway {
	return c.startBinNoFatal(id, extra, "")
}

// startBinNoFatal is startNodeNoFatal running binary bin (empty: the
// tree's).
func (c *gwCluster) startBinNoFatal(id string, extra map[string]string, bin string) *gateway {
	g := &gateway{c: c, ID: id, extra: extra, bin: bin}
	var err error
	for range 5 {
		g.Port = freePort(c.t)
		if err = g.start(); err == nil {
			break
		}
		if !strings.Contains(g.logTail(5), "address already in use") {
			break
		}
	}
	if err != nil {
		c.t.Errorf("gateway %s: %v\n%s", id, err, g.logTail(30))
		return nil
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, g)
	c.mu.Unlock()
	if err := g.pollReady(15 * time.Second); err != nil {
		c.t.Errorf("gateway %s: %v\n%s", id, err, g.logTail(30))
		return nil
	}
	return g
}

// env is the process environment: the parent's without any WSGATE_
// variable, then the cluster's and the node's settings.
func (g *gateway) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WSGATE_") {
			env = append(env, kv)
		}
	}
	set := map[string]string{
		"WSGATE_LISTEN":        "127.0.0.1:" + strconv.Itoa(g.Port),
		"WSGATE_NODE_ID":       g.ID,
		"WSGATE_ADVERTISE_URL": g.WS(),
		"WSGATE_REDIS_URL":     g.c.redisURL,
		"WSGATE_REDIS_PREFIX":  g.c.prefix,
		"WSGATE_API_KEY":       apiKey,
		"WSGATE_JWT_SECRET":    jwtSecret,
	}
	for k, v := range g.c.settings {
		set[k] = v
	}
	for k, v := range g.extra {
		set[k] = v
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

// start runs the process (on g.Port); it does not wait for readiness.
func (g *gateway) start() error {
	head := fmt.Sprintf("==== start %s on port %d at %s\n", g.ID, g.Port, time.Now().Format(time.RFC3339Nano))
	bin := wsgateBin
	if g.bin != "" {
		bin = g.bin
	}
	cmd := exec.Command(bin, "gateway")
	cmd.Env = g.env()
	p, err := proc.TryStart(g.c.t, "gateway "+g.ID, cmd)
	if err != nil {
		return err
	}
	p.OnFailure(nil) // the cluster's cleanup logs every run
	g.mu.Lock()
	g.runs = append(g.runs, run{head, p})
	g.mu.Unlock()
	// A start that fails (port taken, bad setting) exits at once; wait
	// for /healthz or the exit.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if p.Exited() {
			return fmt.Errorf("exited with status %d at start", p.ExitCode())
		}
		if st, _, err := g.get("/healthz"); err == nil && st == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			g.Kill()
			return errors.New("no /healthz within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart starts the process again on the same port and id after it
// exited, and waits for readiness.
func (g *gateway) Restart(t testing.TB) {
	t.Helper()
	if g.Alive() {
		t.Fatalf("restart of running gateway %s", g.ID)
	}
	var err error
	for range 20 {
		if err = g.start(); err == nil {
			break
		}
		if !strings.Contains(g.logTail(5), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond) // the old socket is still being torn down
	}
	if err != nil {
		t.Fatalf("restart of gateway %s: %v\n%s", g.ID, err, g.logTail(30))
	}
	g.waitReady(t, 15*time.Second)
}

func (g *gateway) WS() string   { return "ws://127.0.0.1:" + strconv.Itoa(g.Port) + "/ws" }
func (g *gateway) HTTP() string { return "http://127.0.0.1:" + strconv.Itoa(g.Port) }

// current is the process of the last start (nil before the first).
func (g *gateway) current() *proc.Proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.runs) == 0 {
		return nil
	}
	return g.runs[len(g.runs)-1].Proc
}

// Alive reports whether the process runs.
func (g *gateway) Alive() bool {
	p := g.current()
	return p != nil && !p.Exited()
}

// Kill sends SIGKILL and waits for the exit.
func (g *gateway) Kill() {
	if p := g.current(); p != nil {
		p.Kill()
	}
}

// WaitExit waits for the process to exit; false on timeout.
func (g *gateway) WaitExit(d time.Duration) bool {
	p := g.current()
	return p == nil || p.Wait(d)
}

// ExitCode of the last run (valid after it exited; -1 for a signal).
func (g *gateway) ExitCode() int { return g.current().ExitCode() }

func (g *gateway) logTail(lines int) string { return proc.LastLines(g.log(), lines) }

// log is the whole log of the node's runs.
func (g *gateway) log() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var b strings.Builder
	for _, r := range g.runs {
		b.WriteString(r.head)
		b.WriteString(r.Output())
	}
	return b.String()
}

func (g *gateway) pollReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		st, body, err := g.get("/readyz")
		if err == nil && st == http.StatusOK {
			return nil
		}
		if !g.Alive() {
			return fmt.Errorf("gateway %s exited (status %d) before ready", g.ID, g.ExitCode())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway %s not ready after %s: %d %s %v", g.ID, d, st, body, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (g *gateway) waitReady(t testing.TB, d time.Duration) {
	t.Helper()
	if err := g.pollReady(d); err != nil {
		t.Fatalf("%v\n%s", err, g.logTail(30))
	}
}

// readyStatus is the status of GET /readyz (0 when it does not answer).
func (g *gateway) readyStatus() int {
	st, _, err := g.get("/readyz")
	if err != nil {
		return 0
	}
	return st
}

// get is an unauthenticated GET on the node.
func (g *gateway) get(path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.HTTP()+path, nil)
	resp, err := g.c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// ---- server API ----

// call does an authenticated API request and returns status and body.
func (g *gateway) call(method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.HTTP()+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// mustCall fails the test unless the call answers want.
func (g *gateway) mustCall(t testing.TB, want int, method, path string, body any) []byte {
	t.Helper()
	st, b, err := g.call(method, path, body)
	if err != nil || st != want {
		t.Fatalf("%s %s on %s: status %d (want %d) %s %v", method, path, g.ID, st, want, b, err)
	}
	return b
}

type target struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`
}

type publishBody struct {
	Target   target `json:"target"`
	Event    string `json:"event"`
	Data     any    `json:"data,omitempty"`
	Reliable bool   `json:"reliable,omitempty"`
	Class    string `json:"class,omitempty"`
}

type publishAnswer struct {
	ID     string `json:"id"`
	Seq    int64  `json:"seq"`
	Online *bool  `json:"online"`
}

// publish posts one message; status 0 means no HTTP answer.
func (g *gateway) publish(b publishBody) (publishAnswer, int, error) {
	var a publishAnswer
	st, body, err := g.call(http.MethodPost, "/api/v1/publish", b)
	if err != nil {
		return a, 0, err
	}
	if st != http.StatusOK {
		return a, st, fmt.Errorf("publish on %s: %d %s", g.ID, st, body)
	}
	return a, st, json.Unmarshal(body, &a)
}

func (g *gateway) mustPublish(t testing.TB, b publishBody) publishAnswer {
	t.Helper()
	a, _, err := g.publish(b)
	if err != nil {
		t.Fatalf("publish %+v on %s: %v", b, g.ID, err)
	}
	return a
}

func toUser(user, event string) publishBody {
	return publishBody{Target: target{Type: "user", ID: user}, Event: event}
}
func toRoom(room, event string) publishBody {
	return publishBody{Target: target{Type: "room", ID: room}, Event: event}
}
func toAll(event string) publishBody {
	return publishBody{Target: target{Type: "broadcast"}, Event: event}
}

type presenceConn struct {
	ConnID      string `json:"conn_id"`
	Node        string `json:"node"`
	ConnectedAt int64  `json:"connected_at"`
	Device      string `json:"device"`
}

type presenceAnswer struct {
	Online      bool           `json:"online"`
	Connections []presenceConn `json:"connections"`
}

func (g *gateway) presence(user string) (presenceAnswer, error) {
	var p presenceAnswer
	st, b, err := g.call(http.MethodGet, "/api/v1/users/"+user+"/presence", nil)
	if err != nil {
		return p, err
	}
	if st != http.StatusOK {
		return p, fmt.Errorf("presence on %s: %d %s", g.ID, st, b)
	}
	return p, json.Unmarshal(b, &p)
}

type nodeEntry struct {
	ID             string `json:"id"`
	URL            string `json:"url"`
	Status         string `json:"status"`
	Connections    int    `json:"connections"`
	Weight         int    `json:"weight"`
	HeartbeatAgeMS int64  `json:"heartbeat_age_ms"`
}

func (g *gateway) nodes() ([]nodeEntry, error) {
	var a struct {
		Nodes []nodeEntry `json:"nodes"`
	}
	st, b, err := g.call(http.MethodGet, "/api/v1/nodes", nil)
	if err != nil {
		return nil, err
	}
	if st != http.StatusOK {
		return nil, fmt.Errorf("nodes on %s: %d %s", g.ID, st, b)
	}
	return a.Nodes, json.Unmarshal(b, &a)
}

func nodeIDs(ns []nodeEntry) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.ID
	}
	return out
}

// ---- metrics ----

// metrics scrapes /metrics into series -> value, the series written as in
// the exposition (`name{label="v"}`).
func (g *gateway) metrics() (map[string]float64, error) {
	st, b, err := g.get("/metrics")
	if err != nil {
		return nil, err
	}
	if st != http.StatusOK {
		return nil, fmt.Errorf("/metrics on %s: %d", g.ID, st)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out, nil
}

// metric reads one series (0 when absent: a counter never incremented).
func (g *gateway) metric(t testing.TB, series string) float64 {
	t.Helper()
	m, err := g.metrics()
	if err != nil {
		t.Fatalf("metrics of %s: %v", g.ID, err)
	}
	return m[series]
}

const busMessages = `wsgate_bus_received_total{kind="message"}`

// ---- tokens ----

// token mints an HS256 token for user, valid for an hour, with extra
// claims (rooms, pub, info).
func token(t testing.TB, user string, extra map[string]any) string {
	t.Helper()
	claims := jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for k, v := range extra {
		claims[k] = v
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ---- raw connections ----

// probe is one raw connection (client.Dial) whose frames a goroutine reads
// into channels: messages, replies, and the rest.
type probe struct {
	t       testing.TB
	user    string
	node    string
	conn    *client.Conn
	w       *client.Welcome
	msgs    chan *protocol.ServerFrame
	replies chan *protocol.ServerFrame
	other   chan *protocol.ServerFrame
	done    chan struct{}
	code    atomic.Int64 // close code once done; 1006 when it broke
	ids     atomic.Uint64
}

// dial opens a probe for user on g with the given extra claims.
func dial(t testing.TB, g *gateway, user string, claims map[string]any) *probe {
	t.Helper()
	p, err := dialErr(t, g, user, claims, nil)
	if err != nil {
		t.Fatalf("dial %s as %s: %v", g.ID, user, err)
	}
	return p
}

func dialErr(t testing.TB, g *gateway, user string, claims map[string]any, since *int64) (*probe, error) {
	return dialWith(t, g, user, client.DialOptions{Token: token(t, user, claims), Since: since})
}

// dialWith opens a probe for user on g with the given dial options.
func dialWith(t testing.TB, g *gateway, user string, opts client.DialOptions) (*probe, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, w, err := client.Dial(ctx, g.WS(), opts)
	if err != nil {
		return nil, err
	}
	p := &probe{
		t: t, user: user, node: w.Node, conn: conn, w: w,
		msgs:    make(chan *protocol.ServerFrame, 10000),
		replies: make(chan *protocol.ServerFrame, 100),
		other:   make(chan *protocol.ServerFrame, 100),
		done:    make(chan struct{}),
	}
	go p.read()
	t.Cleanup(p.Close)
	return p, nil
}

func (p *probe) read() {
	defer close(p.done)
	for {
		f, err := p.conn.ReadFrame()
		if err != nil {
			if errors.Is(err, client.ErrBadFrame) {
				continue
			}
			var ce *client.CloseError
			if errors.As(err, &ce) {
				p.code.Store(int64(ce.Code))
			} else {
				p.code.Store(1006)
			}
			return
		}
		var ch chan *protocol.ServerFrame
		switch f.Type {
		case protocol.TypeMessage:
			ch = p.msgs
		case protocol.TypeReply:
			ch = p.replies
		default:
			ch = p.other
		}
		select {
		case ch <- f:
		default:
			p.t.Errorf("probe %s: frame channel full, %s dropped", p.user, f.Type)
		}
	}
}

// Close closes the connection politely and waits for the reader.
func (p *probe) Close() {
	_ = p.conn.WriteClose(protocol.CloseNormal, "")
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
	}
	_ = p.conn.Close()
	<-p.done
}

// next returns the next message, failing the test after d.
func (p *probe) next(d time.Duration) *protocol.ServerFrame {
	p.t.Helper()
	select {
	case f := <-p.msgs:
		return f
	case <-p.done:
		// A message that came before the close is still in the channel.
		select {
		case f := <-p.msgs:
			return f
		default:
		}
		p.t.Fatalf("probe %s on %s: closed (%d) while waiting for a message", p.user, p.node, p.code.Load())
	case <-time.After(d):
		p.t.Fatalf("probe %s on %s: no message within %s", p.user, p.node, d)
	}
	return nil
}

// expect fails unless the next message has the event.
func (p *probe) expect(event string) *protocol.ServerFrame {
	p.t.Helper()
	f := p.next(5 * time.Second)
	if f.Event != event {
		p.t.Fatalf("probe %s on %s: got message %q (%s), want %q", p.user, p.node, f.Event, f.Data, event)
	}
	return f
}

// request sends a frame with a fresh id and returns its reply.
func (p *probe) request(f protocol.ClientFrame) *protocol.ServerFrame {
	p.t.Helper()
	f.ID = "r" + strconv.FormatUint(p.ids.Add(1), 10)
	if err := p.conn.WriteFrame(&f); err != nil {
		p.t.Fatalf("probe %s: write %s: %v", p.user, f.Type, err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-p.replies:
			if r.ID == f.ID {
				return r
			}
		case <-deadline:
			p.t.Fatalf("probe %s: no reply to %s", p.user, f.Type)
		}
	}
}

// waitClosed returns the close code, failing after d.
func (p *probe) waitClosed(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return int(p.code.Load())
	case <-time.After(d):
		p.t.Fatalf("probe %s on %s: still open after %s", p.user, p.node, d)
	}
	return 0
}

func (p *probe) isClosed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ---- helpers ----

// eventually polls cond until it holds, failing after d with its last
// description.
func eventually(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last: %s", what, d, state)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// usedPorts are the ports handed out in this run: a gateway restarted on
// its port must find it free, so no other gateway gets it.
var usedPorts = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// freePort returns a loopback port that was free a moment ago, from
// [12000, 20000): below both Linux's ephemeral range and the ports of
// redistest (20000-30000, cluster bus +10000).
func freePort(t testing.TB) int {
	t.Helper()
	usedPorts.Lock()
	defer usedPorts.Unlock()
	for range 1000 {
		p := 12000 + rand.IntN(8000)
		if usedPorts.m[p] {
			continue
		}
		usedPorts.m[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p
	}
	t.Fatal("no free port")
	return 0
}

// testAllocator is an allocator endpoint the test steers: pick names the
// node URL for each GET /v1/allocate.
type testAllocator struct {
	srv  *httptest.Server
	mu   sync.Mutex
	pick func() (string, error)
}

func newTestAllocator(t testing.TB, pick func() (string, error)) *testAllocator {
	a := &testAllocator{pick: pick}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		pick := a.pick
		a.mu.Unlock()
		url, err := pick()
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"error":{"code":"unavailable","message":%q}}`, err.Error())
			return
		}
		fmt.Fprintf(w, `{"node":"x","url":%q}`, url)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *testAllocator) set(pick func() (string, error)) {
	a.mu.Lock()
	a.pick = pick
	a.mu.Unlock()
}

// forwardTo returns a pick that asks g's /v1/allocate.
func forwardTo(g *gateway) func() (string, error) {
	return func() (string, error) {
		st, b, err := g.get("/v1/allocate")
		if err != nil {
			return "", err
		}
		if st != http.StatusOK {
			return "", fmt.Errorf("allocate on %s: %d %s", g.ID, st, b)
		}
		var a struct {
			URL string `json:"url"`
		}
		return a.URL, json.Unmarshal(b, &a)
	}
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

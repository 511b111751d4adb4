package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// LocalConfig configures the local actuator.
type LocalConfig struct {
	// Binary is the wsgate executable to start (default: this executable).
	Binary string
	// Host is the address the nodes listen on (default 127.0.0.1).
	Host string
	// BasePort is the port of the first node; the others take the next
	// free ports (at most MaxNodes+32 ports are tried).
	BasePort int
	MaxNodes int
	// The cluster settings every node gets through its environment.
	RedisURL, RedisPrefix, APIKey, JWTSecret string
	HeartbeatInterval                        time.Duration
	// Env is the base environment of the nodes (default os.Environ());
	// WSGATE_CONFIG and the per-node settings are replaced.
	Env []string
	// Stdout and Stderr receive the nodes' output (default: this
	// process's stderr, where the nodes' JSON log lines join ours).
	Stdout, Stderr io.Writer
	// StartTimeout bounds the wait for a new node's /healthz (default 15s).
	StartTimeout time.Duration
	HTTP         *http.Client
	Logger       *slog.Logger
}

// Local starts `wsgate gateway` processes on this machine (node id
// local-PORT, listening on Host:PORT) and drains them for a scale-in: for
// demos and tests. Close drains and stops every process it started.
type Local struct {
	cfg LocalConfig

	mu     sync.Mutex
	procs  map[string]*localProc // by node id
	closed bool
}

type localProc struct {
	id   string
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

var _ Actuator = (*Local)(nil)

// NewLocal checks cfg and fills its defaults.
func NewLocal(cfg LocalConfig) (*Local, error) {
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local actuator: cannot find this executable (set WSGATE_LOCAL_BINARY): %w", err)
		}
		cfg.Binary = exe
	}
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, fmt.Errorf("local actuator: WSGATE_LOCAL_BINARY: %w", err)
	}
	if cfg.RedisURL == "" {
		return nil, errors.New("local actuator: the nodes need WSGATE_REDIS_URL")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.BasePort < 1 || cfg.BasePort > 65535 {
		return nil, fmt.Errorf("local actuator: WSGATE_LOCAL_BASE_PORT (%d) out of range", cfg.BasePort)
	}
	if cfg.MaxNodes < 1 {
		cfg.MaxNodes = 1
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stderr
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 15 * time.Second
	}
	if cfg.HTTP == nil {
		cfg.HTTP = newHTTPClient()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Local{cfg: cfg, procs: map[string]*localProc{}}, nil
}

// Name implements Actuator.
func (l *Local) Name() string { return "local" }

// Running lists the node ids of the processes that are still running.
func (l *Local) Running() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id := range l.procs {
		ids = append(ids, id)
	}
	return ids
}

// ScaleOut starts desired - current nodes, minus the processes it started
// that have not registered yet, and waits until each answers /healthz.
func (l *Local) ScaleOut(ctx context.Context, desired int, nodes []cluster.NodeInfo) error {
	seen := map[string]bool{}
	for _, n := range nodes {
		seen[n.ID] = true
	}
	l.mu.Lock()
	starting := 0
	for id := range l.procs {
		if !seen[id] {
			starting++
		}
	}
	l.mu.Unlock()
	need := desired - countCapacity(nodes) - starting
	if starting > 0 {
		l.cfg.Logger.Info("local actuator: nodes still starting", "starting", starting)
	}
	for range need {
		if err := l.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// ScaleIn drains the node through the API when an API key is set, else
// (a node this actuator started) with SIGTERM; the node exits by itself
// when the drain is over.
func (l *Local) ScaleIn(ctx context.Context, node cluster.NodeInfo, _ int) error {
	l.mu.Lock()
	p := l.procs[node.ID]
	l.mu.Unlock()
	if l.cfg.APIKey != "" {
		err := drainNode(ctx, l.cfg.HTTP, node, l.cfg.APIKey)
		if err == nil {
			l.cfg.Logger.Info("local actuator: node asked to drain", "node", node.ID)
			return nil
		}
		if p == nil {
			return fmt.Errorf("local actuator: %w", err)
		}
		l.cfg.Logger.Warn("local actuator: drain through the API failed; sending SIGTERM", "node", node.ID, "err", err.Error())
	}
	if p == nil {
		return fmt.Errorf("local actuator: node %s was not started by this autoscaler and WSGATE_API_KEY is not set: cannot drain it", node.ID)
	}
	l.cfg.Logger.Info("local actuator: node sent SIGTERM to drain", "node", node.ID, "pid", p.cmd.Process.Pid)
	return p.cmd.Process.Signal(syscall.SIGTERM)
}

// Close drains every process it started (SIGTERM), waits until they exit
// or ctx ends, then kills what is left.
func (l *Local) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	procs := make([]*localProc, 0, len(l.procs))
	for _, p := range l.procs {
		procs = append(procs, p)
	}
	l.mu.Unlock()
	for _, p := range procs {
		l.cfg.Logger.Info("local actuator: stopping node", "node", p.id, "pid", p.cmd.Process.Pid)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	var err error
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			l.cfg.Logger.Warn("local actuator: node did not stop in time; killing it", "node", p.id, "pid", p.cmd.Process.Pid)
			_ = p.cmd.Process.Kill()
			<-p.done
			err = fmt.Errorf("local actuator: node %s killed after %w", p.id, ctx.Err())
		}
	}
	return err
}

// start starts one node on the next free port and waits for its /healthz.
func (l *Local) start(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errors.New("local actuator: closed")
	}
	used := map[int]bool{}
	for _, p := range l.procs {
		used[p.port] = true
	}
	l.mu.Unlock()
	port := 0
	for p := l.cfg.BasePort; p < l.cfg.BasePort+l.cfg.MaxNodes+32 && p <= 65535; p++ {
		if used[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(l.cfg.Host, strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		port = p
		break
	}
	if port == 0 {
		return fmt.Errorf("local actuator: no free port from %d", l.cfg.BasePort)
	}
	id := "local-" + strconv.Itoa(port)
	listen := net.JoinHostPort(l.cfg.Host, strconv.Itoa(port))
	cmd := exec.Command(l.cfg.Binary, "gateway")
	cmd.Env = l.env(id, listen)
	cmd.Stdout, cmd.Stderr = l.cfg.Stdout, l.cfg.Stderr
	// Own process group: a terminal's Ctrl-C reaches the autoscaler, which
	// drains the nodes itself. If the autoscaler dies, the nodes get
	// SIGTERM (and drain) instead of running on unattended.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("local actuator: start %s: %w", l.cfg.Binary, err)
	}
	p := &localProc{id: id, port: port, cmd: cmd, done: make(chan struct{})}
	l.mu.Lock()
	l.procs[id] = p
	l.mu.Unlock()
	l.cfg.Logger.Info("local actuator: node started", "node", id, "listen", listen, "pid", cmd.Process.Pid)
	go l.reap(p)

	deadline := time.Now().Add(l.cfg.StartTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("local actuator: node %s exited at start: %v", id, cmd.ProcessState)
		default:
		}
		if l.healthy(ctx, "http://"+listen+"/healthz") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("local actuator: node %s does not answer /healthz after %s", id, l.cfg.StartTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (l *Local) healthy(ctx context.Context, u string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	resp, err := l.cfg.HTTP.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (l *Local) reap(p *localProc) {
	err := p.cmd.Wait()
	l.mu.Lock()
	delete(l.procs, p.id)
	l.mu.Unlock()
	close(p.done)
	code := p.cmd.ProcessState.ExitCode()
	if err != nil && code != 0 {
		l.cfg.Logger.Warn("local actuator: node exited", "node", p.id, "status", p.cmd.ProcessState.String())
		return
	}
	l.cfg.Logger.Info("local actuator: node exited", "node", p.id, "status", code)
}

// env is the node's environment: the base one without WSGATE_CONFIG (an
// autoscaler's file is no gateway file) and without the settings set here.
func (l *Local) env(id, listen string) []string {
	own := map[string]string{
		"WSGATE_NODE_ID":            id,
		"WSGATE_LISTEN":             listen,
		"WSGATE_REDIS_URL":          l.cfg.RedisURL,
		"WSGATE_REDIS_PREFIX":       l.cfg.RedisPrefix,
		"WSGATE_API_KEY":            l.cfg.APIKey,
		"WSGATE_JWT_SECRET":         l.cfg.JWTSecret,
		"WSGATE_HEARTBEAT_INTERVAL": l.cfg.HeartbeatInterval.String(),
	}
	if l.cfg.JWTSecret == "" {
		delete(own, "WSGATE_JWT_SECRET") // keep one from the environment
	}
	if l.cfg.HeartbeatInterval <= 0 {
		delete(own, "WSGATE_HEARTBEAT_INTERVAL")
	}
	var env []string
	for _, kv := range l.cfg.Env {
		k, _, _ := strings.Cut(kv, "=")
		if _, set := own[k]; set || k == "WSGATE_CONFIG" || k == "WSGATE_ADVERTISE_URL" {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range own {
		env = append(env, k+"="+v)
	}
	return env
}

// Package redistest starts real redis-server processes for tests: a
// standalone server, a three-master Redis Cluster, or a master, a replica
// and a sentinel. Each runs on free loopback ports (never 6379 or 26379) in
// the test's temporary directory and is killed at the test's cleanup.
// Tests call the constructors directly; no TestMain is needed.
//
// The binaries are redis-server and redis-cli from PATH (Debian package
// redis-server; sentinel mode is `redis-server --sentinel`), or the paths in
// REDIS_SERVER and REDIS_CLI. When they are missing the test fails, naming
// what to install: no test is skipped for it.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/wsgate/wsgate/internal/testutil/proc"
)

// readyTimeout bounds every wait of this package for a server.
const readyTimeout = 15 * time.Second

// Options configure Standalone.
type Options struct {
	// AOF turns on the append-only file (appendfsync everysec), so that
	// Stop and Start keep the data. Without it a restart starts empty.
	AOF bool
	// AppendFsync is the appendfsync policy of the AOF (default
	// "everysec"); "always" keeps every acknowledged write across a crash.
	AppendFsync string
}

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	Port int
	Dir  string
	args []string

	mu     sync.Mutex
	run    *proc.Proc // the process of the last start
	client *redis.Client
}

// Standalone starts a standalone server and stops it at t's cleanup.
func Standalone(t testing.TB, opt Options) *Server {
	t.Helper()
	aof := "no"
	if opt.AOF {
		aof = "yes"
	}
	fsync := opt.AppendFsync
	if fsync == "" {
		fsync = "everysec"
	}
	return startServer(t, t.TempDir(), false, "--appendonly", aof, "--appendfsync", fsync)
}

// startServer picks a free port and starts a server on it, trying other
// ports when the chosen one turns out to be taken. cluster reserves
// port+10000 (the cluster bus) as well.
func startServer(t testing.TB, dir string, cluster bool, extra ...string) *Server {
	t.Helper()
	return startWith(t, dir, cluster, func(port int) []string {
		return append(baseArgs(port, dir), extra...)
	})
}

func baseArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--save", "",
		"--logfile", "redis.log",
	}
}

// startWith starts redis-server with the arguments args gives for a port.
func startWith(t testing.TB, dir string, cluster bool, args func(port int) []string) *Server {
	t.Helper()
	bin := binary(t, "REDIS_SERVER", "redis-server")
	var lastErr error
	for range 10 {
		port := freePort(t, cluster)
		s := &Server{t: t, Port: port, Dir: dir, args: args(port)}
		err := s.start(bin)
		if err == nil {
			t.Cleanup(s.cleanup)
			return s
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatalf("redistest: cannot start redis-server: %v", lastErr)
	return nil
}

var errPortTaken = errors.New("port taken")

func (s *Server) start(bin string) error {
	cmd := exec.Command(bin, s.args...)
	cmd.Dir = s.Dir
	p, err := proc.TryStart(s.t, "redis-server", cmd)
	if err != nil {
		return err
	}
	p.OnFailure(nil) // cleanup logs redis.log
	s.mu.Lock()
	s.run = p
	s.mu.Unlock()
	if err := waitPing(s.Addr(), p.Done()); err != nil {
		p.Signal(syscall.SIGKILL)
		log := s.Log()
		if bytes.Contains([]byte(log), []byte("Address already in use")) {
			return fmt.Errorf("%w: %d", errPortTaken, s.Port)
		}
		return fmt.Errorf("%v; log:\n%s", err, tail(log, 2000))
	}
	return nil
}

// Addr is "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the standalone URL of the server, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Log returns the server's log file.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return string(b)
}

// Start starts the server again, on the same port and directory, after
// Stop or Kill, and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	if !s.current().Exited() {
		s.t.Fatalf("redistest: Start of a running server on %d", s.Port)
	}
	if err := s.start(binary(s.t, "REDIS_SERVER", "redis-server")); err != nil {
		s.t.Fatalf("redistest: restart on %d: %v", s.Port, err)
	}
}

// Stop shuts the server down (SIGTERM: an AOF is flushed) and waits for it.
func (s *Server) Stop() {
	s.t.Helper()
	p := s.current()
	p.Signal(syscall.SIGCONT) // a paused server cannot handle SIGTERM
	if !p.Stop(readyTimeout) {
		p.Kill()
	}
}

// Kill kills the server with SIGKILL (nothing is flushed) and waits for it.
func (s *Server) Kill() { s.current().Kill() }

// Pause stops the process (SIGSTOP): connections stay open and nothing
// answers, like a server that hangs. Resume continues it.
func (s *Server) Pause()  { s.current().Pause() }
func (s *Server) Resume() { s.current().Signal(syscall.SIGCONT) }

// KillClients closes the server's client connections of one type
// (CLIENT KILL TYPE normal|pubsub|replica|master) and returns how many
// it closed. A "normal" kill closes the connection of Client too (it
// reconnects on its next command).
func (s *Server) KillClients(typ string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Client().Do(ctx, "CLIENT", "KILL", "TYPE", typ).Int64()
}

// Flush empties every database of this server (it is always one this
// package started).
func (s *Server) Flush() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := s.Client().FlushAll(ctx).Err(); err != nil {
		s.t.Fatalf("redistest: FLUSHALL on %d: %v", s.Port, err)
	}
}

// Client returns a client of this server, closed at the test's cleanup.
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = newClient(s.Addr())
	}
	return s.client
}

func (s *Server) current() *proc.Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run
}

func (s *Server) cleanup() {
	s.mu.Lock()
	c := s.client
	s.client = nil
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	s.Resume()
	s.Kill()
	if s.t.Failed() {
		s.t.Logf("redistest: log of the server on %d:\n%s", s.Port, tail(s.Log(), 3000))
	}
}

// newClient is a go-redis client with short timeouts for the helpers.
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		DialTimeout:              time.Second,
		ReadTimeout:              2 * time.Second,
		WriteTimeout:             2 * time.Second,
		MaxRetries:               -1,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// waitPing polls PING until it answers, the process exits, or readyTimeout.
func waitPing(addr string, exited <-chan struct{}) error {
	c := newClient(addr)
	defer c.Close()
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited", addr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s: no PONG after %s: %v", addr, readyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// binary finds a program, failing the test without it.
func binary(t testing.TB, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Fatalf("redistest: %s not found: run `make deps` (the Debian package redis-server), or set %s", name, env)
	return ""
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

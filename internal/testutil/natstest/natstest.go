// Package natstest starts a real nats-server with JetStream (`nats-server
// -js`) for tests, on a free loopback port (never 4222) with its store in
// the test's temporary directory, killed at the test's cleanup.
//
// The binary is nats-server from PATH (Debian package nats-server, see
// scripts/install-test-deps.sh) or the path in NATS_SERVER.
package natstest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/proc"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

const readyTimeout = 15 * time.Second

// Server is one nats-server process with JetStream.
type Server struct {
	t    testing.TB
	Port int
	Dir  string // the JetStream store, kept across Stop and Start

	mu  sync.Mutex
	run *proc.Proc
}

// Start starts a server and stops it at t's cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	var lastErr error
	for range 10 {
		s := &Server{t: t, Port: redistest.FreePort(t), Dir: t.TempDir()}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("natstest: cannot start nats-server: %v", lastErr)
	return nil
}

func (s *Server) start() error {
	bin := os.Getenv("NATS_SERVER")
	if bin == "" {
		p, err := exec.LookPath("nats-server")
		if err != nil {
			s.t.Fatalf("natstest: nats-server not found: run scripts/install-test-deps.sh (Debian package nats-server), or set NATS_SERVER")
		}
		bin = p
	}
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-sd", s.Dir, "-m", "0")
	p, err := proc.TryStart(s.t, "nats-server", cmd)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.run = p
	s.mu.Unlock()
	deadline := time.Now().Add(readyTimeout)
	for !strings.Contains(p.Output(), "Server is ready") {
		if p.Exited() || time.Now().After(deadline) {
			p.Kill()
			return fmt.Errorf("nats-server on %d did not start:\n%s", s.Port, p.Tail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// URL is "nats://127.0.0.1:port".
func (s *Server) URL() string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
}

func (s *Server) current() *proc.Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run
}

// Stop shuts the server down (SIGTERM; the file store keeps what it acked).
func (s *Server) Stop() {
	p := s.current()
	p.Signal(syscall.SIGCONT)
	if !p.Stop(readyTimeout) {
		p.Kill()
	}
}

// Restart starts the server again on the same port and store after Stop.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("natstest: restart: %v", err)
	}
}

// Pause stops the process (SIGSTOP): nothing answers; Resume continues it.
func (s *Server) Pause()  { s.current().Pause() }
func (s *Server) Resume() { s.current().Signal(syscall.SIGCONT) }

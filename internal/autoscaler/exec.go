package autoscaler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// ExecConfig configures the exec actuator.
type ExecConfig struct {
	// Command is a shell command line (run with /bin/sh -c); the
	// arguments are appended: the desired node count for a scale-out,
	// "drain NODE" for a scale-in.
	Command string
	// Timeout bounds one run (default 2m); the command's process group is
	// killed after it.
	Timeout time.Duration
	// APIKey is the gateways' API key. When set, a scale-in first asks
	// the node to drain through its server API, then runs the command.
	APIKey string
	// Env is the command's base environment (default os.Environ()).
	Env    []string
	HTTP   *http.Client
	Logger *slog.Logger
}

// Exec runs a command for every action. The command gets, besides its
// arguments, WSGATE_DESIRED_NODES, WSGATE_CURRENT_NODES and
// WSGATE_SCALE_ACTION (scale_out or scale_in), and for a scale-in
// WSGATE_DRAIN_NODE and WSGATE_DRAIN_NODE_API_URL. A non-zero exit status
// or a timeout is an error.
type Exec struct {
	cfg ExecConfig
	mu  sync.Mutex // one run at a time
}

var _ Actuator = (*Exec)(nil)

// NewExec checks cfg and fills its defaults.
func NewExec(cfg ExecConfig) (*Exec, error) {
	if strings.TrimSpace(cfg.Command) == "" {
		return nil, errors.New("exec actuator: WSGATE_EXEC_COMMAND is empty")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.HTTP == nil {
		cfg.HTTP = newHTTPClient()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Exec{cfg: cfg}, nil
}

// Name implements Actuator.
func (e *Exec) Name() string { return "exec" }

// ScaleOut runs `COMMAND DESIRED`.
func (e *Exec) ScaleOut(ctx context.Context, desired int, nodes []cluster.NodeInfo) error {
	return e.run(ctx, []string{strconv.Itoa(desired)}, []string{
		"WSGATE_SCALE_ACTION=scale_out",
		"WSGATE_DESIRED_NODES=" + strconv.Itoa(desired),
		"WSGATE_CURRENT_NODES=" + strconv.Itoa(countCapacity(nodes)),
	})
}

// ScaleIn drains the node through the API (when an API key is set), then
// runs `COMMAND drain NODE`.
func (e *Exec) ScaleIn(ctx context.Context, node cluster.NodeInfo, desired int) error {
	if e.cfg.APIKey != "" {
		if err := drainNode(ctx, e.cfg.HTTP, node, e.cfg.APIKey); err != nil {
			return fmt.Errorf("exec actuator: %w", err)
		}
		e.cfg.Logger.Info("node asked to drain", "node", node.ID, "api_url", node.APIURL)
	}
	return e.run(ctx, []string{"drain", node.ID}, []string{
		"WSGATE_SCALE_ACTION=scale_in",
		"WSGATE_DESIRED_NODES=" + strconv.Itoa(desired),
		"WSGATE_CURRENT_NODES=" + strconv.Itoa(desired+1),
		"WSGATE_DRAIN_NODE=" + node.ID,
		"WSGATE_DRAIN_NODE_API_URL=" + node.APIURL,
	})
}

// Close implements Actuator; there is nothing to release.
func (e *Exec) Close(context.Context) error { return nil }

// maxOutput is how much of the command's output is kept for the log.
const maxOutput = 4096

func (e *Exec) run(ctx context.Context, args, env []string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	// "$@" appends the arguments without a second round of shell parsing.
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", e.cfg.Command + ` "$@"`, "wsgate-autoscaler"}, args...)...)
	cmd.Env = append(append([]string{}, e.cfg.Env...), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	out := &tailBuffer{max: maxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	line := e.cfg.Command + " " + strings.Join(args, " ")
	log := e.cfg.Logger.With("command", line, "took_ms", took.Milliseconds(), "output", out.String())
	if ctx.Err() == context.DeadlineExceeded {
		log.Error("exec actuator: command timed out")
		return fmt.Errorf("exec actuator: %q timed out after %s (WSGATE_EXEC_TIMEOUT); output: %s", line, e.cfg.Timeout, out.String())
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			log.Error("exec actuator: command failed", "status", ee.ExitCode())
			return fmt.Errorf("exec actuator: %q exited with status %d; output: %s", line, ee.ExitCode(), out.String())
		}
		log.Error("exec actuator: command did not run", "err", err.Error())
		return fmt.Errorf("exec actuator: %q: %w", line, err)
	}
	log.Info("exec actuator: command done")
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(t.b.String())
	if t.cut {
		s = "..." + s
	}
	return s
}

// Package proc runs child processes for tests: their output is kept, they
// never outlive the test binary (Pdeathsig SIGKILL), and each is killed at
// the end of the test that started it, with the end of its output logged
// when that test failed.
//
//	p := proc.Start(t, "wsgate dev", exec.Command(bin, "dev"))
//	...
//	if !p.Stop(10 * time.Second) { // SIGTERM, then wait
//		t.Fatalf("no exit after SIGTERM:\n%s", p.Tail(20))
//	}
//
// A process started again is a new Proc.
package proc

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Buffer collects a process's output; safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Proc is a started child process.
type Proc struct {
	name string
	cmd  *exec.Cmd
	out  Buffer
	done chan struct{} // closed once cmd.Wait returned
	err  error         // what cmd.Wait returned, set before done is closed

	mu     sync.Mutex
	report func() // what the cleanup of a failed test logs
}

// Start starts cmd, failing the test if it cannot. See TryStart.
func Start(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p, err := TryStart(t, name, cmd)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return p
}

// TryStart starts cmd and returns the error if it cannot (so it may be
// called outside the test's goroutine). The process's stdout and stderr go
// to its output, and to cmd.Stdout and cmd.Stderr as well when those are
// set. At t's cleanup the process is killed if it still runs; then, if t
// failed, the last 40 lines of its output are logged as
// "---- last output of <name> ----" (OnFailure changes that).
func TryStart(t testing.TB, name string, cmd *exec.Cmd) (*Proc, error) {
	t.Helper()
	p := &Proc{name: name, cmd: cmd, done: make(chan struct{})}
	p.report = func() {
		t.Helper()
		t.Logf("---- last output of %s ----\n%s", name, p.Tail(40))
	}
	cmd.Stdout = tee(&p.out, cmd.Stdout)
	cmd.Stderr = tee(&p.out, cmd.Stderr)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL // no orphans if the test binary dies
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		t.Helper()
		p.Kill()
		p.mu.Lock()
		report := p.report
		p.mu.Unlock()
		if t.Failed() && report != nil {
			report()
		}
	})
	return p, nil
}

func tee(out *Buffer, w io.Writer) io.Writer {
	if w == nil {
		return out
	}
	return io.MultiWriter(out, w)
}

// OnFailure sets what the cleanup logs when the test failed, instead of
// the last 40 lines: report is called once the process has ended; nil
// logs nothing. Call it before the test ends.
func (p *Proc) OnFailure(report func()) {
	p.mu.Lock()
	p.report = report
	p.mu.Unlock()
}

// Name is the name the process was started with.
func (p *Proc) Name() string { return p.name }

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process (nothing once it ended).
func (p *Proc) Signal(sig os.Signal) { _ = p.cmd.Process.Signal(sig) }

// Pause stops the process (SIGSTOP) and returns once the kernel shows it
// stopped: a signal is delivered asynchronously, and on a loaded machine
// the process may otherwise still answer a request sent right after.
func (p *Proc) Pause() {
	p.Signal(syscall.SIGSTOP)
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(stat)
		if err != nil {
			return // gone, or no /proc: nothing to wait for
		}
		// The state is the field after the command's closing parenthesis.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Wait waits up to d for the process to end and reports whether it did.
func (p *Proc) Wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		return false
	}
}

// Stop sends SIGTERM and waits up to d; it reports whether the process
// ended in time.
func (p *Proc) Stop(d time.Duration) bool {
	p.Signal(syscall.SIGTERM)
	return p.Wait(d)
}

// Kill sends SIGKILL, unless the process has ended, and waits for the end.
func (p *Proc) Kill() {
	if !p.Exited() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Err is what waiting for the process returned (nil for exit status 0),
// or nil while it runs.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// ExitCode is the exit status of the process, or -1 while it runs or when
// a signal ended it.
func (p *Proc) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Output is all the process wrote so far.
func (p *Proc) Output() string { return p.out.String() }

// Tail is the last n lines of the output.
func (p *Proc) Tail(n int) string { return LastLines(p.out.String(), n) }

// LastLines returns the last n lines of s, without the final newline.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

package proc

import (
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOutputAndExit(t *testing.T) {
	var stderr Buffer
	cmd := exec.Command("sh", "-c", "echo one; echo two >&2; echo three; exit 3")
	cmd.Stderr = &stderr
	p := Start(t, "sh", cmd)
	if !p.Wait(10 * time.Second) {
		t.Fatal("sh still runs after 10s")
	}
	if !p.Exited() || p.ExitCode() != 3 || p.Err() == nil {
		t.Errorf("exited %v, code %d, err %v; want true, 3, an error", p.Exited(), p.ExitCode(), p.Err())
	}
	out := p.Output()
	for _, s := range []string{"one\n", "two\n", "three\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("output %q lacks %q", out, s)
		}
	}
	if stderr.String() != "two\n" {
		t.Errorf("cmd.Stderr got %q, want the stderr line too", stderr.String())
	}
	if got := p.Tail(1); got != "three" && got != "two" {
		t.Errorf("Tail(1) = %q", got)
	}
}

func TestStopAndKill(t *testing.T) {
	p := Start(t, "sleep", exec.Command("sleep", "60"))
	if p.Exited() || p.ExitCode() != -1 || p.Err() != nil {
		t.Fatalf("running: exited %v, code %d, err %v", p.Exited(), p.ExitCode(), p.Err())
	}
	if !p.Stop(10 * time.Second) {
		t.Fatal("sleep still runs 10s after SIGTERM")
	}
	if p.ExitCode() != -1 || p.Err() == nil {
		t.Errorf("after SIGTERM: code %d, err %v; want -1 and an error", p.ExitCode(), p.Err())
	}
	select {
	case <-p.Done():
	default:
		t.Error("Done not closed after the exit")
	}

	// A process that ignores SIGTERM is still running after Stop; Kill ends it.
	ready := make(chan struct{})
	cmd := exec.Command("sh", "-c", `trap "" TERM; echo ready; exec sleep 60`)
	cmd.Stdout = &onWrite{f: func() { close(ready) }}
	q := Start(t, "sleep", cmd)
	select {
	case <-ready:
	case <-q.Done():
		t.Fatalf("sh ended: %v\n%s", q.Err(), q.Output())
	}
	if q.Stop(100 * time.Millisecond) {
		t.Fatalf("a process ignoring SIGTERM ended: %v", q.Err())
	}
	q.Kill()
	if !q.Exited() || q.ExitCode() != -1 {
		t.Errorf("after Kill: exited %v, code %d", q.Exited(), q.ExitCode())
	}
	q.Kill() // a second Kill is a no-op
}

func TestLastLines(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 5, "a\nb\nc"},
		{"", 3, ""},
	} {
		if got := LastLines(tc.s, tc.n); got != tc.want {
			t.Errorf("LastLines(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

// onWrite is a writer that calls f at the first write.
type onWrite struct {
	once sync.Once
	f    func()
}

func (w *onWrite) Write(b []byte) (int, error) {
	w.once.Do(w.f)
	return len(b), nil
}

// Package wsgatebin gives tests that run wsgate as a separate process the
// binary (built once per test binary) and free loopback ports.
//
//	func TestMain(m *testing.M) { os.Exit(wsgatebin.Main(m)) }
//	bin := wsgatebin.Path(t)
package wsgatebin

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// Main runs the tests and removes the built binary afterwards.
func Main(m *testing.M) int {
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	return code
}

// Path builds ./cmd/wsgate on first use and returns the binary's path.
func Path(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, err = os.MkdirTemp("", "wsgate-bin-")
		if err != nil {
			return
		}
		path = filepath.Join(dir, "wsgate")
		cmd := exec.Command("go", "build", "-o", path, "github.com/wsgate/wsgate/cmd/wsgate")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, berr := cmd.CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build ./cmd/wsgate: %v\n%s", berr, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Cleanup removes the built binary (for TestMain functions that do not
// use Main, e.g. with goleak.Cleanup).
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

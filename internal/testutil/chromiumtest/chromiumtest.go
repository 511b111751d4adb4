// Package chromiumtest starts headless Chromium for the browser tests:
// where it is, and the flags every test runs it with.
package chromiumtest

import (
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// Path finds Chromium: $WSGATE_CHROMIUM, /usr/bin/chromium, or chromium /
// chromium-browser / google-chrome on PATH. A missing one fails the test
// (`make deps` installs it): browser tests are never skipped.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("WSGATE_CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("Chromium not found: run `make deps` (apt-get install -y chromium) or set WSGATE_CHROMIUM")
	return ""
}

// Options are the allocator options of a headless Chromium with a fresh
// profile, run as root on a machine without a network (no sandbox, no
// background connections), then extra.
func Options(t testing.TB, extra ...chromedp.ExecAllocatorOption) []chromedp.ExecAllocatorOption {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Path(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	return append(opts, extra...)
}

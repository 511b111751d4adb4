package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/chromiumtest"

	"github.com/wsgate/wsgate/internal/testutil/proc"
	"github.com/wsgate/wsgate/internal/testutil/wsgatebin"

	"github.com/chromedp/chromedp"
)

// The browser tests start real processes: the wsgate binary (built once per
// test run), redis-server and Chromium. A missing Chromium or redis-server
// fails the test (`make deps` installs both); none is skipped.

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(wsgatebin.Main(m))
}

// ---- processes ----------------------------------------------------------------

// start runs a process until the test ends (then SIGKILL) and logs the end
// of its output if the test failed.
func start(t *testing.T, name string, env []string, path string, args ...string) *proc.Proc {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	return proc.Start(t, name, cmd)
}

// node is one wsgate process and its HTTP base URL.
type node struct {
	*proc.Proc
	id   string
	port int
	base string // http://127.0.0.1:port
}

// startDev runs `wsgate dev` on a free port, with env added, and waits
// until it is ready.
func startDev(t *testing.T, env ...string) *node {
	t.Helper()
	port := wsgatebin.FreePort(t)
	n := &node{id: "dev1", port: port, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	n.Proc = start(t, "wsgate dev", append([]string{"WSGATE_NODE_ID=" + n.id}, env...), wsgatebin.Path(t), "dev", "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	waitReady(t, n, 20*time.Second)
	return n
}

// startGateway runs `wsgate gateway` with env on the given port.
func startGateway(t *testing.T, id string, port int, env []string) *node {
	t.Helper()
	n := &node{id: id, port: port, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	env = append([]string{
		"WSGATE_NODE_ID=" + id,
		fmt.Sprintf("WSGATE_LISTEN=127.0.0.1:%d", port),
	}, env...)
	n.Proc = start(t, "wsgate gateway "+id, env, wsgatebin.Path(t), "gateway")
	waitReady(t, n, 20*time.Second)
	return n
}

func waitReady(t *testing.T, n *node, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if n.Exited() {
			t.Fatalf("%s exited during start-up: %v\n%s", n.Name(), n.Err(), n.Tail(20))
		}
		res, err := http.Get(n.base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within %v (last error %v)", n.Name(), d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startRedis runs a private redis-server on a free port (never 6379), with
// no persistence, in a temporary directory; it is killed at cleanup.
func startRedis(t *testing.T) (string, *proc.Proc) {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found: run `make deps` (apt-get install -y redis-server)")
	}
	port := wsgatebin.FreePort(t)
	if port == 6379 {
		port = wsgatebin.FreePort(t)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := start(t, "redis-server", nil, path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	deadline := time.Now().Add(10 * time.Second)
	for {
		if redisPing(addr) == nil {
			return addr, p
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer PING", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New("unexpected answer " + line)
	}
	return nil
}

// ---- server API -------------------------------------------------------------

// api calls the server API of n and decodes the JSON answer into out.
func api(t *testing.T, n *node, key, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, n.base+path, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, res.StatusCode, b, err)
		}
	}
	return res.StatusCode
}

// eventually polls cond (a Go-side check such as an API call) until it
// holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---- browser -------------------------------------------------------------------

// newBrowser starts a headless Chromium for the test, with a fresh profile,
// and returns a context whose tab is ready.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := chromiumtest.Options(t, chromedp.WindowSize(1280, 800))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser, without a timeout
		t.Fatalf("start Chromium %s: %v", chromiumtest.Path(t), err)
	}
	return ctx
}

// page is one browser tab (in its own browser context, so its storage is
// its own) with helpers that fail the test.
type page struct {
	t     *testing.T
	name  string
	ctx   context.Context
	close context.CancelFunc // closes the tab
}

// newPage opens a tab in a new browser context of browser and sets a
// 1280x800 viewport.
func newPage(t *testing.T, browser context.Context, name string) *page {
	t.Helper()
	return openTab(t, browser, name, chromedp.WithNewBrowserContext())
}

// newTab opens a tab in browser's default context: tabs opened so share
// their origin's storage and SharedWorkers, as the tabs of one browser do.
func newTab(t *testing.T, browser context.Context, name string) *page {
	t.Helper()
	return openTab(t, browser, name)
}

func openTab(t *testing.T, browser context.Context, name string, opts ...chromedp.ContextOption) *page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, opts...)
	t.Cleanup(cancel)
	// The first Run binds the tab to its context: it must not have a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open tab %s: %v", name, err)
	}
	p := &page{t: t, name: name, ctx: ctx, close: cancel}
	p.do(chromedp.EmulateViewport(1280, 800))
	return p
}

// do runs actions with a 30 s bound.
func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.fail("%v", err)
	}
}

func (p *page) navigate(url string) {
	p.t.Helper()
	p.do(chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("body")))
}

// waitFor polls a JavaScript expression until it is truthy (100 ms period,
// deadline d); the DOM is the source of truth, never a fixed sleep.
func (p *page) waitFor(d time.Duration, what, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, d+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(d)))
	if err != nil {
		p.fail("waiting %v for %s: %v", d, what, err)
	}
}

// eval evaluates expr and decodes its value into T.
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.fail("evaluate %s: %v", expr, err)
	}
	return v
}

func (p *page) click(sel string) {
	p.t.Helper()
	p.do(chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// fill sets the value of an input or textarea.
func (p *page) fill(sel, value string) {
	p.t.Helper()
	p.do(chromedp.SetValue(chromedp.CSS(sel), value, chromedp.NodeVisible))
}

// screenshot writes a full-page PNG of the tab to path.
func (p *page) screenshot(path string) {
	p.t.Helper()
	p.shoot(path, chromedp.FullScreenshot(100))
}

// screenshotViewport writes what the tab's viewport shows (a modal
// dialog with its backdrop) to path.
func (p *page) screenshotViewport(path string) {
	p.t.Helper()
	p.shoot(path, chromedp.CaptureScreenshot())
}

func (p *page) shoot(path string, shot chromedp.Action[[]byte]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, shot)
	if err != nil {
		p.fail("screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("wrote %s (%d bytes)", path, len(buf))
}

// fail stops the test with what the page shows, for the log.
func (p *page) fail(format string, a ...any) {
	p.t.Helper()
	msg := fmt.Sprintf(format, a...)
	ctx, cancel := context.WithTimeout(p.ctx, 3*time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.body && document.body.innerText || '').slice(0, 3000)`))
	if err == nil {
		msg += "\n---- " + p.name + " page text ----\n" + text
	}
	p.t.Fatalf("%s: %s", p.name, msg)
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// docsImage is where the screenshots of docs/ go.
// docsImage is where a screenshot goes: docs/img when
// WSGATE_UPDATE_SCREENSHOTS=1 (to refresh the docs' pictures), else the
// temporary directory, so that a test run leaves the tree as it was.
func docsImage(name string) string {
	if os.Getenv("WSGATE_UPDATE_SCREENSHOTS") != "1" {
		return filepath.Join(os.TempDir(), "wsgate-"+name)
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "docs", "img", name)
}

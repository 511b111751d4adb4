package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/wsgatebin"
)

// blockingProxy stands for a corporate proxy in front of the cluster: it
// answers 403 to every WebSocket upgrade and passes everything else,
// streaming (SSE and HTTP streaming need the bytes as they come), to one
// node of its pool, as a load balancer whose health checks took the
// others out.
type blockingProxy struct {
	ln       net.Listener
	base     string
	upgrades atomic.Int64 // upgrades refused
	mu       sync.Mutex
	pool     *node // where requests go
	page     string
}

func newBlockingProxy(t *testing.T, page string) *blockingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blockingProxy{ln: ln, base: "http://" + ln.Addr().String(), page: page}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

func (p *blockingProxy) route(n *node) {
	p.mu.Lock()
	p.pool = n
	p.mu.Unlock()
}

func (p *blockingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		p.upgrades.Add(1)
		http.Error(w, "WebSocket is not allowed through this proxy", http.StatusForbidden)
		return
	}
	if r.URL.Path == "/fallback" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, p.page)
		return
	}
	p.mu.Lock()
	n := p.pool
	p.mu.Unlock()
	target, _ := url.Parse(n.base)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ServeHTTP(w, r)
}

// fallbackPage connects with the default transports to the proxy's /ws
// and records what the client sees in window globals the test reads.
const fallbackPage = `<!doctype html><html><body><script type="module">
import { Client } from '/client/wsgate.js';
const c = new Client({ url: location.origin + '/ws', user: 'sam', device: 'laptop', ackDelay: 0, minBackoff: 200, maxBackoff: 1000 });
window.c = c;
window.opens = [];
window.msgs = [];
window.results = {};
c.on('open', (o) => window.opens.push(o));
c.on('message', (m) => window.msgs.push(m));
window.run = (name, f) => f().then((v) => { window.results[name] = { ok: true, v }; }, (e) => { window.results[name] = { ok: false, e: String(e.code || e) }; });
c.connect();
</script></body></html>`

// A page behind a proxy that refuses WebSocket upgrades runs the whole
// session over SSE: reliable user and room messages, its own frames (ack,
// join, publish, send, rpc) posted to /v1/conn, a drain of its node and a
// SIGKILL of the next one, each resumed without a hole or a duplicate.
func TestBrowserFallsBackToSSE(t *testing.T) {
	browser := newBrowser(t)
	redis, _ := startRedis(t)
	var sends atomic.Int64
	hooks := http.NewServeMux()
	hooks.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sends.Add(int64(strings.Count(string(b), `"order"`)))
	})
	hooks.HandleFunc("/rpc", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Method string }
		json.NewDecoder(r.Body).Decode(&req)
		fmt.Fprintf(w, `{"result":{"method":%q,"sum":3}}`, req.Method)
	})
	hookLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hookSrv := &http.Server{Handler: hooks}
	go hookSrv.Serve(hookLn)
	t.Cleanup(func() { hookSrv.Close() })

	proxy := newBlockingProxy(t, fallbackPage)
	env := []string{
		"WSGATE_REDIS_URL=redis://" + redis + "/0",
		"WSGATE_REDIS_PREFIX=fallback",
		"WSGATE_API_KEY=" + apiKey,
		"WSGATE_AUTH_INSECURE=true",
		"WSGATE_ALLOWED_ORIGINS=" + proxy.base,
		// Every node is reached through the proxy: redirects name it.
		"WSGATE_ADVERTISE_URL=ws://" + proxy.ln.Addr().String() + "/ws",
		"WSGATE_UPSTREAM_URL=http://" + hookLn.Addr().String() + "/hook",
		"WSGATE_RPC_URL=http://" + hookLn.Addr().String() + "/rpc",
		"WSGATE_DRAIN_TIMEOUT=30s",
	}
	n1 := startGateway(t, "f1", wsgatebin.FreePort(t), env)
	n2 := startGateway(t, "f2", wsgatebin.FreePort(t), env)
	proxy.route(n1)

	p := newPage(t, browser, "behind a proxy")
	p.navigate(proxy.base + "/fallback")
	p.waitFor(20*time.Second, "the connection open over SSE", `window.opens && window.opens.length === 1`)
	if tr := eval[string](p, `window.opens[0].transport`); tr != "sse" {
		t.Fatalf("opened over %q, want sse", tr)
	}
	if proxy.upgrades.Load() == 0 {
		t.Fatal("the client never tried WebSocket")
	}
	// Its frames through POST /v1/conn: join, publish, send, rpc, ping.
	eval[any](p, `run('join', () => c.join('news'))`)
	p.waitFor(10*time.Second, "the join's reply", `window.results.join`)
	eval[any](p, `run('publish', () => c.publish('room:news', 'chat', {text: 'from the page'}))`)
	eval[any](p, `run('send', () => c.send('order', {n: 1}))`)
	eval[any](p, `run('rpc', () => c.rpc('sum', [1, 2]))`)
	eval[any](p, `run('ping', () => c.ping())`)
	p.waitFor(15*time.Second, "the replies", `['publish', 'send', 'rpc', 'ping'].every((k) => window.results[k])`)
	if got := eval[string](p, `JSON.stringify(window.results)`); strings.Contains(got, `"ok":false`) {
		t.Fatalf("a request over POST failed: %s", got)
	}
	if got := eval[float64](p, `window.results.rpc.v.sum`); got != 3 {
		t.Fatalf("rpc result %v", got)
	}
	p.waitFor(10*time.Second, "its own room message", `window.msgs.some((m) => m.event === 'chat' && m.data.text === 'from the page')`)
	eventually(t, 10*time.Second, "the send at the webhook", func() bool { return sends.Load() >= 1 })

	var want []string
	publish := func(n *node, i int) {
		t.Helper()
		text := fmt.Sprintf("u%d", i)
		publishReliable(t, n, "sam", text)
		var res struct{ Seq int64 }
		body := map[string]any{"target": map[string]string{"type": "room", "id": "news"}, "event": "notice", "data": map[string]string{"text": fmt.Sprintf("r%d", i)}, "reliable": true}
		if code := api(t, n, apiKey, "POST", "/api/v1/publish", body, &res); code != 200 || res.Seq == 0 {
			t.Fatalf("reliable room publish r%d: %d seq %d", i, code, res.Seq)
		}
		want = append(want, text, fmt.Sprintf("r%d", i))
	}
	for i := 1; i <= 3; i++ {
		publish(n1, i)
	}
	p.waitFor(15*time.Second, "u3 and r3", `window.msgs.some((m) => m.data.text === 'r3') && window.msgs.some((m) => m.data.text === 'u3')`)

	// The balancer takes f1 out, then f1 drains: redirect and close come
	// on the stream, the page resumes on f2, still over SSE.
	proxy.route(n2)
	if code := api(t, n2, apiKey, "POST", "/api/v1/nodes/f1/drain", nil, nil); code != 202 {
		t.Fatalf("drain f1: %d", code)
	}
	for i := 4; i <= 6; i++ {
		publish(n2, i)
	}
	p.waitFor(30*time.Second, "the second connection over SSE", `window.opens.length === 2 && window.opens[1].node === 'f2'`)
	p.waitFor(15*time.Second, "u6 and r6", `window.msgs.some((m) => m.data.text === 'r6') && window.msgs.some((m) => m.data.text === 'u6')`)

	// f2 is SIGKILLed: the stream breaks, the page resumes on f3.
	n3 := startGateway(t, "f3", wsgatebin.FreePort(t), env)
	proxy.route(n3)
	n2.Kill()
	for i := 7; i <= 9; i++ {
		publish(n3, i)
	}
	p.waitFor(45*time.Second, "the third connection", `window.opens.length === 3 && window.opens[2].node === 'f3'`)
	p.waitFor(15*time.Second, "u9 and r9", `window.msgs.some((m) => m.data.text === 'r9') && window.msgs.some((m) => m.data.text === 'u9')`)

	var transports []string
	for _, o := range eval[[]map[string]any](p, `window.opens`) {
		transports = append(transports, fmt.Sprint(o["transport"]))
	}
	if !slices.Equal(transports, []string{"sse", "sse", "sse"}) {
		t.Fatalf("transports %v, want sse each time", transports)
	}
	got := eval[[]string](p, `window.msgs.filter((m) => m.seq).map((m) => m.data.text)`)
	var users, rooms, wantUsers, wantRooms []string
	for _, s := range got {
		if s[0] == 'u' {
			users = append(users, s)
		} else {
			rooms = append(rooms, s)
		}
	}
	for _, s := range want {
		if s[0] == 'u' {
			wantUsers = append(wantUsers, s)
		} else {
			wantRooms = append(wantRooms, s)
		}
	}
	if !slices.Equal(users, wantUsers) || !slices.Equal(rooms, wantRooms) {
		t.Fatalf("reliable messages received %q, want the user's %q and the room's %q, in order, once each", got, wantUsers, wantRooms)
	}
}

// The demo chat behind a proxy that refuses WebSocket upgrades: sign-in,
// who is online, room chat both ways and a direct message, all over SSE
// with the frames posted (the demo's code does nothing of its own for it:
// wsgate.js falls back).
func TestDemoChatWithoutWebSocket(t *testing.T) {
	browser := newBrowser(t)
	proxy := newBlockingProxy(t, "")
	dev := startDev(t,
		"WSGATE_ALLOWED_ORIGINS="+proxy.base,
		// The allocator hands out the proxy's address, as it would in
		// front of a real cluster.
		"WSGATE_ADVERTISE_URL=ws://"+proxy.ln.Addr().String()+"/ws")
	proxy.route(dev)

	alice := newPage(t, browser, "alice behind a proxy")
	alice.navigate(proxy.base + "/demo")
	signIn(alice, proxy.base, "alice")
	bob := newPage(t, browser, "bob behind a proxy")
	bob.navigate(proxy.base + "/demo")
	signIn(bob, proxy.base, "bob")
	if proxy.upgrades.Load() < 2 {
		t.Fatalf("%d upgrades refused, want the two pages to have tried WebSocket first", proxy.upgrades.Load())
	}
	if got := metric(t, dev, `wsgate_connections{transport="sse"}`); got != 2 {
		t.Fatalf("wsgate_connections{transport=\"sse\"} = %v, want 2 (the two pages)", got)
	}
	online := func(p *page, want string) {
		p.waitFor(10*time.Second, "online: "+want, fmt.Sprintf(`[...document.querySelectorAll('#online [data-user]')].map(e => e.dataset.user).join(',') === '%s'`, want))
	}
	online(alice, "alice,bob")
	online(bob, "bob,alice")
	say(alice, "Hi Bob, no WebSocket here.")
	waitText(bob, 10*time.Second, "Hi Bob, no WebSocket here.")
	say(bob, "Server-Sent Events then.")
	waitText(alice, 10*time.Second, "Server-Sent Events then.")
	bob.fill("#dm-user", "alice")
	bob.click("#dm-form button")
	bob.waitFor(5*time.Second, "the DM with alice open", `document.getElementById('conv-title').textContent === '@alice'`)
	say(bob, "A direct one over POST.")
	openConv(alice, "dm:bob")
	waitText(alice, 10*time.Second, "A direct one over POST.")
	if got := metric(t, dev, `wsgate_connections{transport="ws"}`); got != 0 {
		t.Fatalf("wsgate_connections{transport=\"ws\"} = %v, want 0", got)
	}
}

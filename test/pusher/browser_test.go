package pusher

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/wsgate/wsgate/internal/testutil/chromiumtest"
)

// browserPage loads pusher-js's browser build (served from node_modules)
// and connects to the node whose port is in the query, as user; it
// subscribes to a public, a private and a presence channel and records
// what it receives in window globals the test reads.
const browserPage = `<!doctype html><html><body><script src="/pusher.js"></script><script>
const q = new URLSearchParams(location.search);
const user = q.get('user');
window.got = [];        // every frame received: {channel, event, data, user_id}
window.members = {};    // the presence channel's members, as pusher-js keeps them
window.subscribed = [];
window.errors = [];
const pusher = new Pusher(q.get('key'), {
  wsHost: '127.0.0.1', wsPort: Number(q.get('port')), forceTLS: false,
  enabledTransports: ['ws'], cluster: 'mt1', disableStats: true,
  channelAuthorization: { endpoint: '/pusher/auth', transport: 'ajax', params: { user } },
});
window.pusher = pusher;
pusher.connection.bind('error', (e) => window.errors.push(JSON.stringify(e)));
pusher.connection.bind('message', (m) => window.got.push({ channel: m.channel, event: m.event, data: m.data, user_id: m.user_id }));
for (const name of ['news', 'private-desk', 'presence-lobby']) {
  const ch = pusher.subscribe(name);
  ch.bind('pusher:subscription_succeeded', () => window.subscribed.push(name));
  ch.bind('pusher:subscription_error', (e) => window.errors.push(name + ' ' + JSON.stringify(e)));
  ch.bind_global(() => {
    if (name === 'presence-lobby') {
      const m = {};
      ch.members.each((x) => { m[x.id] = x.info; });
      window.members = m;
    }
  });
}
document.body.textContent = 'pusher-js ' + Pusher.VERSION + ' as ' + user;
</script></body></html>`

// pageServer serves the page, pusher-js's browser build and the app's
// auth endpoint (signing as Pusher's server libraries do, for the user the
// page names).
func pageServer(t *testing.T) string {
	t.Helper()
	js := filepath.Join(nodeModules(t), "pusher-js", "dist", "web", "pusher.js")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, browserPage)
	})
	mux.HandleFunc("GET /pusher.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		http.ServeFile(w, r, js)
	})
	mux.HandleFunc("POST /pusher/auth", func(w http.ResponseWriter, r *http.Request) {
		socketID, channel, user := r.FormValue("socket_id"), r.FormValue("channel_name"), r.FormValue("user")
		toSign := socketID + ":" + channel
		ans := map[string]string{}
		if strings.HasPrefix(channel, "presence-") {
			cd, _ := json.Marshal(map[string]any{"user_id": user, "user_info": map[string]string{"name": strings.ToUpper(user)}})
			ans["channel_data"] = string(cd)
			toSign += ":" + string(cd)
		}
		mac := hmac.New(sha256.New, []byte(appSecret))
		mac.Write([]byte(toSign))
		ans["auth"] = appKey + ":" + hex.EncodeToString(mac.Sum(nil))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ans)
	})
	return serve(t, mux)
}

// tab is one page in headless Chromium.
type tab struct {
	t    *testing.T
	name string
	ctx  context.Context
	stop context.CancelFunc
}

func openTab(t *testing.T, browser context.Context, name, url string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // binds the tab; without a timeout
		t.Fatalf("open tab %s: %v", name, err)
	}
	p := &tab{t: t, name: name, ctx: ctx, stop: cancel}
	c, done := context.WithTimeout(ctx, 30*time.Second)
	defer done()
	if err := chromedp.Do(c, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		p.fail("load %s: %v", url, err)
	}
	return p
}

// waitFor polls a JavaScript expression until it is truthy.
func (p *tab) waitFor(what, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		p.fail("waiting for %s: %v", what, err)
	}
}

func evalJS[T any](p *tab, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.fail("evaluate %s: %v", expr, err)
	}
	return v
}

func (p *tab) fail(format string, a ...any) {
	p.t.Helper()
	msg := fmt.Sprintf(format, a...)
	ctx, cancel := context.WithTimeout(p.ctx, 3*time.Second)
	defer cancel()
	if s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({subscribed: window.subscribed, got: window.got, members: window.members, errors: window.errors, state: window.pusher && pusher.connection.state})`)); err == nil {
		msg += "\n---- " + p.name + " ----\n" + s
	}
	p.t.Fatal(msg)
}

// TestPusherJSBrowser: pusher-js's browser build in headless Chromium, two
// tabs on two nodes: private and presence subscriptions through the page's
// auth endpoint, the member lists and member_added / member_removed across
// nodes, a client event from one tab to the other, and a wsgate server API
// publish to the room reaching both tabs as a Pusher event.
func TestPusherJSBrowser(t *testing.T) {
	site := pageServer(t)
	c := startCluster(t, 2, map[string]string{"WSGATE_ALLOWED_ORIGINS": site}) // the page's origin
	opts := chromiumtest.Options(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	browser, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	url := func(id, user string) string {
		return fmt.Sprintf("%s/?key=%s&port=%d&user=%s", site, appKey, c.node(id).Port, user)
	}
	const allSubscribed = `['news', 'private-desk', 'presence-lobby'].every((n) => window.subscribed.includes(n))`

	ann := openTab(t, browser, "ann (n1)", url("n1", "ann"))
	ann.waitFor("ann's three subscriptions", allSubscribed)
	if got := evalJS[string](ann, `JSON.stringify(pusher.channel('presence-lobby').members.me)`); got != `{"id":"ann","info":{"name":"ANN"}}` {
		t.Fatalf("ann's members.me = %s", got)
	}
	bob := openTab(t, browser, "bob (n2)", url("n2", "bob"))
	bob.waitFor("bob's three subscriptions", allSubscribed)
	if got := evalJS[int](bob, `pusher.channel('presence-lobby').members.count`); got != 2 {
		bob.fail("bob's presence-lobby has %d members, want 2", got)
	}
	ann.waitFor("bob added to ann's members", `JSON.stringify(window.members) === '{"ann":{"name":"ANN"},"bob":{"name":"BOB"}}'`)

	// A client event from bob's tab reaches ann on the other node, with
	// bob as its user_id on the presence channel.
	evalJS[bool](bob, `pusher.channel('presence-lobby').trigger('client-wave', {from: 'bob'})`)
	ann.waitFor("bob's client event", `window.got.some((g) => g.event === 'client-wave' && g.data.from === 'bob' && g.user_id === 'bob')`)
	evalJS[bool](ann, `pusher.channel('private-desk').trigger('client-note', {n: 1})`)
	bob.waitFor("ann's client event on the private channel", `window.got.some((g) => g.channel === 'private-desk' && g.event === 'client-note' && g.data.n === 1)`)

	// One room, both protocols: a publish through wsgate's own server API
	// reaches the Pusher subscribers of the channel.
	body, _ := json.Marshal(map[string]any{"target": map[string]string{"type": "room", "id": "news"}, "event": "headline", "data": map[string]any{"title": "hello"}})
	req, _ := http.NewRequest(http.MethodPost, c.node("n2").base()+"/api/v1/publish", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("publish: %d", res.StatusCode)
	}
	for _, p := range []*tab{ann, bob} {
		p.waitFor("the headline", `window.got.some((g) => g.channel === 'news' && g.event === 'headline' && g.data.title === 'hello')`)
	}

	// Bob's tab closes: ann gets member_removed from the other node.
	bob.stop()
	ann.waitFor("bob removed from ann's members", `JSON.stringify(window.members) === '{"ann":{"name":"ANN"}}'`)
}

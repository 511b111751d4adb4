package web_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/wsgate/wsgate/internal/testutil/wsgatebin"
)

// ---- demo page helpers ----------------------------------------------------------

// signIn signs the demo page in with an insecure user name and waits for
// the connection; it returns the node that serves it.
func signIn(p *page, base, user string) string {
	p.t.Helper()
	if eval[string](p, `location.pathname`) != "/demo" {
		p.navigate(base + "/demo")
	}
	p.waitFor(10*time.Second, "the sign-in form", `!document.getElementById('signin').hidden`)
	p.fill("#name", user)
	p.click("#signin-submit")
	p.waitFor(30*time.Second, user+" connected", `document.body.dataset.state === 'open' && document.getElementById('node').textContent !== '–'`)
	return eval[string](p, `document.getElementById('node').textContent`)
}

func signOut(p *page) {
	p.t.Helper()
	p.click("#signout")
	p.waitFor(10*time.Second, "signed out", `document.body.dataset.state === 'signed-out' && !document.getElementById('signin').hidden`)
}

// signInOn signs in until the allocator places the user on want (it picks
// at random among the least loaded nodes).
func signInOn(p *page, base, user, want string) {
	p.t.Helper()
	for i := 0; i < 40; i++ {
		if got := signIn(p, base, user); got == want {
			return
		}
		signOut(p)
	}
	p.fail("the allocator never placed %s on %s in 40 tries", user, want)
}

// say sends text in the open conversation.
func say(p *page, text string) {
	p.t.Helper()
	p.waitFor(10*time.Second, "the composer enabled", `!document.getElementById('send').disabled`)
	p.fill("#composer-input", text)
	p.click("#send")
	p.waitFor(10*time.Second, "sent: "+text, fmt.Sprintf(`[...document.querySelectorAll('#messages li.msg:not(.pending):not(.failed) .text')].some(e => e.textContent.includes(%s))`, jsString(text)))
}

// openConv selects a conversation of the sidebar (room:NAME or dm:USER)
// once it exists.
func openConv(p *page, key string) {
	p.t.Helper()
	sel := fmt.Sprintf(`[data-conv=%s] button`, jsString(key))
	p.waitFor(20*time.Second, "conversation "+key, fmt.Sprintf(`!!document.querySelector(%s)`, jsString(sel)))
	p.click(sel)
	p.waitFor(5*time.Second, key+" selected", fmt.Sprintf(`document.querySelector(%s).classList.contains('active')`, jsString(fmt.Sprintf(`[data-conv=%s]`, jsString(key)))))
}

// waitText waits until the open conversation shows a message containing text.
func waitText(p *page, d time.Duration, text string) {
	p.t.Helper()
	p.waitFor(d, "message "+text, fmt.Sprintf(`[...document.querySelectorAll('#messages li.msg .text')].some(e => e.textContent.includes(%s))`, jsString(text)))
}

// texts returns the texts of the open conversation's messages, in order.
func texts(p *page) []string {
	p.t.Helper()
	return eval[[]string](p, `[...document.querySelectorAll('#messages li.msg .text')].map(e => e.childNodes[0].textContent)`)
}

// ---- dev mode ---------------------------------------------------------------------

// TestDevConsoleAndDemo runs `wsgate dev`: the console lists the node and
// publishes a message that a demo page user receives; the demo's users chat
// in a room; presence and members answer; the demo screenshot is written.
func TestDevConsoleAndDemo(t *testing.T) {
	browser := newBrowser(t)
	dev := startDev(t)

	console := newPage(t, browser, "console")
	console.navigate(dev.base + "/")
	console.waitFor(15*time.Second, "the node card", fmt.Sprintf(`!!document.querySelector('[data-node=%s] [data-field=connections]')`, jsString(dev.id)))
	console.waitFor(5*time.Second, "dev mode needs no key", `document.getElementById('key-state').textContent.includes('No key needed')`)
	if got := eval[string](console, `document.querySelector('[data-node] .badge').textContent`); got != "active" {
		t.Fatalf("node status shown as %q, want active", got)
	}

	alice := newPage(t, browser, "alice")
	alice.navigate(dev.base + "/demo")
	if node := signIn(alice, dev.base, "alice"); node != dev.id {
		t.Fatalf("alice is served by %q, want %q", node, dev.id)
	}
	// A reliable lobby message published before bob signs in: the lobby
	// shows it as history when bob joins.
	if code := api(t, dev, "", "POST", "/api/v1/publish", map[string]any{
		"target": map[string]string{"type": "room", "id": "lobby"}, "event": "notice",
		"data": map[string]string{"from": "ops", "text": "Welcome to the lobby (kept in its history)"}, "reliable": true,
	}, nil); code != 200 {
		t.Fatalf("reliable lobby publish: %d", code)
	}
	bob := newPage(t, browser, "bob")
	bob.navigate(dev.base + "/demo")
	signIn(bob, dev.base, "bob")
	waitText(bob, 10*time.Second, "Welcome to the lobby (kept in its history)")

	// The console shows the two connections on the next refresh.
	console.waitFor(10*time.Second, "2 connections on the node card", fmt.Sprintf(`document.querySelector('[data-node=%s] [data-field=connections]').textContent === '2'`, jsString(dev.id)))

	// Both joined the lobby through the client's join frame.
	var members struct{ Members []string }
	eventually(t, 10*time.Second, "alice and bob in lobby", func() bool {
		api(t, dev, "", "GET", "/api/v1/rooms/lobby/members", nil, &members)
		return slices.Contains(members.Members, "alice") && slices.Contains(members.Members, "bob")
	})

	// Who is online in the lobby (wsgate dev: every room has presence and
	// joined/left), and carol coming and going.
	onlineIs := func(p *page, want string) {
		p.waitFor(10*time.Second, "online: "+want, fmt.Sprintf(`[...document.querySelectorAll('#online [data-user]')].map(e => e.dataset.user).join(',') === '%s'`, want))
	}
	onlineIs(alice, "alice,bob")
	onlineIs(bob, "bob,alice")
	carol := newPage(t, browser, "carol")
	carol.navigate(dev.base + "/demo")
	signIn(carol, dev.base, "carol")
	onlineIs(alice, "alice,bob,carol")
	carol.click("#signout") // closes its connection
	onlineIs(alice, "alice,bob")

	// Room chat in both directions.
	say(alice, "Hi Bob! Is the gateway up?")
	waitText(bob, 10*time.Second, "Hi Bob! Is the gateway up?")
	say(bob, "Up and running on one node.")
	waitText(alice, 10*time.Second, "Up and running on one node.")
	say(alice, "Great, let's try a direct message.")
	waitText(bob, 10*time.Second, "let's try a direct message")

	// A direct message (client publish to user:alice).
	bob.fill("#dm-user", "alice")
	bob.click("#dm-form button")
	bob.waitFor(5*time.Second, "the DM with alice open", `document.getElementById('conv-title').textContent === '@alice'`)
	say(bob, "This one is just for you.")

	// The console publishes to alice; her page receives it.
	console.fill("#pub-id", "alice")
	console.fill("#pub-event", "notice")
	console.fill("#pub-data", `{"from": "ops", "text": "Maintenance window tonight at 22:00 UTC"}`)
	console.click("#pub-submit")
	console.waitFor(10*time.Second, "the publish result", `document.getElementById('pub-result').classList.contains('ok')`)
	if got := eval[string](console, `document.getElementById('pub-result').textContent`); !strings.Contains(got, "online") || !strings.Contains(got, "yes") {
		t.Errorf("publish result %q does not say alice is online", got)
	}
	openConv(alice, "dm:server") // an API publish has no sender; data.from is not believed
	waitText(alice, 10*time.Second, "Maintenance window tonight")
	openConv(alice, "dm:bob")
	waitText(alice, 10*time.Second, "This one is just for you.")

	// Presence and members from the console.
	console.fill("#presence-user", "alice")
	console.click("#presence-form button")
	console.waitFor(10*time.Second, "alice's presence", fmt.Sprintf(`document.getElementById('presence-result').textContent.includes('alice is online') && document.getElementById('presence-result').textContent.includes(%s)`, jsString(dev.id)))
	console.fill("#members-room", "lobby")
	console.click("#members-form button")
	console.waitFor(10*time.Second, "lobby members", `[...document.querySelectorAll('#members-result .chip')].map(e => e.textContent).join(',') === 'alice,bob,carol'`) // members stay after a close (scope user)
	// Rooms with presence, then the lobby's: alice and bob are present.
	console.click("#rooms-form button")
	console.waitFor(10*time.Second, "the lobby listed with 2 users", `(() => { const r = document.querySelector('#rooms-result tr[data-room="lobby"]'); return !!r && r.children[1].textContent === '2'; })()`)
	console.click(`#rooms-result tr[data-room="lobby"] button`)
	console.waitFor(10*time.Second, "the lobby's presence", `[...document.querySelectorAll('#rooms-result tbody tr')].map(e => e.dataset.user).sort().join(',') === 'alice,bob'`)
	console.screenshot(docsImage("console-rooms.png"))

	// The node's connections: alice and bob, over WebSocket, in the lobby.
	listConns(console, dev.id, "alice,bob")
	for _, user := range []string{"alice", "bob"} {
		if row := connRow(console, user); row["transport"] != "ws" || !strings.HasPrefix(row["device"], "d-") || !strings.Contains(row["rooms"], "lobby") || row["age"] == "–" {
			t.Errorf("%s's connection shown as %v, want transport ws, the demo page's device (d-...), rooms with lobby and an age", user, row)
		}
	}

	// 26 more connections: the list pages by 25, and Next and Previous
	// walk it, every connection once.
	want := []string{"alice", "bob"}
	var load []*ticker
	for i := range 26 {
		user := fmt.Sprintf("load%02d", i)
		load = append(load, dialTicker(t, dev, user, "load"))
		want = append(want, user)
	}
	console.click("#conns-load")
	seen := pageUsers(console, 1, 25)
	console.click("#conns-next")
	seen = append(seen, pageUsers(console, 2, 3)...)
	if eval[bool](console, `document.getElementById('conns-next').disabled`) != true {
		t.Error("Next is enabled on the last page")
	}
	slices.Sort(seen)
	if !slices.Equal(seen, want) {
		t.Errorf("the two pages list %v, want every connection once: %v", seen, want)
	}
	console.click("#conns-prev")
	pageUsers(console, 1, 25)
	for _, tk := range load {
		tk.close()
	}
	listConns(console, dev.id, "alice,bob")

	// The demo screenshot: alice back in the lobby.
	openConv(alice, "room:lobby")
	alice.screenshot(docsImage("demo.png"))

	// Phone width (380 px): nothing overflows sideways, the demo's
	// conversation list is a drawer.
	for _, p := range []*page{console, alice} {
		p.do(chromedp.EmulateViewport(380, 800, chromedp.EmulateMobile))
		p.waitFor(5*time.Second, "the page to fit 380 px", `document.documentElement.scrollWidth <= 380 && innerWidth === 380`)
	}
	alice.waitFor(5*time.Second, "the drawer hidden", `getComputedStyle(document.getElementById('nav-toggle')).display !== 'none' && document.getElementById('sidebar').getBoundingClientRect().right <= 0`)
	alice.click("#nav-toggle")
	alice.waitFor(5*time.Second, "the drawer open", `document.getElementById('sidebar').getBoundingClientRect().left >= 0`)
	openConv(alice, "dm:server") // an API publish has no sender; data.from is not believed
	alice.waitFor(5*time.Second, "the drawer closed", `document.getElementById('sidebar').getBoundingClientRect().right <= 0`)
	console.screenshot(docsImage("console-phone.png"))
	alice.screenshot(docsImage("demo-phone.png"))

	// The node goes away: the console says it cannot reach it, the demo
	// reconnects with backoff.
	dev.Kill()
	console.waitFor(15*time.Second, "the unreachable banner", `document.getElementById('banner').textContent.includes('Gateway unreachable')`)
	alice.waitFor(15*time.Second, "the demo reconnecting", `document.body.dataset.state === 'reconnecting' && document.getElementById('conn-text').textContent.startsWith('Reconnecting')`)
}

// ---- cluster --------------------------------------------------------------------

const apiKey = "console-test-key"

// TestClusterFailoverAndDrain runs three gateway nodes on a private Redis,
// watched by the console of n3 (behind an API key): alice (on n1) and bob
// (on n2) chat across the nodes; n2 is SIGKILLed and bob's page reconnects
// through the allocator and receives, in order, the reliable messages
// published meanwhile; the console drains n1 (click and confirm) and its
// users move to the other node, n3. The console screenshot is written.
func TestClusterFailoverAndDrain(t *testing.T) {
	browser := newBrowser(t)
	redis, redisProc := startRedis(t)

	ports := []int{wsgatebin.FreePort(t), wsgatebin.FreePort(t), wsgatebin.FreePort(t)}
	var origins []string
	for _, p := range ports {
		origins = append(origins, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	env := []string{
		"WSGATE_REDIS_URL=redis://" + redis + "/0",
		"WSGATE_REDIS_PREFIX=webtest",
		"WSGATE_API_KEY=" + apiKey,
		"WSGATE_JWT_SECRET=web-test-secret-0123456789abcdef",
		"WSGATE_AUTH_INSECURE=true",
		// The demo pages come from n1 and connect to the other nodes.
		"WSGATE_ALLOWED_ORIGINS=" + strings.Join(origins, ","),
		"WSGATE_DRAIN_TIMEOUT=30s",
	}
	n1 := startGateway(t, "n1", ports[0], env)
	n2 := startGateway(t, "n2", ports[1], env)
	n3 := startGateway(t, "n3", ports[2], env)
	waitNodes(t, n1, "n1", "n2", "n3")

	// The console of n3 asks for the key; a wrong one gets the 401 banner.
	console := newPage(t, browser, "console")
	console.navigate(n3.base + "/")
	console.waitFor(10*time.Second, "the API key dialog", `document.getElementById('key-dialog').open`)
	console.fill("#key-input", "wrong-key")
	console.click("#key-save")
	console.waitFor(10*time.Second, "the wrong-key banner", `document.getElementById('banner').textContent.includes('API key was refused (401)')`)
	console.waitFor(5*time.Second, "the key dialog again", `document.getElementById('key-dialog').open`)
	console.fill("#key-input", apiKey)
	console.click("#key-save")
	console.waitFor(10*time.Second, "three active nodes", `document.querySelectorAll('.node[data-status=active]').length === 3`)
	if got := eval[string](console, `document.getElementById('banner').textContent`); got != "" {
		t.Errorf("banner still shown with the right key: %q", got)
	}

	// alice on n1, bob on n2; both pages are served by n1, whose allocator
	// places them.
	alice := newPage(t, browser, "alice")
	alice.navigate(n1.base + "/demo")
	signInOn(alice, n1.base, "alice", "n1")
	bob := newPage(t, browser, "bob")
	bob.navigate(n1.base + "/demo")
	signInOn(bob, n1.base, "bob", "n2")
	var members struct{ Members []string }
	eventually(t, 10*time.Second, "alice and bob in lobby", func() bool {
		api(t, n1, apiKey, "GET", "/api/v1/rooms/lobby/members", nil, &members)
		return slices.Contains(members.Members, "alice") && slices.Contains(members.Members, "bob")
	})
	console.waitFor(10*time.Second, "one connection on n1 and on n2",
		`['n1', 'n2'].every(id => document.querySelector('[data-node="' + id + '"] [data-field=connections]')?.textContent === '1')`)

	// Chat across the two nodes: the room, then a direct message.
	say(alice, "Hello from n1!")
	waitText(bob, 10*time.Second, "Hello from n1!")
	say(bob, "Hi alice, bob here on n2.")
	waitText(alice, 10*time.Second, "Hi alice, bob here on n2.")
	bob.fill("#dm-user", "alice")
	bob.click("#dm-form button")
	say(bob, "A direct message across nodes.")
	openConv(alice, "dm:bob")
	waitText(alice, 10*time.Second, "A direct message across nodes.")
	openConv(alice, "room:lobby")

	// A reliable message bob receives (and acknowledges) before the crash.
	publishReliable(t, n1, "bob", "r0")
	openConv(bob, "dm:server")
	waitText(bob, 10*time.Second, "r0")

	// n2 dies without a drain; reliable messages are published meanwhile.
	n2.Kill()
	want := []string{"r0"}
	for i := 1; i <= 5; i++ {
		text := fmt.Sprintf("r%d", i)
		publishReliable(t, n1, "bob", text)
		want = append(want, text)
	}
	bob.waitFor(45*time.Second, "bob reconnected through the allocator",
		`document.body.dataset.state === 'open' && ['n1', 'n3'].includes(document.getElementById('node').textContent)`)
	waitText(bob, 15*time.Second, "r5")
	if got := texts(bob); !slices.Equal(got, want) {
		t.Fatalf("bob's reliable messages after the failover: %q, want %q (in order, no duplicate)", got, want)
	}
	seqs := eval[[]int](bob, `[...document.querySelectorAll('#messages li.msg')].map(e => Number(e.dataset.seq))`)
	if !slices.IsSorted(seqs) || len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
		t.Fatalf("reliable seqs shown %v: not increasing", seqs)
	}
	openConv(bob, "room:lobby")
	say(bob, "Back after n2 crashed.")
	waitText(alice, 10*time.Second, "Back after n2 crashed.")
	console.waitFor(20*time.Second, "n2 shown as left", `document.querySelector('[data-node="n2"]')?.dataset.status === 'left'`)

	// Drain n1 from the console: click, confirm; its users move to n3.
	console.click(`[data-node="n1"] button[data-action=drain]`)
	console.waitFor(5*time.Second, "the drain confirmation", `document.getElementById('drain-dialog').open`)
	console.click("#drain-confirm")
	for _, p := range []*page{alice, bob} {
		p.waitFor(30*time.Second, p.name+" on n3",
			`document.body.dataset.state === 'open' && document.getElementById('node').textContent === 'n3'`)
	}
	eventually(t, 30*time.Second, "n1 to exit after its drain", n1.Exited)
	console.waitFor(30*time.Second, "n1 left and n3 with 2 connections",
		`document.querySelector('[data-node="n1"]')?.dataset.status === 'left' && document.querySelector('[data-node="n3"] [data-field=connections]')?.textContent === '2'`)

	// Still chatting after the drain; a reliable message from the console.
	say(alice, "Moved to n3 without losing a message.")
	waitText(bob, 10*time.Second, "Moved to n3 without losing a message.")
	console.fill("#pub-id", "bob")
	console.fill("#pub-data", `{"from": "ops", "text": "n1 drained for an upgrade"}`)
	console.click("#pub-reliable")
	console.click("#pub-submit")
	console.waitFor(10*time.Second, "the publish result", `document.getElementById('pub-result').classList.contains('ok')`)
	openConv(bob, "dm:server")
	waitText(bob, 10*time.Second, "n1 drained for an upgrade")
	if got := texts(bob); !slices.Equal(got, append(want, "n1 drained for an upgrade")) {
		t.Fatalf("bob's reliable messages after the drain: %q", got)
	}
	console.fill("#presence-user", "alice")
	console.click("#presence-form button")
	console.waitFor(10*time.Second, "alice's presence on n3", `document.getElementById('presence-result').textContent.includes('alice is online') && document.getElementById('presence-result').textContent.includes('n3')`)
	console.fill("#members-room", "lobby")
	console.click("#members-form button")
	console.waitFor(10*time.Second, "lobby members", `[...document.querySelectorAll('#members-result .chip')].map(e => e.textContent).join(',') === 'alice,bob'`)
	// A Go client on n3 in room ops gets a message every 50 ms from n3's
	// API: the console shows the rates, and lists it beside alice and bob.
	tk := dialTicker(t, n3, "ticker", "ops")
	stopTicks := publishEvery(t, n3, "ticker", 50*time.Millisecond)
	defer stopTicks()
	select {
	case <-tk.received:
	case <-time.After(10 * time.Second):
		t.Fatal("the ticker got no message")
	}
	console.waitFor(20*time.Second, "message rates above 0 on n3 and in the summary",
		`Number(document.querySelector('[data-node="n3"] [data-field=delivery_rate]').textContent) > 0 && Number(document.querySelector('[data-node="n3"] [data-field=publish_rate]').textContent) > 0 && Number(document.getElementById('sum-rate').textContent.replace(/,/g, '')) > 0`)
	listConns(console, "n3", "alice,bob,ticker")
	if row := connRow(console, "ticker"); row["transport"] != "ws" || row["rooms"] != "ops" || row["device"] != "default" {
		t.Errorf("the ticker's connection shown as %v, want transport ws, rooms ops, device default", row)
	}
	if row := connRow(console, "alice"); !strings.Contains(row["rooms"], "lobby") {
		t.Errorf("alice's connection shown as %v, want rooms with lobby", row)
	}

	// Let the charts gather a few samples after the drain and the toasts
	// fade (both read from the DOM) before the screenshot.
	n3Samples := eval[int](console, `Number(document.querySelector('[data-node="n3"] .chart').dataset.samples)`)
	console.waitFor(20*time.Second, "three more samples on n3's chart and no toast",
		fmt.Sprintf(`Number(document.querySelector('[data-node="n3"] .chart').dataset.samples) >= %d && document.getElementById('toasts').childElementCount === 0`, n3Samples+3))
	console.screenshot(docsImage("console.png"))

	// A console opened now draws the last minutes at once: as many samples
	// as the console open since the start, more than it refreshed, and n2
	// (killed before it opened) as left.
	watched := eval[int](console, `Number(document.querySelector('[data-node="n3"] .chart').dataset.samples)`)
	fresh := newPage(t, browser, "fresh console")
	fresh.navigate(n3.base + "/")
	fresh.waitFor(10*time.Second, "the API key dialog", `document.getElementById('key-dialog').open`)
	fresh.fill("#key-input", apiKey)
	fresh.click("#key-save")
	fresh.waitFor(10*time.Second, "the first refresh", `Number(document.body.dataset.refreshes) >= 1 && !!document.querySelector('[data-node="n3"] .chart')`)
	got := eval[[]int](fresh, `[Number(document.body.dataset.refreshes), Number(document.querySelector('[data-node="n3"] .chart').dataset.samples)]`)
	// (Two fewer at most: past 5 minutes, the gateway forgets its oldest
	// samples a little before the watching console does.)
	if got[1]+2 < watched || got[1] < got[0]+5 {
		t.Errorf("a fresh console after %d refreshes draws %d samples of n3, want about the %d of the console open since the start, and 5 more than it refreshed", got[0], got[1], watched)
	}
	if st := eval[string](fresh, `document.querySelector('[data-node="n2"]')?.dataset.status ?? 'absent'`); st != "left" {
		t.Errorf("n2, killed before the console opened, is %s in it, want left", st)
	}
	fresh.waitFor(10*time.Second, "the rates in the fresh console", `Number(document.querySelector('[data-node="n3"] [data-field=delivery_rate]').textContent) > 0`)
	stopTicks()

	// Disconnect the ticker from the console: click, confirm; it gets 4003
	// and n3 counts one connection less.
	console.click(`#conns-result tr[data-user="ticker"] button[data-action=disconnect]`)
	console.waitFor(5*time.Second, "the disconnect confirmation", `document.getElementById('kick-dialog').open && document.getElementById('kick-text').textContent.includes('4003')`)
	console.screenshotViewport(docsImage("console-disconnect.png"))
	console.click("#kick-confirm")
	if code := tk.closeCode(t, 10*time.Second); code != 4003 {
		t.Fatalf("the ticker was closed with %d, want 4003", code)
	}
	console.waitFor(15*time.Second, "n3 back to 2 connections and the ticker gone from the list",
		`document.querySelector('[data-node="n3"] [data-field=connections]')?.textContent === '2' && [...document.querySelectorAll('#conns-result tr[data-conn]')].map(e => e.dataset.user).sort().join(',') === 'alice,bob'`)
	for _, p := range []*page{alice, bob} {
		if st := eval[string](p, `document.body.dataset.state`); st != "open" {
			t.Errorf("%s's page is %s after the ticker's disconnect, want open", p.name, st)
		}
	}

	// Redis goes away: the gateway answers 503 and the console says so.
	redisProc.Kill()
	console.waitFor(20*time.Second, "the backend-down banner", `document.getElementById('banner').textContent.includes('Cluster backend unavailable (503)')`)
}

// waitNodes waits until n's API lists exactly the given nodes as active.
func waitNodes(t *testing.T, n *node, ids ...string) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("nodes %v active", ids), func() bool {
		var res struct {
			Nodes []struct{ ID, Status string }
		}
		if api(t, n, apiKey, "GET", "/api/v1/nodes", nil, &res) != 200 {
			return false
		}
		var got []string
		for _, x := range res.Nodes {
			if x.Status == "active" {
				got = append(got, x.ID)
			}
		}
		slices.Sort(got)
		return slices.Equal(got, ids)
	})
}

func publishReliable(t *testing.T, n *node, user, text string) {
	t.Helper()
	body := map[string]any{
		"target":   map[string]string{"type": "user", "id": user},
		"event":    "notice",
		"data":     map[string]string{"from": "ops", "text": text},
		"reliable": true,
	}
	var res struct{ Seq int64 }
	if code := api(t, n, apiKey, "POST", "/api/v1/publish", body, &res); code != 200 || res.Seq == 0 {
		t.Fatalf("reliable publish %q to %s: status %d, seq %d", text, user, code, res.Seq)
	}
}

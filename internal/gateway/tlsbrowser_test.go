package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/testutil/chromiumtest"
	"github.com/wsgate/wsgate/internal/tlsrec"

	"github.com/chromedp/chromedp"

	"github.com/wsgate/wsgate/protocol"
)

// Headless Chromium (BoringSSL) opens a wss:// WebSocket to a node with
// a self-signed certificate: TLS 1.3 on the loop's record layer, with
// the node's own KeyUpdates every tlsrec.KeyUpdateAfter records (here 4).
func TestTLSChromiumWebSocket(t *testing.T) {
	setKeyUpdateAfter(t, 4)
	n := tlsNode(t, nil)

	opts := chromiumtest.Options(t, chromedp.Flag("ignore-certificate-errors", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	browser, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	if err := chromedp.Do(browser); err != nil { // starts the browser, without a timeout
		t.Fatalf("start Chromium: %v", err)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	state := func() string {
		ctx, cancel := context.WithTimeout(browser, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({ready: sock.readyState, got: got})`))
		if err != nil {
			return err.Error()
		}
		return s
	}
	// waitFor awaits expr, or the WebSocket's close (which fails).
	waitFor := func(what, expr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 60*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Poll[string](`(`+expr+`) ? 'ok' : (count.closed === 1 ? 'closed' : null)`,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(55*time.Second)))
		if err != nil || got != "ok" {
			t.Fatalf("%s: %v; in Chromium: %s; TLS handshakes loop %v goroutine %v failed %v", what, err, state(),
				counterValue(t, n, "wsgate_tls_handshakes_total", "loop"), counterValue(t, n, "wsgate_tls_handshakes_total", "goroutine"),
				counterValue(t, n, "wsgate_tls_handshakes_total", "failed"))
		}
	}

	url := "wss://" + n.addr + "/ws?token=" + token(t, "chrome", nil)
	run("open the WebSocket", chromedp.Navigate("https://"+n.addr+"/healthz"), chromedp.Evaluate[chromedp.Void](`
		window.got = []; window.count = {};
		window.sock = new WebSocket(`+strconv.Quote(url)+`);
		sock.onmessage = e => {
			const m = JSON.parse(e.data);
			got.push(m);
			count[m.type] = (count[m.type] || 0) + 1;
			if (m.type === 'welcome') sock.send(JSON.stringify({type: 'ping', ts: 1}));
		};
		sock.onclose = e => { got.push({type: 'closed', code: e.code}); count.closed = 1; };
	`))
	waitFor("the pong", `count.pong === 1`)
	if conns := n.hub.userConns("chrome"); len(conns) != 1 || conns[0].tr == nil {
		t.Fatal("Chromium's connection is not on the loop's record layer")
	}
	// Messages of about a record each, even compressed (Chromium offers
	// permessage-deflate), so that the node seals far more than
	// tlsrec.KeyUpdateAfter records.
	const k = 40
	rnd := make([]byte, 15<<10)
	rand.Read(rnd)
	pad := base64.StdEncoding.EncodeToString(rnd)
	for i := 0; i < k; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "chrome"}, Event: "e", Data: raw(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, pad))})
	}
	waitFor("the messages", fmt.Sprintf(`count.message === %d`, k))
	run("a ping after the rotations", chromedp.Evaluate[chromedp.Void](`sock.send(JSON.stringify({type: 'ping', ts: 2}))`))
	waitFor("the second pong", `count.pong === 2`)
	ctx, cancelEval := context.WithTimeout(browser, 30*time.Second)
	defer cancelEval()
	order, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`JSON.stringify([count, got.filter(m => m.type === 'message').map(m => m.data.pad.length === 20480 ? m.data.i : -1)])`))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"welcome":1,"pong":2,"message":40},[`
	for i := 0; i < k; i++ {
		if i > 0 {
			want += ","
		}
		want += strconv.Itoa(i)
	}
	want += "]]"
	if order != want {
		t.Fatalf("in Chromium: %s\nwant %s", order, want)
	}
	sc := n.hub.userConns("chrome")[0]
	sc.mu.Lock()
	seq := sc.tr.Out.Seq
	sc.mu.Unlock()
	if seq > tlsrec.KeyUpdateAfter+tlsrec.SealBatch/tlsrec.MaxPlaintext+2 { // a batch's records go under one key
		t.Fatalf("the node's write sequence is %d: no KeyUpdate every %d records", seq, tlsrec.KeyUpdateAfter)
	}
}

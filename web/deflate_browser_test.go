package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBrowserCompression: Chromium negotiates permessage-deflate with a
// node running WSGATE_COMPRESSION=on (ws.extensions in the page), and a
// message of several KiB, sent compressed (the node's compressed-bytes
// counter grows by less than its size), arrives intact; with
// WSGATE_COMPRESSION=off nothing is negotiated and it arrives as well.
func TestBrowserCompression(t *testing.T) {
	browser := newBrowser(t)
	var items []string
	for i := 0; i < 60; i++ {
		items = append(items, fmt.Sprintf(`{"id":%d,"name":"item-%d","tags":["a","b%d"]}`, i, i*7919%1000, i%13))
	}
	data := `{"items":[` + strings.Join(items, ",") + `]}`
	for _, mode := range []string{"on", "off"} {
		t.Run(mode, func(t *testing.T) {
			dev := startDev(t, "WSGATE_COMPRESSION="+mode)
			p := newPage(t, browser, "compression-"+mode)
			p.navigate(dev.base + "/healthz")
			eval[bool](p, `window.got = []; window.ws = new WebSocket('ws://' + location.host + '/ws?user=zed');
				ws.onmessage = (e) => window.got.push(e.data); true`)
			p.waitFor(10*time.Second, "the welcome", `window.got.some((m) => JSON.parse(m).type === 'welcome')`)
			ext := eval[string](p, `ws.extensions`)
			if want := map[string]bool{"on": true, "off": false}[mode]; strings.Contains(ext, "permessage-deflate") != want {
				t.Fatalf("WSGATE_COMPRESSION=%s: ws.extensions = %q", mode, ext)
			}
			before := metric(t, dev, "wsgate_compressed_bytes_total")
			if code := api(t, dev, "", "POST", "/api/v1/publish", map[string]any{
				"target": map[string]string{"type": "user", "id": "zed"}, "event": "big", "data": json.RawMessage(data),
			}, nil); code != http.StatusOK {
				t.Fatalf("publish: %d", code)
			}
			p.waitFor(10*time.Second, "the message", `window.got.some((m) => JSON.parse(m).event === 'big')`)
			got := eval[string](p, `JSON.stringify(JSON.parse(window.got.find((m) => JSON.parse(m).event === 'big')).data)`)
			if got != data {
				t.Fatalf("received data %.100s..., want %.100s...", got, data)
			}
			grew := metric(t, dev, "wsgate_compressed_bytes_total") - before
			if mode == "on" && (grew <= 0 || grew >= float64(len(data))) {
				t.Fatalf("compressed bytes grew by %v for a %d-byte message", grew, len(data))
			}
			if mode == "off" && grew != 0 {
				t.Fatalf("compressed bytes grew by %v with compression off", grew)
			}
		})
	}
}

// metric reads one counter of n's /metrics (0 when absent).
func metric(t *testing.T, n *node, name string) float64 {
	t.Helper()
	res, err := http.Get(n.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

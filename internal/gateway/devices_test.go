package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// connectDevice connects user's device (no since) and checks the welcome's
// device.
func (n *testNode) connectDevice(t *testing.T, user, device string) *wsClient {
	t.Helper()
	c := n.dial(t, "?device="+device, http.Header{"Authorization": {"Bearer " + token(t, user, nil)}}, true)
	w := c.next(5 * time.Second)
	if w["type"] != "welcome" || w["device"] != device {
		t.Fatalf("first frame %v, want a welcome of device %s", w, device)
	}
	return c
}

// ackAll acknowledges seq and waits until it took effect (a ping after it
// is answered once the ack is done).
func (c *wsClient) ackAll(seq int64) {
	c.send(map[string]any{"type": "ack", "seq": seq})
	c.send(`{"type":"ping"}`)
	c.expect("pong")
}

func keptSeqs(t *testing.T, b cluster.Backend, user string) []int64 {
	t.Helper()
	rd, err := b.ReadInbox(context.Background(), user, 0, cluster.InboxOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, m := range rd.Messages {
		out = append(out, m.Seq)
	}
	return out
}

// multiDevice is the scenario of issue 15: the phone reads and acknowledges
// everything while the laptop is offline; the laptop's reconnect without
// since still gets every message; once both acknowledged, nothing is kept.
// phoneNode and laptopNode may be two nodes of one cluster.
func multiDevice(t *testing.T, phoneNode, laptopNode *testNode) {
	const total = 5
	laptop := laptopNode.connectDevice(t, "ann", "laptop")
	laptop.conn.Close()
	eventually(t, 5*time.Second, "laptop gone", func() bool { return laptopNode.hub.count() == 0 })
	phone := phoneNode.connectDevice(t, "ann", "phone")
	for i := 1; i <= total; i++ {
		reliable(t, phoneNode, "ann", i)
	}
	if got := seqs(t, phone, total); len(got) != total {
		t.Fatalf("phone got %v", got)
	}
	phone.ackAll(total)
	laptop = laptopNode.connectDevice(t, "ann", "laptop")
	if got := seqs(t, laptop, total); len(got) != total || got[0] != 1 {
		t.Fatalf("laptop's reconnect without since got %v, want 1..%d", got, total)
	}
	if kept := keptSeqs(t, phoneNode.backend, "ann"); len(kept) != total {
		t.Fatalf("kept after the phone's ack: %v", kept)
	}
	laptop.ackAll(total)
	if kept := keptSeqs(t, phoneNode.backend, "ann"); len(kept) != 0 {
		t.Fatalf("kept after both acked: %v", kept)
	}
	// Presence lists each connection's device.
	var devices []string
	eventually(t, 5*time.Second, "presence of phone and laptop", func() bool {
		_, m := apiCall(t, laptopNode, "GET", "/api/v1/users/ann/presence", "k", "")
		devices = devices[:0]
		for _, c := range m["connections"].([]any) {
			devices = append(devices, c.(map[string]any)["device"].(string))
		}
		return strings.Join(devices, ",") == "phone,laptop"
	})
}

func TestDevicesPhoneAckKeepsMessagesForLaptop(t *testing.T) {
	n := startNode(t, nil)
	multiDevice(t, n, n)
}

func TestDevicesAcrossNodes(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{})
	a := startNodeWith(t, redisBackend(t, srv.URL(), "dev", 0), nil)
	b := startNodeWith(t, redisBackend(t, srv.URL(), "dev", 0), func(c *config.Gateway) { c.NodeID = "t2" })
	multiDevice(t, a, b)
}

// A device never seen gets every message still kept, from the first one
// no device acknowledged, even when the other device acknowledged more.
func TestDevicesNewDeviceGetsEveryKeptMessage(t *testing.T) {
	n := startNode(t, nil)
	phone := n.connectDevice(t, "bo", "phone")
	laptop := n.connectDevice(t, "bo", "laptop")
	for i := 1; i <= 4; i++ {
		reliable(t, n, "bo", i)
	}
	seqs(t, phone, 4)
	seqs(t, laptop, 4)
	phone.ackAll(4)
	laptop.ackAll(1)
	tablet := n.connectDevice(t, "bo", "tablet")
	if got := seqs(t, tablet, 4); len(got) != 3 || got[0] != 2 {
		t.Fatalf("new device got %v, want 2..4", got)
	}
}

// The default device: a client naming none and one naming "default" share
// the acknowledgement, as in v1.
func TestDevicesDefaultIsShared(t *testing.T) {
	n := startNode(t, nil)
	for i := 1; i <= 3; i++ {
		reliable(t, n, "cy", i)
	}
	c := n.connect(t, "cy", "")
	seqs(t, c, 3)
	c.ackAll(2)
	d := n.connectDevice(t, "cy", "default")
	if got := seqs(t, d, 3); len(got) != 1 || got[0] != 3 {
		t.Fatalf("default device after the unnamed client's ack of 2: %v", got)
	}
}

func TestDevicesBadDeviceIsRefused(t *testing.T) {
	n := startNode(t, nil)
	for _, q := range []string{"device=", "device=a%20b", "device=" + strings.Repeat("x", 65), "device=a&device=b", "device=%C3%A9"} {
		req, _ := http.NewRequest("GET", "http://"+n.addr+"/ws?"+q, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		req.Header.Set("Authorization", "Bearer "+token(t, "dee", nil))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || body.Error.Code != "bad_request" {
			t.Errorf("%s: %d %v, want 400 bad_request", q, resp.StatusCode, body.Error)
		}
	}
	// The node keeps serving.
	n.connectDevice(t, "dee", "ok_1.A-z")
}

package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/tlsrec"
	"github.com/wsgate/wsgate/protocol"
)

// recConn is a test client's TLS 1.3 connection: crypto/tls does the
// handshake and the reading, while writes go through the test's own
// record layer (keyed from the client's key log), so that a test can
// shape the records: one byte each, a KeyUpdate, a flipped byte, half a
// record.
type recConn struct {
	net.Conn // the TCP socket
	tc       *tls.Conn

	mu    sync.Mutex
	out   tlsrec.Keys
	split int  // plaintext bytes per record (0: as many as fit)
	trick bool // write each record in two halves, one syscall each
}

func (c *recConn) Read(p []byte) (int, error) { return c.tc.Read(p) }

func (c *recConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		k := len(p)
		if c.split > 0 {
			k = min(k, c.split)
		}
		rec := c.out.Seal(nil, tlsrec.TypeAppData, p[:k])
		p = p[k:]
		if c.trick {
			if _, err := c.Conn.Write(rec[:len(rec)/2]); err != nil {
				return 0, err
			}
			rec = rec[len(rec)/2:]
		}
		if _, err := c.Conn.Write(rec); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// writeRaw writes bytes as they are (records the test built).
func (c *recConn) writeRaw(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Conn.Write(b)
}

// keyUpdate sends a KeyUpdate and moves to the next write key.
func (c *recConn) keyUpdate(requested bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := []byte{tlsrec.HandshakeKeyUpdate, 0, 0, 1, 0}
	if requested {
		msg[4] = 1
	}
	c.Conn.Write(c.out.Seal(nil, tlsrec.TypeHandshake, msg))
	if err := c.out.Update(); err != nil {
		panic(err)
	}
}

// sealed seals plain as the next record (and counts it as sent).
func (c *recConn) sealed(ctype byte, plain []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Seal(nil, ctype, plain)
}

type keyLogLines struct {
	mu    sync.Mutex
	lines map[string][]byte
}

func (k *keyLogLines) Write(b []byte) (int, error) {
	f := strings.Fields(string(b))
	if len(f) == 3 {
		s, _ := hex.DecodeString(f[2])
		k.mu.Lock()
		if k.lines == nil {
			k.lines = map[string][]byte{}
		}
		k.lines[f[0]] = s
		k.mu.Unlock()
	}
	return len(b), nil
}

func tlsNode(t *testing.T, mutate func(*config.Gateway)) *testNode {
	certFile, keyFile := selfSigned(t)
	return startNode(t, func(c *config.Gateway) {
		c.TLSCertFile, c.TLSKeyFile = certFile, keyFile
		if mutate != nil {
			mutate(c)
		}
	})
}

// dialTLS opens a wss:// connection with a recConn; read starts the
// client's reader goroutine (else the caller reads the welcome itself).
func dialTLS(t testing.TB, n *testNode, user string, read bool, cfg *tls.Config) (*wsClient, *recConn) {
	t.Helper()
	rc := handshakeTLS(t, n, cfg)
	return upgradeOn(t, rc, user, read), rc
}

// bigPing is a ping frame of about size bytes (a pad field the server
// ignores).
func bigPing(size int) string {
	return `{"type":"ping","ts":3,"pad":"` + strings.Repeat("p", size) + `"}`
}

func TestTLSLoopMessagesBothWays(t *testing.T) {
	n := tlsNode(t, nil)
	const k = 20
	var cs []*wsClient
	for i := range k {
		c, _ := dialTLS(t, n, fmt.Sprint("u", i), true, nil)
		cs = append(cs, c)
	}
	big := strings.Repeat("b", 100<<10) // spans seven records each way
	for i, c := range cs {
		c.send(`{"type":"ping","ts":1}`)
		c.expect("pong")
		c.send(bigPing(40 << 10))
		c.expect("pong")
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: fmt.Sprint("u", i)}, Event: "e", Data: raw(`"` + big + `"`)})
	}
	for _, c := range cs {
		m := c.expect("message")
		if m["data"] != big {
			t.Fatalf("large message: %d bytes, want %d", len(fmt.Sprint(m["data"])), len(big))
		}
	}
	for i := 0; i < 200; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "broadcast"}, Event: "e", Data: raw(fmt.Sprint(i))})
	}
	for _, c := range cs {
		for i := 0; i < 200; i++ {
			if m := c.expect("message"); m["data"] != float64(i) {
				t.Fatalf("broadcast %d: got %v", i, m["data"])
			}
		}
	}
	if got := n.hub.count(); got != k {
		t.Fatalf("%d connections, want %d", got, k)
	}
}

func TestTLSLoopTinyAndSplitRecords(t *testing.T) {
	n := tlsNode(t, nil)
	c, rc := dialTLS(t, n, "tiny", true, nil)
	rc.mu.Lock()
	rc.split = 1 // a record per byte
	rc.mu.Unlock()
	c.send(`{"type":"ping","ts":2}`)
	c.expect("pong")
	c.send(bigPing(2000))
	c.expect("pong")
	rc.mu.Lock()
	rc.split, rc.trick = 7, true // records split over two writes
	rc.mu.Unlock()
	for i := 0; i < 20; i++ {
		c.send(`{"type":"ping","ts":4}`)
		c.expect("pong")
	}
}

func TestTLSLoopKeyUpdate(t *testing.T) {
	n := tlsNode(t, nil)
	c, rc := dialTLS(t, n, "ku", true, nil)
	for i := 0; i < 3; i++ {
		rc.keyUpdate(false)
		c.send(`{"type":"ping","ts":5}`)
		c.expect("pong")
	}
	// update_requested: the node sends its own KeyUpdate and moves to its
	// next key (crypto/tls on the client follows, or fails to read).
	sc := n.hub.userConns("ku")[0]
	writeSecret := func() string {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		s := sc.tr.Out.Secret()
		return string(s[:])
	}
	for i := 0; i < 3; i++ {
		before := writeSecret()
		rc.keyUpdate(true)
		c.send(`{"type":"ping","ts":6}`)
		c.expect("pong")
		if writeSecret() == before {
			t.Fatal("the client asked for a KeyUpdate: the node's write key did not change")
		}
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "ku"}, Event: "e", Data: raw(`1`)})
		c.expect("message")
	}
}

// Frames sent right behind the upgrade request, in records of their own
// and in the same write, are read after the request: none is lost
// inside crypto/tls when the loop takes the connection over.
func TestTLSLoopFramesBehindTheRequest(t *testing.T) {
	n := tlsNode(t, nil)
	tcp, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	kl := &keyLogLines{}
	tc := tls.Client(tcp, &tls.Config{InsecureSkipVerify: true, KeyLogWriter: kl, MinVersion: tls.VersionTLS13})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	out, _ := tlsrec.NewKeys(tc.ConnectionState().CipherSuite, kl.lines["CLIENT_TRAFFIC_SECRET_0"])
	rc := &recConn{Conn: tcp, tc: tc, out: out}
	req := "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer " + token(t, "eager", nil) + "\r\n\r\n"
	var pings [3][]byte
	for i := range pings {
		var f bytes.Buffer
		ws.WriteFrame(&f, ws.MaskFrame(ws.NewTextFrame([]byte(fmt.Sprintf(`{"type":"ping","ts":%d}`, i)))))
		pings[i] = f.Bytes()
	}
	// The request and the first ping in one record, then a record per
	// ping, all in one write.
	all := rc.sealed(tlsrec.TypeAppData, append([]byte(req), pings[0]...))
	all = append(all, rc.sealed(tlsrec.TypeAppData, pings[1])...)
	all = append(all, rc.sealed(tlsrec.TypeAppData, pings[2])...)
	rc.writeRaw(all)
	br := bufio.NewReader(rc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	c := &wsClient{t: t, conn: rc, r: br, frames: make(chan map[string]any, 64), closed: make(chan struct{})}
	go c.readLoop()
	defer func() { tcp.Close(); <-c.closed }()
	c.expect("welcome")
	for i := 0; i < 3; i++ {
		if p := c.expect("pong"); p["ts"] != float64(i) {
			t.Fatalf("pong %d: %v", i, p)
		}
	}
}

func TestTLSLoopBadRecordsCloseOnlyTheirConnection(t *testing.T) {
	n := tlsNode(t, nil)
	bystander, _ := dialTLS(t, n, "ok", true, nil)
	cases := []struct {
		name string
		bad  func(rc *recConn) []byte
	}{
		{"flipped byte", func(rc *recConn) []byte {
			r := rc.sealed(tlsrec.TypeAppData, []byte("\x81\x80abcd"))
			r[len(r)-3] ^= 1
			return r
		}},
		{"wrong sequence number", func(rc *recConn) []byte {
			rc.sealed(tlsrec.TypeAppData, []byte("lost"))
			return rc.sealed(tlsrec.TypeAppData, []byte("\x89\x80abcd"))
		}},
		{"plaintext record", func(rc *recConn) []byte { return []byte{tlsrec.TypeHandshake, 3, 3, 0, 1, 0} }},
		{"oversized record", func(rc *recConn) []byte {
			return append([]byte{tlsrec.TypeAppData, 3, 3, 0x48, 0x01}, make([]byte, 100)...)
		}},
		{"handshake message", func(rc *recConn) []byte {
			return rc.sealed(tlsrec.TypeHandshake, []byte{4, 0, 0, 1, 0}) // NewSessionTicket from a client
		}},
		{"empty inner content", func(rc *recConn) []byte {
			r := rc.sealed(0, nil) // only padding, no content type
			return r
		}},
		{"fatal alert", func(rc *recConn) []byte { return rc.sealed(tlsrec.TypeAlert, []byte{2, 40}) }},
		{"close_notify", func(rc *recConn) []byte { return rc.sealed(tlsrec.TypeAlert, tlsrec.CloseNotifyAlert) }},
		{"truncated then gone", func(rc *recConn) []byte {
			r := rc.sealed(tlsrec.TypeAppData, []byte("\x89\x80abcd"))
			return r[:len(r)-4]
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, rc := dialTLS(t, n, "bad", true, nil)
			c.send(`{"type":"ping","ts":1}`)
			c.expect("pong")
			before := n.hub.count()
			rc.writeRaw(tc.bad(rc))
			if tc.name == "truncated then gone" {
				rc.Conn.(*net.TCPConn).CloseWrite()
			}
			c.waitClosed(5 * time.Second)
			eventually(t, 5*time.Second, "the connection forgotten", func() bool { return n.hub.count() == before-1 })
			bystander.send(`{"type":"ping","ts":7}`)
			bystander.expect("pong")
		})
	}
}

// Idle TLS connections cost the node no goroutine: the count of
// goroutines grows by less than one for every ten connections (the
// goroutine path of tls.go has two per connection).
func TestTLSLoopIdleConnectionsHaveNoGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  uint16
		per  float64 // goroutines per connection expected at most
	}{
		{"TLS 1.3", tls.VersionTLS13, 0.1},
		{"TLS 1.2 (goroutine path)", tls.VersionTLS12, 2.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tlsNode(t, nil)
			warm, _ := dialTLS(t, n, "warm", true, nil) // node-wide goroutines started
			warm.send(`{"type":"ping"}`)
			warm.expect("pong")
			before := runtime.NumGoroutine()
			const k = 100
			for i := range k {
				if tc.max == tls.VersionTLS13 {
					c, _ := dialTLS(t, n, fmt.Sprint("idle", i), false, nil)
					if h, err := ws.ReadHeader(c.r); err != nil || h.OpCode != ws.OpText {
						t.Fatalf("welcome: %v %v", h, err)
					}
					continue
				}
				d := ws.Dialer{
					Header:    ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer " + token(t, fmt.Sprint("idle", i), nil)}}),
					TLSConfig: &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12},
				}
				conn, _, _, err := d.Dial(t.Context(), "wss://"+n.addr+"/ws")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
			}
			eventually(t, 5*time.Second, "all connections open", func() bool { return n.hub.count() == k+1 })
			var extra int
			eventually(t, 5*time.Second, "handshake goroutines ended", func() bool {
				extra = runtime.NumGoroutine() - before
				return float64(extra) <= tc.per*k
			})
			t.Logf("%s: %d goroutines more for %d idle connections", tc.name, extra, k)
			if tc.max == tls.VersionTLS12 && extra < k {
				t.Fatalf("TLS 1.2: %d goroutines more for %d connections: the goroutine path was not taken", extra, k)
			}
		})
	}
}

func TestTLSLoopTLS12FallsBack(t *testing.T) {
	n := tlsNode(t, nil)
	d := ws.Dialer{
		Header:    ws.HandshakeHeaderHTTP(http.Header{"Authorization": {"Bearer " + token(t, "old", nil)}}),
		TLSConfig: &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12},
		Timeout:   5 * time.Second,
	}
	conn, br, _, err := d.Dial(t.Context(), "wss://"+n.addr+"/ws")
	if err != nil {
		t.Fatal(err)
	}
	c := &wsClient{t: t, conn: conn, r: conn, frames: make(chan map[string]any, 64), closed: make(chan struct{})}
	if br != nil {
		c.r = io.MultiReader(br, conn)
	}
	go c.readLoop()
	t.Cleanup(func() { conn.Close(); <-c.closed })
	c.expect("welcome")
	c.send(bigPing(20 << 10))
	c.expect("pong")
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "old"}, Event: "e", Data: raw(`1`)})
	c.expect("message")
	if conns := n.hub.userConns("old"); len(conns) != 1 || conns[0].tlsc == nil || conns[0].tr != nil {
		t.Fatalf("a TLS 1.2 connection not on the goroutine path")
	}
	if got := counterValue(t, n, "wsgate_tls_handshakes_total", "goroutine"); got != 1 {
		t.Fatalf("wsgate_tls_handshakes_total{path=goroutine} = %v, want 1", got)
	}
}

func TestTLSLoopRefusalsAndAPI(t *testing.T) {
	n := tlsNode(t, func(c *config.Gateway) { c.MaxConnsPerIP = 1 })
	dialer := func() *tls.Conn {
		c, err := tls.Dial("tcp", n.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	answer := func(c *tls.Conn, req string) (*http.Response, string) {
		c.Write([]byte(req))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	upgrade := "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	resp, body := answer(dialer(), upgrade+"\r\n")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"unauthorized"`) {
		t.Fatalf("no token: %d %s", resp.StatusCode, body)
	}
	c, _ := dialTLS(t, n, "one", true, nil)
	resp, body = answer(dialer(), upgrade+"Authorization: Bearer "+token(t, "two", nil)+"\r\n\r\n")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "5" {
		t.Fatalf("second connection from the IP: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Not a WebSocket request: net/http answers over the same TLS.
	resp, body = answer(dialer(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz over TLS: %d %s", resp.StatusCode, body)
	}
	// HTTP/2 (ALPN h2) goes to net/http as it is.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}}
	r2, err := hc.Get("https://" + n.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusOK || r2.ProtoMajor != 2 {
		t.Fatalf("/healthz over h2: %d %s", r2.StatusCode, r2.Proto)
	}
	hc.CloseIdleConnections()
	// Close codes and the close handshake over the loop's TLS.
	n.hub.userConns("one")[0].close(protocol.CloseDisconnected, "bye")
	if code := c.waitClosed(5 * time.Second); code != protocol.CloseDisconnected {
		t.Fatalf("close %d", code)
	}
}

// A ping from the node (its ping interval) reaches the client and its
// pong keeps the connection.
func TestTLSLoopServerPing(t *testing.T) {
	n := tlsNode(t, func(c *config.Gateway) { c.PingInterval = time.Second })
	c, _ := dialTLS(t, n, "pinged", false, nil)
	var pings int
	for pings < 2 {
		h, err := ws.ReadHeader(c.r)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, h.Length)
		io.ReadFull(c.r, p)
		if h.OpCode == ws.OpPing {
			pings++
			var f bytes.Buffer
			ws.WriteFrame(&f, ws.MaskFrame(ws.NewPongFrame(p)))
			c.conn.Write(f.Bytes())
		}
	}
	if n.hub.count() != 1 {
		t.Fatal("connection gone after pings")
	}
}

// An idle connection's AEADs are dropped by the sweep (two passes
// without traffic) and built again for its next record, both ways.
func TestTLSLoopIdleKeysDropped(t *testing.T) {
	n := tlsNode(t, nil)
	c, _ := dialTLS(t, n, "sleepy", true, nil)
	sc := n.hub.userConns("sleepy")[0]
	for round := 0; round < 3; round++ {
		sc.mu.Lock()
		sc.tr.Idle()
		sc.tr.Idle()
		dropped := !sc.tr.In.HasAEAD() && !sc.tr.Out.HasAEAD()
		sc.mu.Unlock()
		if !dropped {
			t.Fatal("an idle connection keeps its AEADs after two sweeps")
		}
		c.send(`{"type":"ping","ts":8}`)
		c.expect("pong")
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "sleepy"}, Event: "e", Data: raw(`2`)})
		c.expect("message")
	}
}

// A client that stops reading fills the socket: the sealed rest of a
// short write waits in wbuf for EPOLLOUT, and every message arrives, in
// order, once the client reads again.
func TestTLSLoopBackpressure(t *testing.T) {
	n := tlsNode(t, func(c *config.Gateway) { c.SendQueue = 4096 })
	c, _ := dialTLS(t, n, "slow", false, nil)
	if h, err := ws.ReadHeader(c.r); err != nil || h.OpCode != ws.OpText {
		t.Fatalf("welcome: %v %v", h, err)
	} else {
		io.CopyN(io.Discard, c.r, h.Length)
	}
	const k = 300
	big := strings.Repeat("w", 60<<10)
	for i := 0; i < k; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "slow"}, Event: "e", Data: raw(fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, big))})
	}
	sc := n.hub.userConns("slow")[0]
	eventually(t, 5*time.Second, "a short write waiting for EPOLLOUT", func() bool {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		return sc.waitOut && len(sc.wbuf) > 0
	})
	c.frames, c.closed = make(chan map[string]any, k+16), make(chan struct{})
	go c.readLoop()
	for i := 0; i < k; i++ {
		m := c.expect("message")
		if d, _ := m["data"].(map[string]any); d["i"] != float64(i) {
			t.Fatalf("message %d: got %v", i, d["i"])
		}
	}
}

package gateway

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/tlsrec"
	"github.com/wsgate/wsgate/protocol"
)

// handshakeTLS opens a TLS 1.3 connection to n (crypto/tls on the client,
// with cfg when not nil) whose writes go through the test's record layer
// (see recConn).
func handshakeTLS(t testing.TB, n *testNode, cfg *tls.Config) *recConn {
	t.Helper()
	tcp, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	kl := &keyLogLines{}
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg = cfg.Clone()
	cfg.InsecureSkipVerify, cfg.KeyLogWriter, cfg.MinVersion = true, kl, tls.VersionTLS13
	tc := tls.Client(tcp, cfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	out, err := tlsrec.NewKeys(tc.ConnectionState().CipherSuite, kl.lines["CLIENT_TRAFFIC_SECRET_0"])
	if err != nil {
		t.Fatal(err)
	}
	return &recConn{Conn: tcp, tc: tc, out: out}
}

// upgrade sends the upgrade request of user on rc and reads the 101 and
// the welcome.
func upgrade(t testing.TB, rc *recConn, user string) *wsClient {
	t.Helper()
	return upgradeOn(t, rc, user, true)
}

// upgradeOn sends the upgrade request of user on rc and reads the 101;
// read starts the client's reader goroutine and reads the welcome (else
// the caller reads it).
func upgradeOn(t testing.TB, rc *recConn, user string, read bool) *wsClient {
	t.Helper()
	req := "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer " + token(t, user, nil) + "\r\n\r\n"
	rc.Write([]byte(req))
	br := bufio.NewReader(rc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("upgrade answer: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade answer %d %s", resp.StatusCode, b)
	}
	c := &wsClient{t: t, conn: rc, r: br, frames: make(chan map[string]any, 4096), closed: make(chan struct{})}
	t.Cleanup(func() { rc.Conn.Close(); <-c.closed })
	if !read {
		close(c.closed)
		return c
	}
	go c.readLoop()
	if w := c.next(5 * time.Second); w["type"] != "welcome" {
		t.Fatalf("first frame %v", w)
	}
	return c
}

// ccsRecord is a compatibility ChangeCipherSpec record (plaintext).
var ccsRecord = []byte{tlsrec.TypeCCS, 3, 3, 0, 1, 1}

// Contract §22: a KeyUpdate (asked for or not) or a ChangeCipherSpec
// before the upgrade request. crypto/tls on the node follows the
// client's keys and answers an update_requested with a KeyUpdate of its
// own; the connection must work both ways, and no record may be sealed
// under a (key, nonce) already used (the client, crypto/tls, would fail
// to open the 101 or what follows).
func TestTLSKeyUpdateOrCCSBeforeRequest(t *testing.T) {
	n := tlsNode(t, nil)
	cases := []struct {
		name   string
		before func(rc *recConn)
	}{
		{"KeyUpdate update_requested", func(rc *recConn) { rc.keyUpdate(true) }},
		{"KeyUpdate", func(rc *recConn) { rc.keyUpdate(false) }},
		{"two KeyUpdates", func(rc *recConn) { rc.keyUpdate(true); rc.keyUpdate(true) }},
		{"ChangeCipherSpec", func(rc *recConn) { rc.writeRaw(ccsRecord) }},
		{"ChangeCipherSpec and KeyUpdate", func(rc *recConn) { rc.writeRaw(ccsRecord); rc.keyUpdate(true) }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			user := fmt.Sprint("early", i)
			rc := handshakeTLS(t, n, nil)
			tc.before(rc)
			c := upgrade(t, rc, user)
			for j := 0; j < 3; j++ {
				c.send(`{"type":"ping","ts":1}`)
				c.expect("pong")
				pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: user}, Event: "e", Data: raw(`1`)})
				c.expect("message")
				rc.keyUpdate(j == 1) // and after the request, on whatever path it took
			}
		})
	}
}

// After the loop took the connection over: ChangeCipherSpec records are
// dropped, anywhere between the client's records.
func TestTLSLoopChangeCipherSpec(t *testing.T) {
	n := tlsNode(t, nil)
	c, rc := dialTLS(t, n, "ccs", true, nil)
	if sc := n.hub.userConns("ccs"); len(sc) != 1 || sc[0].tr == nil {
		t.Fatal("not on the loop's record layer")
	}
	for i := 0; i < 3; i++ {
		rc.writeRaw(ccsRecord)
		c.send(`{"type":"ping","ts":1}`)
		c.expect("pong")
	}
	// A ChangeCipherSpec in the same write as a KeyUpdate and a frame.
	rc.writeRaw(append(append([]byte(nil), ccsRecord...), ccsRecord...))
	rc.keyUpdate(true)
	rc.writeRaw(ccsRecord)
	c.send(`{"type":"ping","ts":2}`)
	c.expect("pong")
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "ccs"}, Event: "e", Data: raw(`1`)})
	c.expect("message")
	// A malformed one ends the connection.
	rc.writeRaw([]byte{tlsrec.TypeCCS, 3, 3, 0, 1, 2})
	c.waitClosed(5 * time.Second)
}

// paddedRecord is a record of content type ctype with no content and pad
// zero bytes of padding.
func (c *recConn) paddedRecord(ctype byte, pad int) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	plain := append([]byte{ctype}, make([]byte, pad)...)
	rec := []byte{tlsrec.TypeAppData, 3, 3, 0, 0}
	rec[3], rec[4] = byte((len(plain)+16)>>8), byte(len(plain)+16)
	var nb [12]byte
	rec = c.out.AEAD().Seal(rec, c.out.Nonce(&nb), plain, rec[:tlsrec.HeaderLen])
	c.out.Seq++
	return rec
}

// A run of records without application data (empty, padding only,
// ChangeCipherSpec) longer than crypto/tls allows ends the connection; a
// shorter run does not.
func TestTLSLoopUselessRecords(t *testing.T) {
	n := tlsNode(t, nil)
	useless := func(rc *recConn, k int) []byte {
		var b []byte
		for i := 0; i < k; i++ {
			switch i % 3 {
			case 0:
				b = append(b, rc.sealed(tlsrec.TypeAppData, nil)...)
			case 1:
				b = append(b, rc.paddedRecord(tlsrec.TypeAppData, 200)...)
			default:
				b = append(b, ccsRecord...)
			}
		}
		return b
	}
	c, rc := dialTLS(t, n, "useless", true, nil)
	for i := 0; i < 3; i++ {
		rc.writeRaw(useless(rc, tlsrec.MaxUselessRecords))
		c.send(`{"type":"ping","ts":1}`)
		c.expect("pong")
	}
	rc.writeRaw(useless(rc, 200_000))
	c.waitClosed(10 * time.Second)
	eventually(t, 5*time.Second, "the connection forgotten", func() bool { return n.hub.count() == 0 })
}

// setKeyUpdateAfter sets tlsrec.KeyUpdateAfter for the test: call it before the
// test starts its nodes, whose cleanups run before the old value comes
// back.
func setKeyUpdateAfter(t *testing.T, v uint64) {
	old := tlsrec.KeyUpdateAfter
	tlsrec.KeyUpdateAfter = v
	t.Cleanup(func() { tlsrec.KeyUpdateAfter = old })
}

// The node sends its own KeyUpdate every tlsrec.KeyUpdateAfter records (here
// 4): a crypto/tls client reads everything across the rotations.
func TestTLSLoopOwnKeyUpdate(t *testing.T) {
	setKeyUpdateAfter(t, 4)
	n := tlsNode(t, nil)
	c, _ := dialTLS(t, n, "rot", true, nil)
	sc := n.hub.userConns("rot")[0]
	keys := func() tlsrec.Keys {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		return sc.tr.Out
	}
	first := keys()
	const k = 100
	for i := 0; i < k; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "rot"}, Event: "e", Data: raw(fmt.Sprint(i))})
		if m := c.expect("message"); m["data"] != float64(i) {
			t.Fatalf("message %d: %v", i, m)
		}
		c.send(`{"type":"ping","ts":1}`)
		c.expect("pong")
	}
	// The write secret now is the first one updated some times over.
	last, rotations := keys(), 0
	for first.Secret() != last.Secret() {
		if err := first.Update(); err != nil {
			t.Fatal(err)
		}
		if rotations++; rotations > 10*k {
			t.Fatal("the write secret is not a successor of the first")
		}
	}
	t.Logf("%d KeyUpdates for %d messages", rotations, 2*k)
	if rotations < k/4 {
		t.Fatalf("%d KeyUpdates from the node after %d records, want one every %d records", rotations, 2*k, tlsrec.KeyUpdateAfter)
	}
}

// WSGATE_TLS_OWN_RECORDS=off: TLS 1.3 WebSocket connections work and are
// served by crypto/tls (the goroutine path).
func TestTLSOwnRecordsOff(t *testing.T) {
	n := tlsNode(t, func(c *config.Gateway) { c.TLSOwnRecords = "off" })
	c, rc := dialTLS(t, n, "std", true, nil)
	if st := rc.tc.ConnectionState(); st.Version != tls.VersionTLS13 {
		t.Fatalf("TLS version %#x", st.Version)
	}
	c.send(bigPing(20 << 10))
	c.expect("pong")
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "std"}, Event: "e", Data: raw(`1`)})
	c.expect("message")
	rc.keyUpdate(true)
	c.send(`{"type":"ping","ts":1}`)
	c.expect("pong")
	if conns := n.hub.userConns("std"); len(conns) != 1 || conns[0].tlsc == nil || conns[0].tr != nil {
		t.Fatal("with tls-own-records off, a TLS 1.3 connection is not on crypto/tls")
	}
	if got := counterValue(t, n, "wsgate_tls_handshakes_total", "goroutine"); got != 1 {
		t.Fatalf("wsgate_tls_handshakes_total{path=goroutine} = %v, want 1", got)
	}
	if got := counterValue(t, n, "wsgate_tls_handshakes_total", "loop"); got != 0 {
		t.Fatalf("wsgate_tls_handshakes_total{path=loop} = %v, want 0", got)
	}
}

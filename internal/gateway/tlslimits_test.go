package gateway

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/config"
)

// halfOpen connects and sends the first byte of a ClientHello: the node
// accepts the socket and its handshake waits for the rest. The returned
// channel is closed once the node has closed the socket.
func halfOpen(t *testing.T, n *testNode) (net.Conn, chan struct{}) {
	t.Helper()
	c, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte{recordHandshake}); err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, c)
		close(gone)
	}()
	return c, gone
}

// WSGATE_MAX_CONNS_PER_IP counts the sockets in their TLS handshake:
// those past the limit are closed at accept, before any handshake work,
// and a slot comes back when a handshake ends.
func TestTLSAcceptConnLimitPerIP(t *testing.T) {
	const max, k = 3, 10
	n := tlsNode(t, func(c *config.Gateway) { c.MaxConnsPerIP = max })
	closed := make(chan int, k)
	var socks []net.Conn
	for i := 0; i < k; i++ {
		c, gone := halfOpen(t, n)
		socks = append(socks, c)
		go func() { <-gone; closed <- i }()
	}
	open := map[int]bool{}
	for i := range k {
		open[i] = true
	}
	for j := 0; j < k-max; j++ {
		select {
		case i := <-closed:
			delete(open, i)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d half-open sockets from one IP closed, want %d (limit %d)", j, k, k-max, max)
		}
	}
	if got := counterValue(t, n, "wsgate_handshake_rejected_total", "conn_limit"); got != k-max {
		t.Fatalf("wsgate_handshake_rejected_total{reason=conn_limit} = %v, want %d", got, k-max)
	}
	if got := n.tlsIPs.Count("127.0.0.1"); got != max {
		t.Fatalf("%d sockets in their handshake, want %d", got, max)
	}
	// The handshakes end (their clients go): the slots come back, and
	// the WebSocket connections take them.
	for i := range open {
		socks[i].Close()
	}
	eventually(t, 10*time.Second, "handshake slots released", func() bool { return n.tlsIPs.Count("127.0.0.1") == 0 })
	for i := 0; i < max; i++ {
		c, _ := dialTLS(t, n, fmt.Sprint("ip", i), true, nil)
		c.send(`{"type":"ping","ts":1}`)
		c.expect("pong")
	}
	if got := n.tlsIPs.Count("127.0.0.1"); got != 0 {
		t.Fatalf("%d handshake slots held by established connections", got)
	}
	// With max connections open, the next socket is closed at accept.
	_, gone := halfOpen(t, n)
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		t.Fatalf("a socket past %d open connections was not closed at accept", max)
	}
	if got := counterValue(t, n, "wsgate_handshake_rejected_total", "conn_limit"); got != k-max+1 {
		t.Fatalf("wsgate_handshake_rejected_total{reason=conn_limit} = %v, want %d", got, k-max+1)
	}
}

// WSGATE_HANDSHAKE_RATE_PER_IP limits TLS handshakes at accept (here one
// per 100 s, a burst of one): of several full handshakes from one IP,
// one completes.
func TestTLSAcceptHandshakeRatePerIP(t *testing.T) {
	n := tlsNode(t, func(c *config.Gateway) { c.HandshakeRatePerIP = 0.01 })
	const k = 6
	done := 0
	for i := 0; i < k; i++ {
		c, err := tls.Dial("tcp", n.addr, &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			done++
			c.Close()
		}
	}
	if done != 1 {
		t.Fatalf("%d of %d TLS handshakes from one IP completed, want 1 (rate 0.01/s)", done, k)
	}
	if got := counterValue(t, n, "wsgate_handshake_rejected_total", "rate_limited"); got != k-1 {
		t.Fatalf("wsgate_handshake_rejected_total{reason=rate_limited} = %v, want %d", got, k-1)
	}
}

// An idle HTTP/2 connection on the listen address is closed after
// publicIdleTimeout (not the admin listener's 120 s).
func TestTLSIdleHTTP2Closed(t *testing.T) {
	old := publicIdleTimeout
	publicIdleTimeout = 300 * time.Millisecond
	t.Cleanup(func() { publicIdleTimeout = old })
	n := tlsNode(t, nil)
	c, err := tls.Dial("tcp", n.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	// The client preface and an empty SETTINGS frame, then nothing.
	if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, c)
		close(gone)
	}()
	select {
	case <-gone:
	case <-time.After(60 * time.Second):
		t.Fatal("an idle HTTP/2 connection still open after 60 s")
	}
}

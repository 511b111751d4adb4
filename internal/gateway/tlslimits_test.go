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

	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/tlsrec"
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
	if _, err := c.Write([]byte{tlsrec.TypeHandshake}); err != nil {
		t.Fatal(err)
	}
	gone := make(chan struct{})
	go func() {
		io.Copy(io.Discard, c)
		close(gone)
	}()
	return c, gone
}

// WSGATE_MAX_CONNS_PER_IP on a TLS listener: the sockets in their
// handshake count with the IP's connections, and those past twice the
// limit are closed at accept, before any handshake work; a client just
// past the limit still gets its 429 (contract §2). A slot comes back
// when a handshake ends.
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
	for j := 0; j < k-2*max; j++ {
		select {
		case i := <-closed:
			delete(open, i)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d half-open sockets from one IP closed, want %d (limit %d)", j, k, k-2*max, max)
		}
	}
	rejected := float64(k - 2*max)
	if got := counterValue(t, n, "wsgate_handshake_rejected_total", "conn_limit"); got != rejected {
		t.Fatalf("wsgate_handshake_rejected_total{reason=conn_limit} = %v, want %v", got, rejected)
	}
	if got := n.tlsIPs.Count("127.0.0.1"); got != 2*max {
		t.Fatalf("%d sockets in their handshake, want %d", got, 2*max)
	}
	// The handshakes end (their clients go): the slots come back, and
	// WebSocket connections take the IP's slots.
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
	// One more: a TLS handshake, then 429 with Retry-After.
	tc, err := tls.Dial("tcp", n.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.Write([]byte("GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer " + token(t, "more", nil) + "\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a connection past the limit: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	eventually(t, 10*time.Second, "its handshake slot released", func() bool { return n.tlsIPs.Count("127.0.0.1") == 0 })
	// With max connections open, max more sockets may be in their
	// handshake; the next is closed at accept.
	one := make(chan struct{}, max+1)
	for i := 0; i <= max; i++ {
		_, gone := halfOpen(t, n)
		go func() { <-gone; one <- struct{}{} }()
	}
	select {
	case <-one:
	case <-time.After(30 * time.Second):
		t.Fatalf("none of %d sockets past %d open connections was closed at accept", max+1, max)
	}
	// (the 429 counts under the same reason)
	if got := counterValue(t, n, "wsgate_handshake_rejected_total", "conn_limit"); got != rejected+2 {
		t.Fatalf("wsgate_handshake_rejected_total{reason=conn_limit} = %v, want %v", got, rejected+2)
	}
	if got := n.tlsIPs.Count("127.0.0.1"); got != max {
		t.Fatalf("%d sockets in their handshake, want %d", got, max)
	}
}

// WSGATE_HANDSHAKE_RATE_PER_IP on a TLS listener: TLS handshakes are
// limited at accept to twice the rate, burst twice the rate's (here the
// rate is one per 1000 s, a burst of one: two TLS handshakes). Of several
// full handshakes from one IP, two complete.
func TestTLSAcceptHandshakeRatePerIP(t *testing.T) {
	n := tlsNode(t, func(c *config.Gateway) { c.HandshakeRatePerIP = 0.001 })
	const k = 6
	done := 0
	for i := 0; i < k; i++ {
		c, err := tls.Dial("tcp", n.addr, &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			done++
			c.Close()
		}
	}
	if done != 2 {
		t.Fatalf("%d of %d TLS handshakes from one IP completed, want 2 (rate 0.001/s)", done, k)
	}
	if got := counterValue(t, n, "wsgate_handshake_rejected_total", "rate_limited"); got != k-2 {
		t.Fatalf("wsgate_handshake_rejected_total{reason=rate_limited} = %v, want %d", got, k-2)
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

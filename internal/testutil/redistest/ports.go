package redistest

import (
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
)

// Ports come from [portLow, portHigh): below Linux's ephemeral range
// (32768+) so outgoing connections do not take them, and with room for the
// cluster bus port (port+10000) under it too. The Redis defaults are never
// used, so a developer's own Redis is never touched.
const (
	portLow  = 20000
	portHigh = 30000
)

var reserved = map[int]bool{6379: true, 16379: true, 26379: true}

// freePort returns a port that was free a moment ago (and its bus port,
// when cluster). Starting a server can still collide with another process;
// startServer then tries another port.
func freePort(t testing.TB, cluster bool) int {
	t.Helper()
	for range 1000 {
		p := portLow + rand.IntN(portHigh-portLow)
		if reserved[p] || !canListen(p) || cluster && !canListen(p+10000) {
			continue
		}
		return p
	}
	t.Fatal("redistest: no free port")
	return 0
}

func canListen(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// FreePort returns a loopback port from the same range as the servers of
// this package (never a system service's default), for other test servers.
func FreePort(t testing.TB) int {
	t.Helper()
	return freePort(t, false)
}

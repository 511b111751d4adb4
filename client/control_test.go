package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/client"
)

// TestDialControl: DialOptions.Control gets the socket before it connects
// (the receive buffer it sets is the connection's), and its error fails
// the dial.
func TestDialControl(t *testing.T) {
	srv := newServer(t, serverOpts{})
	var called []string
	control := func(network, address string, c syscall.RawConn) error {
		called = append(called, network+" "+address)
		var err error
		if cerr := c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) }); cerr != nil {
			return cerr
		}
		return err
	}
	conn, _, err := client.Dial(context.Background(), srv.URL, client.DialOptions{User: "u", Control: control})
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimSuffix(strings.TrimPrefix(srv.URL, "ws://"), "/ws")
	if len(called) != 1 || !strings.HasPrefix(called[0], "tcp") || !strings.HasSuffix(called[0], " "+host) {
		t.Errorf("Control called %q, want once for %s", called, host)
	}
	nc, _ := conn.Detach()
	defer nc.Close()
	sc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var rcv int
	sc.Control(func(fd uintptr) { rcv, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) })
	if err != nil || rcv > 2*4096 { // Linux reports twice the size set
		t.Errorf("receive buffer %d (%v), want at most %d", rcv, err, 2*4096)
	}

	refused := errors.New("no socket for you")
	_, _, err = client.Dial(context.Background(), srv.URL, client.DialOptions{User: "u", Control: func(string, string, syscall.RawConn) error { return refused }})
	if !errors.Is(err, refused) {
		t.Errorf("dial with a failing Control: %v, want %v", err, refused)
	}
}

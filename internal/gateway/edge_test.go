package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// heldUntilClosed sends a request head and never the rest; it returns the
// error that ended the read (io.EOF once the node closed the connection).
func heldUntilClosed(t *testing.T, addr, head string) <-chan error {
	c, _ := rawDial(t, addr)
	c.SetDeadline(time.Now().Add(60 * time.Second))
	io.WriteString(c, head)
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, c)
		if err == nil {
			err = io.EOF
		}
		done <- err
	}()
	return done
}

// Contract §2: a request arrives whole within 10 s of its first byte,
// body included, else the connection is closed.
func TestSlowRequestBodyIsClosed(t *testing.T) {
	n := startNode(t, nil)
	heads := map[string]string{
		"Content-Length without the body": "POST /api/v1/publish HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
		"chunked without a chunk":         "POST /api/v1/publish HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"a chunk never ended":             "POST /api/v1/publish HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n{",
	}
	held := map[string]<-chan error{}
	for what, head := range heads {
		held[what] = heldUntilClosed(t, n.addr, head)
	}
	// Meanwhile the node serves others.
	c := n.connect(t, "bystander", "")
	c.send(map[string]any{"type": "ping"})
	c.expect("pong")
	for what, done := range held {
		if err := <-done; !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s: still open after 60 s", what)
			} else {
				t.Logf("%s: ended with %v", what, err)
			}
		}
	}
	c.send(map[string]any{"type": "ping"})
	c.expect("pong")
}

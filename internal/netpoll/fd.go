package netpoll

import (
	"fmt"
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// TakeFD moves a socket (a net.Conn or a net.Listener) out of the Go
// runtime: it duplicates the descriptor (close-on-exec, still
// non-blocking, since the flag lives on the shared file description) and
// closes c, so the runtime's poller forgets it and only this package's
// loop watches it. The caller owns the returned descriptor and closes it
// with unix.Close.
func TakeFD(c io.Closer) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("netpoll: %T has no descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, fmt.Errorf("netpoll: dup: %w", derr)
	}
	// O_NONBLOCK lives on the open file description, which the duplicate
	// shares with the runtime's descriptor: no fcntl needed.
	c.Close()
	return nfd, nil
}

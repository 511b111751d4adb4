package netpoll

import (
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type recorder struct {
	fd       int
	mu       sync.Mutex
	got      []byte
	writable int
	notify   chan struct{}
}

func (r *recorder) OnReadable(buf []byte) {
	for {
		n, err := unix.Read(r.fd, buf)
		if n > 0 {
			r.mu.Lock()
			r.got = append(r.got, buf[:n]...)
			r.mu.Unlock()
			select {
			case r.notify <- struct{}{}:
			default:
			}
		}
		if err != nil || n <= 0 {
			return
		}
	}
}

func (r *recorder) OnWritable() {
	r.mu.Lock()
	r.writable++
	r.mu.Unlock()
}

func TestReadableEventsAndStaleTokens(t *testing.T) {
	p, err := New(Options{Loops: 2, ReadBuffer: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fds, _ := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	defer unix.Close(fds[1])
	r := &recorder{fd: fds[0], notify: make(chan struct{}, 1)}
	tok, err := p.Register(fds[0], r)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("hello, event loop; longer than the 16-byte buffer")
	unix.Write(fds[1], msg)
	deadline := time.After(5 * time.Second)
	for {
		r.mu.Lock()
		done := string(r.got) == string(msg)
		r.mu.Unlock()
		if done {
			break
		}
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("got %q", r.got)
		}
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		w := r.writable
		r.mu.Unlock()
		if w > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("no writable event after registration")
		}
	}
	// After Unregister, the slot's generation changed: a new socket in the
	// same slot is not confused with the old one.
	p.Unregister(fds[0], tok)
	unix.Close(fds[0])
	fds2, _ := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	defer unix.Close(fds2[0])
	defer unix.Close(fds2[1])
	r2 := &recorder{fd: fds2[0], notify: make(chan struct{}, 1)}
	tok2, err := p.Register(fds2[0], r2)
	if err != nil {
		t.Fatal(err)
	}
	if tok2.loop == tok.loop && tok2.gen == tok.gen {
		t.Fatal("generation reused")
	}
	if tok.loop.lookup(tok.slot, tok.gen) != nil {
		t.Fatal("stale token still resolves")
	}
}

func TestTakeFDKeepsTheSocketNonBlocking(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String()) // completes in the listen backlog
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := TakeFD(c)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || flags&unix.O_NONBLOCK == 0 {
		t.Fatalf("flags %x, err %v: the taken descriptor must be non-blocking", flags, err)
	}
	var buf [8]byte
	if _, err := unix.Read(fd, buf[:]); err != unix.EAGAIN {
		t.Fatalf("read on an idle socket: %v, want EAGAIN", err)
	}
}

// blockingAcceptor accepts one connection per event and then holds its
// loop until released, as a slow handshake would.
type blockingAcceptor struct {
	fd       int
	accepted chan int
	release  chan struct{}
}

func (a *blockingAcceptor) OnReadable([]byte) {
	fd, _, err := unix.Accept4(a.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err != nil {
		return
	}
	a.accepted <- fd
	<-a.release
}

func (a *blockingAcceptor) OnWritable() {}

// A listener registered with every loop is served by another loop while
// one is busy with a connection: handshakes do not queue behind one core.
func TestSharedListenerSpreadsOverLoops(t *testing.T) {
	p, err := New(Options{Loops: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fd, err := TakeFD(ln)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	a := &blockingAcceptor{fd: fd, accepted: make(chan int, 2), release: make(chan struct{})}
	s, err := p.RegisterShared(fd, a)
	if err != nil {
		t.Fatal(err)
	}
	defer p.UnregisterShared(fd, s)
	defer close(a.release)
	for i := range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		select {
		case fd := <-a.accepted:
			unix.Close(fd)
		case <-time.After(10 * time.Second):
			t.Fatalf("connection %d not accepted while another loop is busy with connection %d", i+1, i)
		}
	}
}

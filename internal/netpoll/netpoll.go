// Package netpoll is the gateway's event loop: a few goroutines, each
// waiting in epoll_wait on the sockets it owns, calling back into the
// connection only when its socket is readable, writable or hung up.
//
// An idle connection therefore costs no goroutine stack and no buffer:
// only its descriptor, its epoll registration and the caller's state.
// Each loop owns one read buffer shared by all its connections.
//
// Sockets are registered edge-triggered for input, output and hang-up,
// so a socket that became writable again after a short write is reported
// once, without re-arming. The epoll data carries a slot number and a
// generation, never a pointer or a bare descriptor, so an event that
// arrives after its connection was closed (and the descriptor reused)
// finds nothing and is ignored.
package netpoll

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Handler receives a registered socket's events, on the loop goroutine
// that owns the socket. buf is the loop's read buffer, valid only during
// the call. Handlers must not block.
type Handler interface {
	OnReadable(buf []byte)
	OnWritable()
}

// Poller runs Loops event loops.
type Poller struct {
	loops []*loop
	next  uint32
	mu    sync.Mutex
	wg    sync.WaitGroup
	log   *slog.Logger
}

// Options configure a Poller.
type Options struct {
	Loops      int // event loop goroutines; default GOMAXPROCS
	ReadBuffer int // bytes per loop; default 64 KiB
	Logger     *slog.Logger
	// Spin keeps a loop polling (yielding between polls) for this long
	// after its last event before it parks. A parked loop must be woken
	// by whoever makes its sockets ready, and on loopback that is the
	// sender, which pays for it: a load generator spins so that the
	// server it measures does not pay for waking it. 0 (servers): park
	// at once.
	Spin time.Duration
}

type entry struct {
	h   Handler
	gen uint32
}

type loop struct {
	epfd  int
	file  *os.File        // epfd, watched by the Go runtime's poller
	raw   syscall.RawConn // of file
	wakeR int             // eventfd used to stop the loop
	buf   []byte

	mu    sync.Mutex
	slots []entry
	free  []uint32
	gen   uint32
	quit  bool
}

// Token identifies one registration.
type Token struct {
	loop *loop
	slot uint32
	gen  uint32
}

// Registered reports whether t is a registration (not the zero Token).
func (t Token) Registered() bool { return t.loop != nil }

// New starts the event loops.
func New(o Options) (*Poller, error) {
	if o.Loops <= 0 {
		o.Loops = runtime.GOMAXPROCS(0)
	}
	if o.ReadBuffer <= 0 {
		o.ReadBuffer = 64 << 10
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	p := &Poller{log: o.Logger}
	for i := 0; i < o.Loops; i++ {
		l, err := newLoop(o.ReadBuffer)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.loops = append(p.loops, l)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			l.run(p.log, o.Spin)
		}()
	}
	return p, nil
}

func newLoop(bufSize int) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("netpoll: epoll_create1: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("netpoll: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, efd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(efd)
		return nil, fmt.Errorf("netpoll: epoll_ctl eventfd: %w", err)
	}
	// The loop waits for its epoll descriptor in the Go runtime's poller
	// (an epoll descriptor is readable while it has events), not in a
	// blocking epoll_wait: a goroutine parked there holds no thread, so
	// the runtime does not hand its processor to another thread at every
	// wait (measured: a third of the CPU of a connect burst went to those
	// thread switches and to the runtime's monitor waking for them).
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		unix.Close(efd)
		return nil, fmt.Errorf("netpoll: nonblock: %w", err)
	}
	f := os.NewFile(uintptr(epfd), "epoll")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		unix.Close(efd)
		return nil, fmt.Errorf("netpoll: %w", err)
	}
	return &loop{epfd: epfd, file: f, raw: raw, wakeR: efd, buf: make([]byte, bufSize)}, nil
}

// Register adds a non-blocking socket. Events may arrive on the loop
// goroutine before Register returns.
func (p *Poller) Register(fd int, h Handler) (Token, error) {
	p.mu.Lock()
	if len(p.loops) == 0 {
		p.mu.Unlock()
		return Token{}, ErrClosed
	}
	l := p.loops[p.next%uint32(len(p.loops))]
	p.next++
	p.mu.Unlock()
	return l.add(fd, h, armEvent)
}

func (l *loop) add(fd int, h Handler, arm func(slot, gen uint32) unix.EpollEvent) (Token, error) {
	l.mu.Lock()
	if l.quit {
		l.mu.Unlock()
		return Token{}, ErrClosed
	}
	var slot uint32
	if n := len(l.free); n > 0 {
		slot = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		slot = uint32(len(l.slots))
		l.slots = append(l.slots, entry{})
	}
	l.gen++
	gen := l.gen
	l.slots[slot] = entry{h: h, gen: gen}
	l.mu.Unlock()

	ev := arm(slot, gen)
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.release(slot, gen)
		return Token{}, fmt.Errorf("netpoll: epoll_ctl add: %w", err)
	}
	return Token{loop: l, slot: slot, gen: gen}, nil
}

// Shared is a socket registered with every loop: a listening socket, so
// that accepting, and what its handler does inline for each connection
// accepted (a handshake's parse and token check), spreads over the loops.
type Shared struct{ toks []Token }

// exclusiveEvent: each readiness wakes one loop waiting for it (not
// every loop), edge-triggered.
func exclusiveEvent(slot, gen uint32) unix.EpollEvent {
	return unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET | unix.EPOLLEXCLUSIVE, Fd: int32(slot), Pad: int32(gen)}
}

// RegisterShared adds a non-blocking listening socket to every loop
// (EPOLLEXCLUSIVE: the kernel wakes one of the loops waiting). h is
// called on several loops at once and must allow it.
func (p *Poller) RegisterShared(fd int, h Handler) (Shared, error) {
	p.mu.Lock()
	loops := p.loops
	p.mu.Unlock()
	if len(loops) == 0 {
		return Shared{}, ErrClosed
	}
	var s Shared
	for _, l := range loops {
		t, err := l.add(fd, h, exclusiveEvent)
		if err != nil {
			p.UnregisterShared(fd, s)
			return Shared{}, err
		}
		s.toks = append(s.toks, t)
	}
	return s, nil
}

// RearmShared reports the socket's readiness again to the loops (an
// exclusive registration cannot be modified: it is added anew).
func (p *Poller) RearmShared(fd int, s Shared) error {
	for _, t := range s.toks {
		_ = unix.EpollCtl(t.loop.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		ev := exclusiveEvent(t.slot, t.gen)
		if err := unix.EpollCtl(t.loop.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return fmt.Errorf("netpoll: epoll_ctl add: %w", err)
		}
	}
	return nil
}

// UnregisterShared removes the socket from every loop.
func (p *Poller) UnregisterShared(fd int, s Shared) {
	for _, t := range s.toks {
		p.Unregister(fd, t)
	}
}

// Rebind hands a registered socket to another handler (a connection
// that finished its handshake) and re-arms it: if the socket is readable
// or writable now, the loop reports it to h, so input that arrived while
// the old handler ignored its events is not lost.
func (p *Poller) Rebind(fd int, t Token, h Handler) error {
	l := t.loop
	l.mu.Lock()
	if int(t.slot) >= len(l.slots) || l.slots[t.slot].gen != t.gen {
		l.mu.Unlock()
		return errors.New("netpoll: rebind of a released registration")
	}
	l.slots[t.slot].h = h
	l.mu.Unlock()
	return p.Rearm(fd, t)
}

// Rearm asks the loop to report the socket's current readiness again
// (epoll_ctl MOD re-evaluates an edge-triggered registration).
func (p *Poller) Rearm(fd int, t Token) error {
	ev := armEvent(t.slot, t.gen)
	if err := unix.EpollCtl(t.loop.epfd, unix.EPOLL_CTL_MOD, fd, &ev); err != nil {
		return fmt.Errorf("netpoll: epoll_ctl mod: %w", err)
	}
	return nil
}

// armEvent is a socket's registration: edge-triggered input, output and
// hang-up, with the slot and generation as the event's data.
func armEvent(slot, gen uint32) unix.EpollEvent {
	return unix.EpollEvent{
		Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET,
		Fd:     int32(slot),
		Pad:    int32(gen),
	}
}

// Unregister removes the socket; call it before closing the descriptor.
// Events already taken from epoll for it are dropped.
func (p *Poller) Unregister(fd int, t Token) {
	if t.loop == nil {
		return
	}
	_ = unix.EpollCtl(t.loop.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	t.loop.release(t.slot, t.gen)
}

func (l *loop) release(slot, gen uint32) {
	l.mu.Lock()
	if int(slot) < len(l.slots) && l.slots[slot].gen == gen {
		l.slots[slot] = entry{}
		l.free = append(l.free, slot)
	}
	l.mu.Unlock()
}

func (l *loop) lookup(slot, gen uint32) Handler {
	l.mu.Lock()
	defer l.mu.Unlock()
	if int(slot) < len(l.slots) && l.slots[slot].gen == gen {
		return l.slots[slot].h
	}
	return nil
}

func (l *loop) run(log *slog.Logger, spin time.Duration) {
	events := make([]unix.EpollEvent, 256)
	var last time.Time // of the last event, when spinning
	for {
		var n int
		var err error
		rerr := l.raw.Read(func(fd uintptr) bool {
			for {
				n, err = unix.EpollWait(int(fd), events, 0)
				if n > 0 || err != nil {
					return true
				}
				if spin == 0 || time.Since(last) > spin {
					return false // nothing ready: park until there is
				}
				runtime.Gosched()
			}
		})
		if spin > 0 {
			last = time.Now()
		}
		if rerr != nil {
			log.Error("event loop stops: epoll descriptor failed", "err", rerr)
			return
		}
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			log.Error("epoll_wait failed; event loop stops", "err", err)
			return
		}
		for i := 0; i < n; i++ {
			ev := &events[i]
			if ev.Fd == -1 {
				l.mu.Lock()
				quit := l.quit
				l.mu.Unlock()
				if quit {
					return
				}
				continue
			}
			h := l.lookup(uint32(ev.Fd), uint32(ev.Pad))
			if h == nil {
				continue
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				h.OnReadable(l.buf)
			}
			if ev.Events&unix.EPOLLOUT != 0 {
				h.OnWritable()
			}
		}
	}
}

// ErrClosed is Register's error once the poller is closed.
var ErrClosed = errors.New("netpoll: poller closed")

// Close stops the loops and waits for them. Registered sockets are not
// closed (their owners do that).
func (p *Poller) Close() {
	p.mu.Lock()
	loops := p.loops
	p.loops = nil
	p.mu.Unlock()
	for _, l := range loops {
		l.mu.Lock()
		l.quit = true
		l.mu.Unlock()
		var one = [8]byte{1}
		_, _ = unix.Write(l.wakeR, one[:])
	}
	p.wg.Wait()
	for _, l := range loops {
		l.file.Close()
		unix.Close(l.wakeR)
	}
}

package netpoll

import (
	"net"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// The connection layer was chosen by these two benchmarks: the memory the
// Go runtime holds per idle connection (heap and stacks, after GC) under
// each model, with the sockets as real socket pairs.
//
//	go test -run XXX -bench IdleConn -benchtime 1x ./internal/netpoll/
//
// BenchmarkIdleConnEventLoop: the socket registered with this package's
// epoll loop, no goroutine, no buffer. BenchmarkIdleConnGoroutine: the
// classic model, one goroutine blocked in Read with a 4 KiB buffer (what a
// reader goroutine over net.Conn costs before any writer goroutine).

const idleConns = 4000

type nopHandler struct{}

func (nopHandler) OnReadable([]byte) {}
func (nopHandler) OnWritable()       {}

func socketPairs(b *testing.B, n int) (server, client []int) {
	for i := 0; i < n; i++ {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatalf("socketpair %d: %v", i, err)
		}
		server = append(server, fds[0])
		client = append(client, fds[1])
	}
	return server, client
}

func inUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

func BenchmarkIdleConnEventLoop(b *testing.B) {
	for b.Loop() {
		p, err := New(Options{Loops: 2})
		if err != nil {
			b.Fatal(err)
		}
		before := inUse()
		server, client := socketPairs(b, idleConns)
		for _, fd := range server {
			if _, err := p.Register(fd, nopHandler{}); err != nil {
				b.Fatal(err)
			}
		}
		after := inUse()
		b.ReportMetric(float64(after-before)/idleConns, "B/conn")
		p.Close()
		for i := range server {
			unix.Close(server[i])
			unix.Close(client[i])
		}
	}
}

func BenchmarkIdleConnGoroutine(b *testing.B) {
	for b.Loop() {
		before := inUse()
		server, client := socketPairs(b, idleConns)
		conns := make([]net.Conn, 0, idleConns)
		started := make(chan struct{}, idleConns)
		for _, fd := range server {
			f := os.NewFile(uintptr(fd), "s")
			c, err := net.FileConn(f)
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
			go func() {
				buf := make([]byte, 4096)
				started <- struct{}{}
				c.Read(buf)
			}()
		}
		for range idleConns {
			<-started
		}
		after := inUse()
		b.ReportMetric(float64(after-before)/idleConns, "B/conn")
		for i, c := range conns {
			c.Close()
			unix.Close(client[i])
		}
	}
}

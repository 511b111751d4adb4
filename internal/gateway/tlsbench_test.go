package gateway

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/tlsrec"
	"github.com/wsgate/wsgate/protocol"
)

// benchKeys is a writer's and a reader's AES-128 keys for one secret.
func benchKeys(b testing.TB) (w, r tlsrec.Keys) {
	secret := bytes.Repeat([]byte{7}, 32)
	w, err := tlsrec.NewKeys(tls.TLS_AES_128_GCM_SHA256, secret)
	if err != nil {
		b.Fatal(err)
	}
	r, _ = tlsrec.NewKeys(tls.TLS_AES_128_GCM_SHA256, secret)
	return w, r
}

// attachTLS is attach (bench_test.go) for connections whose TLS the loop
// holds: each has its own keys; the far end discards the records.
func attachTLS(b *testing.B, n *Node, k int) {
	for i := 0; i < k; i++ {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
		w, r := benchKeys(b)
		c := &conn{n: n, fd: fds[0], idSeq: n.idSeq.Add(1), user: fmt.Sprint("u", i), state: stOpen, lastRead: time.Now().Unix(), nextPing: time.Now().Add(time.Hour).Unix(),
			tr: &tlsrec.State{In: r, Out: w}}
		n.hub.add(c)
		tok, err := n.poller.Register(c.fd, c)
		if err != nil {
			b.Fatal(err)
		}
		c.token = tok
		unix.SetNonblock(fds[1], false)
		f := os.NewFile(uintptr(fds[1]), "client")
		go io.Copy(io.Discard, f)
		b.Cleanup(func() { f.Close() })
	}
}

// BenchmarkFanOutTLS is BenchmarkFanOut over TLS held by the loop: the
// frame is encoded once, sealed per connection.
func BenchmarkFanOutTLS(b *testing.B) {
	for _, k := range []int{100, 1000, 5000} {
		for _, tlsOn := range []bool{false, true} {
			b.Run(fmt.Sprintf("%d/tls=%v", k, tlsOn), func(b *testing.B) {
				n := benchNode(b, cluster.NewMemory())
				if tlsOn {
					attachTLS(b, n, k)
				} else {
					attach(b, n, k)
				}
				msg := &protocol.Message{ID: "m", Event: "tick", Data: []byte(`{"p":101.25,"s":"ACME","pad":"` + string(bytes.Repeat([]byte{'x'}, 40)) + `"}`), Target: protocol.Target{Type: "broadcast"}}
				body := protocol.AppendMessageJSON(nil, msg)
				conns := n.hub.all()
				drained := func() { waitDrained(conns) }
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					n.deliverLocal(msg.Target, newDelivery(body, classChat, 0, 0))
					if i%4 == 3 {
						drained()
					}
				}
				drained()
				b.StopTimer()
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*k), "ns/delivery")
			})
		}
	}
}

// benchCert is an ECDSA P-256 certificate, as the docs recommend.
func benchCert(b testing.TB) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench"},
		DNSNames: []string{"bench"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// BenchmarkTLSHandshake is a whole TLS 1.3 handshake over a pipe, client
// and server in this process (ns/op is both sides; the profile splits
// them: see docs/performance.md). clone adds the per-connection Config
// clone of listenerTLS.
func BenchmarkTLSHandshake(b *testing.B) {
	cert := benchCert(b)
	for _, clone := range []bool{false, true} {
		b.Run(fmt.Sprintf("clone=%v", clone), func(b *testing.B) {
			base := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, SessionTicketsDisabled: true}
			srvCfg := base
			if clone {
				srvCfg = &tls.Config{Certificates: base.Certificates, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
					c := base.Clone()
					c.KeyLogWriter = io.Discard
					return c, nil
				}}
			}
			cliCfg := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
			b.ReportAllocs()
			for b.Loop() {
				c1, c2 := net.Pipe()
				done := make(chan error, 1)
				go func() { done <- tls.Server(c2, srvCfg).Handshake() }()
				if err := tls.Client(c1, cliCfg).Handshake(); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				c1.Close()
				c2.Close()
			}
		})
	}
}

// BenchmarkTLSConfigClone is the per-connection cost of the key log.
func BenchmarkTLSConfigClone(b *testing.B) {
	base := &tls.Config{Certificates: []tls.Certificate{benchCert(b)}, NextProtos: []string{"h2", "http/1.1"}, SessionTicketsDisabled: true}
	b.ReportAllocs()
	for b.Loop() {
		c := base.Clone()
		c.KeyLogWriter = io.Discard
	}
}

// BenchmarkTLSConnHeap measures the heap a server *tls.Conn keeps after
// its handshake and one small exchange (the design this package does not
// use: crypto/tls driven by the loop over an in-memory transport), and
// the heap of the loop's record layer for comparison. Reported per
// connection; run with -benchtime=1x.
func BenchmarkTLSConnHeap(b *testing.B) {
	cert := benchCert(b)
	srvCfg := &tls.Config{Certificates: []tls.Certificate{cert}, SessionTicketsDisabled: true}
	cliCfg := &tls.Config{InsecureSkipVerify: true}
	const k = 500
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for b.Loop() {
		ctx := context.Background()
		var clients []*tls.Conn
		servers := make([]*tls.Conn, 0, k)
		before := heap()
		for range k {
			c1, c2 := net.Pipe()
			s := tls.Server(c2, srvCfg)
			done := make(chan error, 1)
			go func() {
				if err := s.HandshakeContext(ctx); err != nil {
					done <- err
					return
				}
				buf := make([]byte, 64)
				_, err := s.Read(buf)
				if err == nil {
					_, err = s.Write([]byte("pong"))
				}
				done <- err
			}()
			c := tls.Client(c1, cliCfg)
			if err := c.Handshake(); err != nil {
				b.Fatal(err)
			}
			c.Write([]byte("ping"))
			io.ReadFull(c, make([]byte, 4))
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			servers = append(servers, s)
			clients = append(clients, c)
		}
		// The clients' share: as many client conns again, measured alone.
		withBoth := heap() - before
		for _, c := range clients {
			c.NetConn().Close()
		}
		clients = nil
		withServers := heap() - before
		runtime.KeepAlive(servers)
		b.ReportMetric(float64(withServers)/k, "B/server-conn(+pipe)")
		b.ReportMetric(float64(withBoth-withServers)/k, "B/client-conn(+pipe)")
		servers = nil

		before = heap()
		states := make([]*tlsrec.State, k)
		for i := range states {
			w, r := benchKeys(b)
			states[i] = &tlsrec.State{In: r, Out: w}
		}
		b.ReportMetric(float64(heap()-before)/k, "B/record-layer")
		runtime.KeepAlive(states)

		before = heap()
		pipes := make([][2]net.Conn, k)
		for i := range pipes {
			pipes[i][0], pipes[i][1] = net.Pipe()
		}
		b.ReportMetric(float64(heap()-before)/k, "B/pipe-pair")
		runtime.KeepAlive(pipes)
	}
}

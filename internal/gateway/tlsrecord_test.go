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
	"errors"
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
	"github.com/wsgate/wsgate/protocol"
)

var testSuites = []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384, tls.TLS_CHACHA20_POLY1305_SHA256}

// keyPair is a writer's and a reader's keys for the same secret.
func keyPair(t testing.TB, suite uint16) (w, r trafficKeys) {
	secret := bytes.Repeat([]byte{7}, 32)
	if suite == tls.TLS_AES_256_GCM_SHA384 {
		secret = bytes.Repeat([]byte{7}, 48)
	}
	w, err := newTrafficKeys(suite, secret)
	if err != nil {
		t.Fatal(err)
	}
	r, _ = newTrafficKeys(suite, secret)
	return w, r
}

// feed is consumeTLS's handling of the partial record, for a stream cut
// into chunks: the application data, or the error that ended it.
func feed(t *tlsState, stream []byte, chunk int) ([]byte, error) {
	var out []byte
	for len(stream) > 0 {
		k := min(chunk, len(stream))
		data := append([]byte(nil), stream[:k]...) // the loop's buffer
		stream = stream[k:]
		if len(t.rpart) > 0 {
			t.rpart = append(t.rpart, data...)
			data = t.rpart
		}
		app, rest, res := t.readRecords(data)
		out = append(out, app...)
		t.rpart = append([]byte(nil), rest...)
		if res.wantKeyUpdate {
			t.keyUpdate = true
		}
		if res.err != nil {
			return out, res.err
		}
	}
	if len(t.rpart) > 0 {
		return out, io.ErrUnexpectedEOF
	}
	return out, nil
}

func TestTLSRecordRoundTrip(t *testing.T) {
	for _, suite := range testSuites {
		t.Run(tls.CipherSuiteName(suite), func(t *testing.T) {
			w, r := keyPair(t, suite)
			for _, size := range []int{0, 1, 100, maxPlaintext - 1, maxPlaintext, maxPlaintext + 1, 50000} {
				plain := bytes.Repeat([]byte{'x'}, size)
				rw := recordWriter{keys: &w, open: -1, ctype: recordAppData}
				rw.write(plain[:size/2])
				rw.write(plain[size/2:])
				rw.finish()
				st := &tlsState{in: r}
				for _, chunk := range []int{1, 5, 6, 1000, 1 << 20} {
					st.in.seq = r.seq
					got, err := feed(st, rw.b, chunk)
					if err != nil || !bytes.Equal(got, plain) {
						t.Fatalf("size %d chunk %d: %d bytes back, err %v", size, chunk, len(got), err)
					}
				}
				r.seq = st.in.seq
				if w.seq != r.seq {
					t.Fatalf("size %d: writer at seq %d, reader at %d", size, w.seq, r.seq)
				}
			}
		})
	}
}

func TestTLSRecordKeyUpdate(t *testing.T) {
	for _, suite := range testSuites {
		w, r := keyPair(t, suite)
		var stream []byte
		stream = w.seal(stream, recordAppData, []byte("before"))
		stream = w.seal(stream, recordHandshake, []byte{hsKeyUpdate, 0, 0, 1, 1})
		if err := w.update(); err != nil {
			t.Fatal(err)
		}
		stream = w.seal(stream, recordAppData, []byte(" after"))
		st := &tlsState{in: r}
		got, err := feed(st, stream, 3)
		if err != nil || string(got) != "before after" || !st.keyUpdate || st.in.seq != 1 {
			t.Fatalf("%s: %q err %v update requested %v seq %d", tls.CipherSuiteName(suite), got, err, st.keyUpdate, st.in.seq)
		}
	}
}

// ChangeCipherSpec records are dropped wherever they come, also cut over
// reads; a run of more than maxUselessRecords records without data (CCS,
// empty, padding only) ends the stream, a shorter one does not.
func TestTLSRecordCCSAndUselessRuns(t *testing.T) {
	ccs := []byte{recordCCS, 3, 3, 0, 1, 1}
	w, r := keyPair(t, tls.TLS_AES_128_GCM_SHA256)
	var stream []byte
	stream = append(stream, ccs...)
	stream = w.seal(stream, recordAppData, []byte("a"))
	for i := 0; i < maxUselessRecords; i++ {
		switch i % 3 {
		case 0:
			stream = append(stream, ccs...)
		case 1:
			stream = w.seal(stream, recordAppData, nil)
		default:
			stream = w.seal(stream, recordHandshake, []byte{hsKeyUpdate, 0, 0, 1, 0})
			if err := w.update(); err != nil {
				t.Fatal(err)
			}
		}
	}
	stream = w.seal(stream, recordAppData, []byte("b"))
	for _, chunk := range []int{1, 2, 5, 7, 1 << 20} {
		st := &tlsState{in: r}
		got, err := feed(st, stream, chunk)
		if err != nil || string(got) != "ab" {
			t.Fatalf("chunk %d: %q err %v", chunk, got, err)
		}
	}
	long := append([]byte(nil), stream[:len(stream)-(recordHeaderLen+1+1+16)]...) // without "b"
	long = append(long, ccs...)
	st := &tlsState{in: r}
	if got, err := feed(st, long, 3); err != errUselessRecords || string(got) != "a" {
		t.Fatalf("a run of %d: %q err %v", maxUselessRecords+1, got, err)
	}
	for _, bad := range [][]byte{{recordCCS, 3, 3, 0, 1, 2}, {recordCCS, 3, 3, 0, 2, 1, 1}} {
		if _, err := feed(&tlsState{in: r}, bad, 1); err != errCCS {
			t.Fatalf("%x: err %v, want %v", bad, err, errCCS)
		}
	}
}

func TestTLSRecordRefusals(t *testing.T) {
	cases := map[string]struct {
		rec  func(w *trafficKeys) []byte
		want error
	}{
		"flipped": {func(w *trafficKeys) []byte {
			r := w.seal(nil, recordAppData, []byte("hello"))
			r[len(r)-1] ^= 1
			return r
		}, errRecordMAC},
		"replayed": {func(w *trafficKeys) []byte {
			r := w.seal(nil, recordAppData, []byte("hello"))
			return append(r, r...)
		}, errRecordMAC},
		"short body":    {func(*trafficKeys) []byte { return []byte{recordAppData, 3, 3, 0, 3, 1, 2, 3} }, errRecordMAC},
		"plain type":    {func(*trafficKeys) []byte { return []byte{recordHandshake, 3, 3, 0, 0} }, errRecordType},
		"too long":      {func(*trafficKeys) []byte { return []byte{recordAppData, 3, 3, 0x41, 0x01} }, errRecordOverflow},
		"no type":       {func(w *trafficKeys) []byte { return w.seal(nil, 0, nil) }, errRecordNoType},
		"close_notify":  {func(w *trafficKeys) []byte { return w.seal(nil, recordAlert, closeNotifyAlert) }, errCloseNotify},
		"ticket":        {func(w *trafficKeys) []byte { return w.seal(nil, recordHandshake, []byte{4, 0, 0, 1, 0}) }, errHandshakeMsg},
		"bad keyupdate": {func(w *trafficKeys) []byte { return w.seal(nil, recordHandshake, []byte{hsKeyUpdate, 0, 0, 1, 2}) }, errHandshakeMsg},
		"ccs":           {func(w *trafficKeys) []byte { return w.seal(nil, 20, []byte{1}) }, errRecordType},
	}
	for name, tc := range cases {
		w, r := keyPair(t, tls.TLS_AES_128_GCM_SHA256)
		st := &tlsState{in: r}
		_, err := feed(st, tc.rec(&w), 4)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", name, err, tc.want)
		}
	}
}

// FuzzTLSRecords feeds the record layer arbitrary bytes (it must refuse
// them without a panic, and never return more than it was given) and
// round-trips the input as plaintext, cut into chunks of the first byte.
func FuzzTLSRecords(f *testing.F) {
	w, _ := keyPair(f, tls.TLS_AES_128_GCM_SHA256)
	f.Add(w.seal(nil, recordAppData, []byte("\x81\x85abcdehello")))
	f.Add(w.seal(nil, recordHandshake, []byte{hsKeyUpdate, 0, 0, 1, 1}))
	f.Add(w.seal(nil, recordAlert, closeNotifyAlert))
	f.Add([]byte{recordAppData, 3, 3, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, r := keyPair(t, tls.TLS_AES_128_GCM_SHA256)
		st := &tlsState{in: r}
		in := append([]byte(nil), data...)
		app, rest, _ := st.readRecords(in)
		if len(app)+len(rest) > len(data) {
			t.Fatalf("%d bytes of data and %d left from %d", len(app), len(rest), len(data))
		}
		if len(rest) > 0 && !bytes.Equal(rest, data[len(data)-len(rest):]) {
			t.Fatal("the rest is not the end of the input")
		}
		// Round trip.
		w, r := keyPair(t, tls.TLS_CHACHA20_POLY1305_SHA256)
		chunk := 1
		if len(data) > 0 {
			chunk += int(data[0])
		}
		rw := recordWriter{keys: &w, open: -1, ctype: recordAppData}
		rw.write(data)
		rw.finish()
		got, err := feed(&tlsState{in: r}, rw.b, chunk)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round trip of %d bytes in chunks of %d: %d back, err %v", len(data), chunk, len(got), err)
		}
	})
}

func BenchmarkTLSRecord(b *testing.B) {
	for _, size := range []int{100, 2048} {
		frame := bytes.Repeat([]byte{'m'}, size)
		b.Run(fmt.Sprintf("seal/%dB", size), func(b *testing.B) {
			w, _ := keyPair(b, tls.TLS_AES_128_GCM_SHA256)
			buf := make([]byte, 0, size+64)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				rw := recordWriter{b: buf[:0], keys: &w, open: -1, ctype: recordAppData}
				rw.write(frame)
				rw.finish()
			}
		})
		b.Run(fmt.Sprintf("open/%dB", size), func(b *testing.B) {
			w, r := keyPair(b, tls.TLS_AES_128_GCM_SHA256)
			recs := make([][]byte, 1024)
			for i := range recs {
				recs[i] = w.seal(nil, recordAppData, frame)
			}
			buf := make([]byte, len(recs[0]))
			st := &tlsState{in: r}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i == len(recs) {
					b.StopTimer()
					w, r = keyPair(b, tls.TLS_AES_128_GCM_SHA256)
					for j := range recs {
						recs[j] = w.seal(nil, recordAppData, frame)
					}
					st.in, i = r, 0
					b.StartTimer()
				}
				copy(buf, recs[i])
				i++
				if app, _, res := st.readRecords(buf); res.err != nil || len(app) != size {
					b.Fatal(res.err)
				}
			}
		})
	}
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
		w, r := keyPair(b, tls.TLS_AES_128_GCM_SHA256)
		c := &conn{n: n, fd: fds[0], idSeq: n.idSeq.Add(1), user: fmt.Sprint("u", i), state: stOpen, lastRead: time.Now().Unix(), nextPing: time.Now().Add(time.Hour).Unix(),
			tr: &tlsState{in: r, out: w}}
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
		states := make([]*tlsState, k)
		for i := range states {
			w, r := keyPair(b, tls.TLS_AES_128_GCM_SHA256)
			states[i] = &tlsState{in: r, out: w}
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

// BenchmarkTLSKeysRebuild is the cost of a direction's first record
// after it was idle for a sweep: the AEAD is built again from the key.
func BenchmarkTLSKeysRebuild(b *testing.B) {
	frame := bytes.Repeat([]byte{'m'}, 100)
	w, _ := keyPair(b, tls.TLS_AES_128_GCM_SHA256)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		w.aead = nil
		w.seal(buf[:0], recordAppData, frame)
	}
}

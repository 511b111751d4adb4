package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

// dialTest dials the test server and returns both ends.
func dialTest(t *testing.T, srv *testServer, opts client.DialOptions) (*client.Conn, *serverConn) {
	t.Helper()
	conn, _, err := client.Dial(context.Background(), srv.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	srv.handshake(t)
	return conn, srv.conn(t)
}

// readPeek reads one message with ReadRaw and peeks at it.
func readPeek(t *testing.T, conn *client.Conn) (protocol.ServerPeek, []byte) {
	t.Helper()
	f, p, err := conn.ReadRaw()
	if err != nil {
		t.Fatalf("ReadRaw: %v", err)
	}
	if f != conn.Format() {
		t.Fatalf("ReadRaw format %v, want %v", f, conn.Format())
	}
	pk, err := protocol.PeekServer(f, p)
	if err != nil {
		t.Fatalf("PeekServer(%q): %v", p, err)
	}
	return pk, p
}

func dataJSON(t *testing.T, f protocol.Format, d []byte) string {
	t.Helper()
	if f == protocol.MsgPack {
		j, err := protocol.MsgpackToJSON(d)
		if err != nil {
			t.Fatal(err)
		}
		return string(j)
	}
	return string(d)
}

func TestReadRaw(t *testing.T) {
	for _, format := range []protocol.Format{protocol.JSON, protocol.MsgPack} {
		for _, bufSize := range []int{0, 256} {
			for _, netRead := range []bool{false, true} {
				name := format.String() + "/buf" + strconv.Itoa(bufSize)
				if netRead {
					name += "/netread"
				}
				t.Run(name, func(t *testing.T) {
					testReadRaw(t, format, bufSize, netRead)
				})
			}
		}
	}
}

func testReadRaw(t *testing.T, format protocol.Format, bufSize int, netRead bool) {
	srv := newServer(t, serverOpts{})
	conn, sc := dialTest(t, srv, client.DialOptions{Format: format, ReadBufferSize: bufSize})
	if netRead {
		client.UseNetRead(conn)
	}

	// One message.
	sc.message(5, "e", `{"a":1}`)
	pk, _ := readPeek(t, conn)
	if pk.Type != protocol.TypeMessage || pk.Seq != 5 || string(pk.ID) != "m5" || dataJSON(t, format, pk.Data) != `{"a":1}` {
		t.Fatalf("message: %+v", pk)
	}

	// Several messages in one write, one larger than any read buffer.
	big := `{"x":"` + strings.Repeat("y", 10000) + `"}`
	var batch bytes.Buffer
	for i, d := range []string{`{"n":1}`, big, `{"n":3}`} {
		m := &protocol.Message{ID: "b" + strconv.Itoa(i), Event: "e", Data: json.RawMessage(d), TS: 1, Target: protocol.Target{Type: protocol.TargetBroadcast}}
		p, err := protocol.EncodeMessage(format, m)
		if err != nil {
			t.Fatal(err)
		}
		ws.WriteFrame(&batch, ws.NewFrame(sc.dataOp(), true, p))
	}
	sc.wmu.Lock()
	sc.nc.Write(batch.Bytes())
	sc.wmu.Unlock()
	for i, want := range []string{`{"n":1}`, big, `{"n":3}`} {
		pk, _ := readPeek(t, conn)
		if string(pk.ID) != "b"+strconv.Itoa(i) || dataJSON(t, format, pk.Data) != want {
			t.Fatalf("batch %d: id %q data %.40s", i, pk.ID, pk.Data)
		}
	}

	// A frame dribbled a byte at a time.
	p, _ := protocol.Encode(format, &protocol.Pong{Type: protocol.TypePong, TS: 7})
	var one bytes.Buffer
	ws.WriteFrame(&one, ws.NewFrame(sc.dataOp(), true, p))
	go func() {
		sc.wmu.Lock()
		defer sc.wmu.Unlock()
		for _, c := range one.Bytes() {
			sc.nc.Write([]byte{c})
		}
	}()
	if pk, _ := readPeek(t, conn); pk.Type != protocol.TypePong || pk.TS != 7 {
		t.Fatalf("dribbled pong: %+v", pk)
	}

	// A fragmented message with a ping between its fragments; then
	// ReadFrame and ReadRaw alternate on the same connection.
	m := &protocol.Message{ID: "f", Event: "e", Data: json.RawMessage(big), TS: 2, Target: protocol.Target{Type: protocol.TargetBroadcast}, Seq: 9}
	mp, _ := protocol.EncodeMessage(format, m)
	sc.wmu.Lock()
	ws.WriteFrame(sc.nc, ws.NewFrame(sc.dataOp(), false, mp[:20]))
	ws.WriteFrame(sc.nc, ws.NewFrame(ws.OpPing, true, []byte("mid")))
	ws.WriteFrame(sc.nc, ws.NewFrame(ws.OpContinuation, false, mp[20:5000]))
	ws.WriteFrame(sc.nc, ws.NewFrame(ws.OpContinuation, true, mp[5000:]))
	sc.wmu.Unlock()
	sc.message(10, "e", `{"after":true}`)
	if pk, _ := readPeek(t, conn); pk.Seq != 9 || dataJSON(t, format, pk.Data) != big {
		t.Fatalf("fragmented: seq %d", pk.Seq)
	}
	if p := recv(t, sc.pongs, "pong"); string(p) != "mid" {
		t.Errorf("pong payload %q", p)
	}
	if f, err := conn.ReadFrame(); err != nil || f.Seq != 10 || string(f.Data) != `{"after":true}` {
		t.Fatalf("ReadFrame after ReadRaw: %+v, %v", f, err)
	}
	if client.HoldsReadBuffer(conn) && !netRead {
		t.Error("a read buffer is held between frames")
	}

	// The server's close ends ReadRaw with the code, and is echoed.
	go sc.closeWith(protocol.CloseDisconnected, "kicked")
	_, _, err := conn.ReadRaw()
	var ce *client.CloseError
	if !errors.As(err, &ce) || ce.Code != 4003 || ce.Reason != "kicked" {
		t.Fatalf("ReadRaw after close = %v", err)
	}
	sc.waitClosed(t)
	if code := sc.closeCode.Load(); code != 4003 {
		t.Errorf("echo %d", code)
	}
}

func TestReadRawRefusals(t *testing.T) {
	srv := newServer(t, serverOpts{})

	// A message over MaxMessageBytes breaks the connection.
	conn, sc := dialTest(t, srv, client.DialOptions{MaxMessageBytes: 1000})
	sc.message(1, "e", `{"x":"`+strings.Repeat("y", 2000)+`"}`)
	if _, _, err := conn.ReadRaw(); err == nil || errors.As(err, new(*client.CloseError)) {
		t.Errorf("message over MaxMessageBytes: %v", err)
	}

	// A masked server frame is a protocol error.
	conn, sc = dialTest(t, srv, client.DialOptions{})
	sc.wmu.Lock()
	ws.WriteFrame(sc.nc, ws.MaskFrame(ws.NewFrame(ws.OpText, true, []byte(`{"type":"pong"}`))))
	sc.wmu.Unlock()
	if _, _, err := conn.ReadRaw(); err == nil {
		t.Error("masked frame accepted")
	}

	// So is a continuation without a first fragment.
	conn, sc = dialTest(t, srv, client.DialOptions{})
	sc.write(ws.OpContinuation, []byte(`{}`))
	if _, _, err := conn.ReadRaw(); err == nil {
		t.Error("unexpected continuation accepted")
	}

	// A connection cut in the middle of a frame.
	conn, sc = dialTest(t, srv, client.DialOptions{})
	sc.wmu.Lock()
	sc.nc.Write([]byte{0x81, 10, '{'})
	sc.wmu.Unlock()
	sc.drop()
	if _, _, err := conn.ReadRaw(); err == nil {
		t.Error("truncated frame accepted")
	}
}

func TestReadRawIdleTimeout(t *testing.T) {
	srv := newServer(t, serverOpts{})

	// Nothing arrives: the read fails once the idle timeout passed.
	conn, _ := dialTest(t, srv, client.DialOptions{IdleTimeout: 50 * time.Millisecond})
	if _, _, err := conn.ReadRaw(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle connection: %v", err)
	}

	// A deadline that fired while the connection was active is moved on:
	// the read goes on and gets the message.
	conn, sc := dialTest(t, srv, client.DialOptions{IdleTimeout: time.Minute})
	sc.message(1, "e", `{}`)
	readPeek(t, conn)
	client.ExpireReadDeadline(conn)
	sc.message(2, "e", `{}`)
	if pk, _ := readPeek(t, conn); pk.Seq != 2 {
		t.Fatalf("after an expired deadline: %+v", pk)
	}
}

// BenchmarkReadRaw reads message frames of a broadcast (the bench's
// payload, 100 bytes of data) from a loopback connection: ReadRaw with
// PeekServer, against ReadFrame's full decode. The server side writes 64
// frames per write.
func BenchmarkReadRaw(b *testing.B) {
	for _, format := range []protocol.Format{protocol.JSON, protocol.MsgPack} {
		b.Run(format.String()+"/raw", func(b *testing.B) { benchRead(b, format, true) })
		b.Run(format.String()+"/frame", func(b *testing.B) { benchRead(b, format, false) })
	}
}

func benchRead(b *testing.B, format protocol.Format, raw bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	m := &protocol.Message{ID: "0123456789abcdef", Event: "bench",
		Data: json.RawMessage(`{"i":17,"r":"9f3a61c2","s":0,"t":1767225600123456789,"x":"` + strings.Repeat("x", 34) + `"}`),
		TS:   1767225600123, Target: protocol.Target{Type: protocol.TargetBroadcast}}
	p, err := protocol.EncodeMessage(format, m)
	if err != nil {
		b.Fatal(err)
	}
	op := ws.OpText
	if format == protocol.MsgPack {
		op = ws.OpBinary
	}
	var frame bytes.Buffer
	ws.WriteFrame(&frame, ws.NewFrame(op, true, p))
	const perWrite = 64
	batch := bytes.Repeat(frame.Bytes(), perWrite)

	n := b.N
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		if _, err := ws.Upgrade(nc); err != nil {
			return
		}
		w, _ := protocol.Encode(format, &protocol.Welcome{Type: protocol.TypeWelcome, ConnID: "c", Node: "n", User: "u"})
		ws.WriteFrame(nc, ws.NewFrame(op, true, w))
		for sent := 0; sent < n; sent += perWrite {
			if _, err := nc.Write(batch[:min(perWrite, n-sent)*frame.Len()]); err != nil {
				return
			}
		}
		// Wait for the client to go before closing.
		nc.Read(make([]byte, 1))
	}()
	url := "ws://" + ln.Addr().String() + "/ws"
	h := http.Header{}
	conn, _, err := client.Dial(context.Background(), url, client.DialOptions{Format: format, Header: h, IdleTimeout: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(frame.Len()))
	b.ReportAllocs()
	b.ResetTimer()
	for range n {
		if raw {
			f, p, err := conn.ReadRaw()
			if err != nil {
				b.Fatal(err)
			}
			if pk, err := protocol.PeekServer(f, p); err != nil || pk.Type != protocol.TypeMessage {
				b.Fatal(err)
			}
		} else if f, err := conn.ReadFrame(); err != nil || f.Type != protocol.TypeMessage {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	conn.Close()
	<-done
}

// TestDetach: the bytes a Conn read ahead come back with the socket, and
// the frames continue on it.
func TestDetach(t *testing.T) {
	srv := newServer(t, serverOpts{})
	conn, sc := dialTest(t, srv, client.DialOptions{})
	var batch bytes.Buffer
	for i := range 3 {
		p, _ := protocol.Encode(protocol.JSON, &protocol.Pong{Type: protocol.TypePong, TS: float64(i)})
		ws.WriteFrame(&batch, ws.NewFrame(ws.OpText, true, p))
	}
	sc.wmu.Lock()
	sc.nc.Write(batch.Bytes())
	sc.wmu.Unlock()
	if pk, _ := readPeek(t, conn); pk.TS != 0 {
		t.Fatalf("first frame: %+v", pk)
	}
	nc, buffered := conn.Detach()
	defer nc.Close()
	sc.write(ws.OpText, []byte(`{"type":"pong","ts":3}`))
	// What was buffered, then the socket: frames 1, 2 and 3 in order.
	r := io.MultiReader(bytes.NewReader(buffered), nc)
	for i := 1; i <= 3; i++ {
		h, err := ws.ReadHeader(r)
		payload := make([]byte, h.Length)
		if err == nil {
			_, err = io.ReadFull(r, payload)
		}
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		pk, err := protocol.PeekServer(protocol.JSON, payload)
		if err != nil || pk.TS != float64(i) {
			t.Fatalf("frame %d: %+v %v", i, pk, err)
		}
	}
}

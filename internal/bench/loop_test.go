package bench

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"golang.org/x/sys/unix"

	"github.com/wsgate/wsgate/internal/netpoll"
	"github.com/wsgate/wsgate/protocol"
)

// loopPair is a wsConn on the bench's event loop, connected to a fake
// gateway end through a socket pair.
type loopPair struct {
	r    *runner
	s    *slot
	c    *wsConn
	peer *os.File // the gateway's end (blocking)
}

func newLoopPair(t testing.TB, format protocol.Format, pending []byte) *loopPair {
	t.Helper()
	cfg := Config{Scenario: ScenarioBroadcast, URLs: []string{"ws://127.0.0.1:1/ws"}, Conns: 1, Duration: time.Second, Format: format}.withDefaults()
	r := newRunner(cfg)
	r.startReader()
	if r.poller == nil {
		t.Fatalf("no event loop: %s", r.readerErr)
	}
	t.Cleanup(r.shutdown)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	peer := os.NewFile(uintptr(fds[1]), "gateway")
	t.Cleanup(func() { peer.Close() })
	s := r.slots[0]
	c := &wsConn{s: s, format: format, fd: fds[0], start: time.Now(), done: make(chan readResult, 1), pending: pending, mask: ws.NewMask()}
	return &loopPair{r: r, s: s, c: c, peer: peer}
}

// frame is one unmasked server frame.
func frame(op ws.OpCode, fin bool, p []byte) []byte {
	var b bytes.Buffer
	ws.WriteFrame(&b, ws.NewFrame(op, fin, p))
	return b.Bytes()
}

// benchMessage is a message frame of the run's broadcast stream.
func (lp *loopPair) benchMessage(t testing.TB, format protocol.Format, idx uint64, size int) []byte {
	t.Helper()
	data := appendData(nil, lp.r.runID, 0, idx, time.Now().UnixNano(), size)
	m := &protocol.Message{ID: "m", Event: "bench", Data: json.RawMessage(data), TS: 1, Target: protocol.Target{Type: protocol.TargetBroadcast}}
	p, err := protocol.EncodeMessage(format, m)
	if err != nil {
		t.Fatal(err)
	}
	op := ws.OpText
	if format == protocol.MsgPack {
		op = ws.OpBinary
	}
	return frame(op, true, p)
}

// readClientFrame reads one masked frame the bench wrote.
func (lp *loopPair) readClientFrame(t *testing.T) ws.Frame {
	t.Helper()
	var f ws.Frame
	h, err := ws.ReadHeader(lp.peer)
	if err == nil {
		f.Header, f.Payload = h, make([]byte, h.Length)
		_, err = io.ReadFull(lp.peer, f.Payload)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !f.Header.Masked {
		t.Fatal("client frame not masked")
	}
	ws.Cipher(f.Payload, f.Header.Mask, 0)
	return f
}

// TestLoopConn feeds the event loop's reader every kind of input: frames
// read ahead by the client, frames split over writes, several in one
// write, a fragmented message with a ping inside, a message larger than
// the loop's buffer, gap and redirect frames, and the server's close.
func TestLoopConn(t *testing.T) {
	for _, format := range []protocol.Format{protocol.JSON, protocol.MsgPack} {
		t.Run(format.String(), func(t *testing.T) { testLoopConn(t, format) })
	}
}

func testLoopConn(t *testing.T, format protocol.Format) {
	lp0 := newLoopPair(t, format, nil)
	first := lp0.benchMessage(t, format, 0, 100)
	// The client had read the first message and half of the second.
	second := lp0.benchMessage(t, format, 1, 100)
	lp0.c.pending = append(append([]byte(nil), first...), second[:10]...)
	lp := lp0
	result := make(chan readResult, 1)
	go func() { result <- lp.s.serve(lp.c) }()
	write := func(b []byte) {
		if _, err := lp.peer.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	write(second[10:])

	// Byte by byte, then three in one write.
	for _, c := range lp.benchMessage(t, format, 2, 100) {
		write([]byte{c})
	}
	write(append(append(lp.benchMessage(t, format, 3, 100), lp.benchMessage(t, format, 4, 100)...), lp.benchMessage(t, format, 5, 100)...))

	// A fragmented message with a ping between its fragments.
	whole := lp.benchMessage(t, format, 6, 3000)
	op := ws.OpText
	if format == protocol.MsgPack {
		op = ws.OpBinary
	}
	hs := 4 // 126 + 16-bit length
	payload := whole[hs:]
	write(frame(op, false, payload[:100]))
	write(frame(ws.OpPing, true, []byte("mid")))
	write(frame(ws.OpContinuation, true, payload[100:]))
	if f := lp.readClientFrame(t); f.Header.OpCode != ws.OpPong || string(f.Payload) != "mid" {
		t.Fatalf("answer to the ping: %v %q", f.Header.OpCode, f.Payload)
	}

	// Larger than the loop's 64 KiB buffer.
	write(lp.benchMessage(t, format, 7, 200_000))

	// A gap and a redirect (decoded in full), then the close.
	gap, _ := protocol.Encode(format, &protocol.Gap{Type: protocol.TypeGap, From: 1, To: 4, Missed: 4})
	redirect, _ := protocol.Encode(format, &protocol.Redirect{Type: protocol.TypeRedirect, URL: "ws://elsewhere/ws", Reason: "drain"})
	write(append(frame(op, true, gap), frame(op, true, redirect)...))
	write(frame(ws.OpClose, true, ws.NewCloseFrameBody(4001, "draining")))
	if f := lp.readClientFrame(t); f.Header.OpCode != ws.OpClose {
		t.Fatalf("echo of the close: %v", f.Header.OpCode)
	} else if code, _ := ws.ParseCloseFrameData(f.Payload); code != 4001 {
		t.Fatalf("echo of the close: code %d", code)
	}

	res := <-result
	if res.code != 4001 || !res.healthy {
		t.Errorf("end %+v, want code 4001, healthy", res)
	}
	r := lp.r
	if got := r.received.Load(); got != 8 || r.dups.Load() != 0 || r.foreign.Load() != 0 || r.misrouted.Load() != 0 || r.badFrames.Load() != 0 {
		t.Errorf("received %d dups %d foreign %d misrouted %d bad %d, want 8 received", got, r.dups.Load(), r.foreign.Load(), r.misrouted.Load(), r.badFrames.Load())
	}
	if r.gapFrames.Load() != 1 || r.gapMissed.Load() != 4 || lp.s.lastSeq.Load() != 4 || lp.s.redirect != "ws://elsewhere/ws" {
		t.Errorf("gap frames %d missed %d last seq %d redirect %q", r.gapFrames.Load(), r.gapMissed.Load(), lp.s.lastSeq.Load(), lp.s.redirect)
	}
	// The descriptor is closed: writes fail, Close is a no-op.
	if err := lp.c.WriteClose(1000, ""); err == nil {
		t.Error("write after the end succeeded")
	}
	if err := lp.c.Close(); err != nil {
		t.Error(err)
	}
}

// TestLoopConnClose: Close (churn, storm, the end of the run) shuts the
// socket down; the loop sees the end and reports 1006.
func TestLoopConnClose(t *testing.T) {
	lp := newLoopPair(t, protocol.JSON, nil)
	result := make(chan readResult, 1)
	go func() { result <- lp.s.serve(lp.c) }()
	if _, err := lp.peer.Write(lp.benchMessage(t, protocol.JSON, 0, 100)); err != nil {
		t.Fatal(err)
	}
	if err := lp.c.WriteClose(1000, "bye"); err != nil {
		t.Fatal(err)
	}
	if f := lp.readClientFrame(t); f.Header.OpCode != ws.OpClose {
		t.Fatalf("close frame: %v", f.Header.OpCode)
	}
	if err := lp.c.WriteFrame(&protocol.ClientFrame{Type: protocol.TypePing}); err == nil {
		t.Error("data frame after the close frame accepted")
	}
	lp.c.Close()
	if res := <-result; res.code != 1006 {
		t.Errorf("end %+v, want 1006", res)
	}
	if got := lp.r.received.Load(); got != 1 {
		t.Errorf("received %d, want 1", got)
	}
}

// TestLoopConnProtocolError: a masked server frame breaks the connection,
// as it does a client.Conn.
func TestLoopConnProtocolError(t *testing.T) {
	lp := newLoopPair(t, protocol.JSON, nil)
	result := make(chan readResult, 1)
	go func() { result <- lp.s.serve(lp.c) }()
	var b bytes.Buffer
	ws.WriteFrame(&b, ws.MaskFrame(ws.NewFrame(ws.OpText, true, []byte(`{"type":"pong"}`))))
	if _, err := lp.peer.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	if res := <-result; res.code != 1006 || res.healthy {
		t.Errorf("end %+v, want 1006, not healthy", res)
	}
}

var _ netpoll.Handler = (*wsConn)(nil)

// BenchmarkLoopConn is the event loop's read path for one connection:
// message frames of the bench's broadcast (100 bytes of data) written 64
// at a time into a socket pair, read, peeked at and accounted (latency,
// loss, duplicates). Time per frame; the 15k broadcast's figure is higher
// (one frame per socket per wake-up, none of the state in cache).
func BenchmarkLoopConn(b *testing.B) {
	for _, format := range []protocol.Format{protocol.JSON, protocol.MsgPack} {
		b.Run(format.String(), func(b *testing.B) {
			lp := newLoopPair(b, format, nil)
			lp.r.setTarget(int64(b.N))
			result := make(chan readResult, 1)
			go func() { result <- lp.s.serve(lp.c) }()
			// The frames, encoded beforehand, 64 per write.
			const perWrite = 64
			var writes [][]byte
			for i := 0; i < b.N; i += perWrite {
				var w []byte
				for k := i; k < min(i+perWrite, b.N); k++ {
					w = append(w, lp.benchMessage(b, format, uint64(k), 100)...)
				}
				writes = append(writes, w)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for _, w := range writes {
				if _, err := lp.peer.Write(w); err != nil {
					b.Fatal(err)
				}
			}
			<-lp.r.targetDone
			b.StopTimer()
			if got := lp.r.received.Load(); got != int64(b.N) {
				b.Fatalf("received %d of %d", got, b.N)
			}
			lp.c.Close()
			<-result
		})
	}
}

package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

func TestDial(t *testing.T) {
	srv := newServer(t, serverOpts{})
	since := int64(9)
	ctx := context.Background()
	conn, w, err := client.Dial(ctx, srv.URL, client.DialOptions{Token: "tok", Since: &since, LocalAddr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if w.ConnID != "c1" || w.Node != "n1" || w.URL != srv.URL {
		t.Errorf("welcome %+v", w)
	}
	h := srv.handshake(t)
	if h.auth != "Bearer tok" || h.query.Get("since") != "9" {
		t.Errorf("handshake %+v", h)
	}
	sc := srv.conn(t)

	// A message, then a pong to our ping frame.
	sc.message(10, "e", `{"a":1}`)
	f, err := conn.ReadFrame()
	if err != nil || f.Type != protocol.TypeMessage || f.Seq != 10 || string(f.Data) != `{"a":1}` {
		t.Fatalf("ReadFrame = %+v, %v", f, err)
	}
	ts := 42.5
	if err := conn.WriteFrame(&protocol.ClientFrame{Type: protocol.TypePing, TS: &ts}); err != nil {
		t.Fatal(err)
	}
	if f, err := conn.ReadFrame(); err != nil || f.Type != protocol.TypePong || f.TS != 42.5 {
		t.Fatalf("ReadFrame = %+v, %v", f, err)
	}

	// A WebSocket ping is answered from ReadFrame; a bad frame is skipped.
	sc.write(ws.OpPing, []byte("hb"))
	sc.write(ws.OpText, []byte(`not json`))
	if _, err := conn.ReadFrame(); !errors.Is(err, client.ErrBadFrame) {
		t.Errorf("bad frame: %v", err)
	}
	if p := recv(t, sc.pongs, "pong"); string(p) != "hb" {
		t.Errorf("pong payload %q", p)
	}

	// A fragmented message with a ping between its fragments.
	msg := `{"type":"message","id":"m","event":"e","data":{"big":true},"ts":1,"target":{"type":"user","id":"alice"},"seq":11}`
	sc.wmu.Lock()
	ws.WriteFrame(sc.nc, ws.NewFrame(ws.OpText, false, []byte(msg[:20])))
	ws.WriteFrame(sc.nc, ws.NewFrame(ws.OpPing, true, []byte("mid")))
	ws.WriteFrame(sc.nc, ws.NewFrame(ws.OpContinuation, true, []byte(msg[20:])))
	sc.wmu.Unlock()
	if f, err := conn.ReadFrame(); err != nil || f.Seq != 11 || string(f.Data) != `{"big":true}` {
		t.Fatalf("fragmented: ReadFrame = %+v, %v", f, err)
	}
	if p := recv(t, sc.pongs, "pong"); string(p) != "mid" {
		t.Errorf("pong payload %q", p)
	}

	// The server's close ends ReadFrame with the code, and is echoed.
	go sc.closeWith(protocol.CloseDisconnected, "kicked")
	_, err = conn.ReadFrame()
	var ce *client.CloseError
	if !errors.As(err, &ce) || ce.Code != 4003 || ce.Reason != "kicked" {
		t.Fatalf("ReadFrame after close = %v", err)
	}
	sc.waitClosed(t)
	if code := sc.closeCode.Load(); code != 4003 {
		t.Errorf("echo %d", code)
	}
}

func TestDialRefused(t *testing.T) {
	srv := newServer(t, serverOpts{refuse: func(int64) *refusal {
		return &refusal{status: 429, retryAfter: "7", code: "rate_limited", msg: "too many"}
	}})
	_, _, err := client.Dial(context.Background(), srv.URL, client.DialOptions{User: "bob"})
	var he *client.HandshakeError
	if !errors.As(err, &he) || he.Status != 429 || he.Code != "rate_limited" || he.Message != "too many" || he.RetryAfter.Seconds() != 7 || !he.Retryable() {
		t.Fatalf("Dial = %#v", err)
	}
}

func TestDialCanceled(t *testing.T) {
	srv := newServer(t, serverOpts{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := client.Dial(ctx, srv.URL, client.DialOptions{}); err == nil {
		t.Fatal("Dial with a canceled context succeeded")
	}
}

func TestDialBadURL(t *testing.T) {
	if _, _, err := client.Dial(context.Background(), "http://x/ws", client.DialOptions{}); err == nil {
		t.Fatal("http URL accepted")
	}
}

package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/wsframe"
	"github.com/wsgate/wsgate/protocol"
)

// zClient is a raw client that sees every frame's RSV1 bit and inflates
// compressed payloads itself.
type zClient struct {
	t      testing.TB
	conn   net.Conn
	br     *bufio.Reader
	ext    string // the 101's Sec-WebSocket-Extensions ("" when none)
	frames chan zFrame
	closed chan struct{}
	code   int
	wmu    sync.Mutex
}

type zFrame struct {
	op      byte
	rsv1    bool
	wire    int    // payload bytes on the wire
	payload []byte // inflated when rsv1
}

// dialZ upgrades with ext as the Sec-WebSocket-Extensions header (none
// when empty) on the own accept path, or over TLS with tlsc (TLS 1.3: on
// the loops; TLS 1.2: through net/http).
func dialZ(t testing.TB, addr, user, ext string, tlsc *tls.Config) *zClient {
	t.Helper()
	return dialZClaims(t, addr, user, nil, ext, tlsc)
}

func dialZClaims(t testing.TB, addr, user string, claims map[string]any, ext string, tlsc *tls.Config) *zClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if tlsc != nil {
		nc = tls.Client(nc, tlsc)
	}
	req := "GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"Authorization: Bearer " + token(t, user, claims) + "\r\n"
	if ext != "" {
		req += "Sec-WebSocket-Extensions: " + ext + "\r\n"
	}
	if _, err := nc.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("handshake with extensions %q: %v", ext, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake with extensions %q: status %d", ext, resp.StatusCode)
	}
	c := &zClient{t: t, conn: nc, br: br, ext: resp.Header.Get("Sec-Websocket-Extensions"),
		frames: make(chan zFrame, 1024), closed: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(func() { nc.Close(); <-c.closed })
	if f := c.next(); !strings.Contains(string(f.payload), `"welcome"`) || f.rsv1 {
		t.Fatalf("first frame %q (RSV1 %v): want a welcome, under 512 bytes, uncompressed", f.payload, f.rsv1)
	}
	return c
}

func (c *zClient) readLoop() {
	defer close(c.closed)
	for {
		h, err := ws.ReadHeader(c.br)
		if err != nil {
			return
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(c.br, p); err != nil {
			return
		}
		f := zFrame{op: byte(h.OpCode), rsv1: h.Rsv1(), wire: len(p), payload: p}
		if f.rsv1 {
			if f.payload, err = wsframe.AppendInflate(nil, p, 1<<24); err != nil {
				f.payload = []byte("inflate failed: " + err.Error())
			}
		}
		switch h.OpCode {
		case ws.OpClose:
			if len(p) >= 2 {
				c.code = int(binary.BigEndian.Uint16(p))
			}
			c.conn.Close()
			return
		case ws.OpPing:
			c.write(true, false, wsframe.OpPong, p)
		case ws.OpText, ws.OpBinary:
			c.frames <- f
		}
	}
}

// write sends one masked frame.
func (c *zClient) write(fin, rsv1 bool, op byte, p []byte) {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	if rsv1 {
		b0 |= 0x40
	}
	b := []byte{b0}
	switch n := len(p); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xffff:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	mask := [4]byte{1, 2, 3, 4}
	b = append(b, mask[:]...)
	start := len(b)
	b = append(b, p...)
	ws.Cipher(b[start:], mask, 0)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.conn.Write(b)
}

func (c *zClient) next() zFrame {
	c.t.Helper()
	select {
	case f := <-c.frames:
		return f
	case <-time.After(5 * time.Second):
		c.t.Fatal("no frame within 5s")
	}
	return zFrame{}
}

// expect skips frames until one whose payload holds s.
func (c *zClient) expect(s string) zFrame {
	c.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case f := <-c.frames:
			if bytes.Contains(f.payload, []byte(s)) {
				return f
			}
		case <-deadline:
			c.t.Fatalf("no frame holding %q within 5s", s)
		}
	}
}

func (c *zClient) waitClosed() int {
	c.t.Helper()
	select {
	case <-c.closed:
		return c.code
	case <-time.After(5 * time.Second):
		c.t.Fatal("connection still open after 5s")
	}
	return 0
}

const chromeOffer = "permessage-deflate; client_max_window_bits"

// jsonData is a JSON value of about n bytes that compresses like real
// JSON (repeated keys, varied values).
func jsonData(n int) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < n-20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"item-%d","price":%d.%02d,"tags":["a","b%d"]}`, i, i*7919%1000, i*31%500, i%100, i%13)
	}
	b.WriteString(`]}`)
	return json.RawMessage(b.String())
}

// TestDeflateMatrix: compression on and off × offer or not × a message
// under and over 512 bytes × one recipient and a broadcast: RSV1 exactly
// when negotiated and the frame is large, and the payload (inflated) is
// the message.
func TestDeflateMatrix(t *testing.T) {
	for _, on := range []bool{true, false} {
		n := startNode(t, func(c *config.Gateway) {
			c.Compression = map[bool]string{true: "on", false: "off"}[on]
		})
		for _, offer := range []bool{true, false} {
			ext := ""
			if offer {
				ext = chromeOffer
			}
			user := fmt.Sprintf("u-%v-%v", on, offer)
			a := dialZ(t, n.addr, user, ext, nil)
			b := dialZ(t, n.addr, user+"-b", ext, nil)
			negotiated := on && offer
			if want := map[bool]string{true: wsframe.DeflateResponse}[negotiated]; a.ext != want {
				t.Fatalf("on=%v offer=%v: extension answer %q, want %q", on, offer, a.ext, want)
			}
			for _, size := range []int{100, 511 - 100, 2048} {
				data := jsonData(size)
				for _, target := range []protocol.Target{{Type: "user", ID: user}, {Type: protocol.TargetBroadcast}} {
					pub(t, n, api.PublishRequest{Target: target, Event: "e", Data: data})
					for _, c := range []*zClient{a, b} {
						if target.Type == "user" && c == b {
							continue
						}
						f := c.expect(`"event":"e"`)
						var m protocol.Message
						if err := json.Unmarshal(f.payload, &m); err != nil {
							t.Fatalf("payload %q: %v", f.payload, err)
						}
						if !bytes.Equal(m.Data, data) {
							t.Fatalf("on=%v offer=%v size=%d %s: data differs", on, offer, size, target.Type)
						}
						wantZ := negotiated && len(f.payload) >= wsframe.MinCompressSize
						if f.rsv1 != wantZ {
							t.Fatalf("on=%v offer=%v payload %d bytes %s: RSV1 %v, want %v", on, offer, len(f.payload), target.Type, f.rsv1, wantZ)
						}
						if f.rsv1 && f.wire >= len(f.payload) {
							t.Fatalf("compressed %d bytes to %d", len(f.payload), f.wire)
						}
					}
				}
			}
		}
	}
}

// TestDeflateReplay: frames built for one connection (here the replay of
// the inbox on connect) follow the same rule: compressed from 512 bytes
// on a deflate connection, plain under it.
func TestDeflateReplay(t *testing.T) {
	n := startNode(t, nil)
	big, small := jsonData(2048), json.RawMessage(`{"small":1}`)
	for _, d := range []json.RawMessage{big, small} {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "r"}, Event: "stored", Data: d, Reliable: true})
	}
	for _, offer := range []string{chromeOffer, ""} {
		c := dialZ(t, n.addr, "r", offer, nil)
		for _, d := range []json.RawMessage{big, small} {
			f := c.expect(`"event":"stored"`)
			var m protocol.Message
			if err := json.Unmarshal(f.payload, &m); err != nil || !bytes.Equal(m.Data, d) {
				t.Fatalf("replayed %q (%v)", f.payload, err)
			}
			if want := offer != "" && len(f.payload) >= wsframe.MinCompressSize; f.rsv1 != want {
				t.Fatalf("offer %q: a replayed message of %d bytes with RSV1 %v", offer, len(f.payload), f.rsv1)
			}
		}
		c.conn.Close()
	}
}

// TestDeflateBroadcastCompressesOnce: a broadcast to many deflate
// connections (the batched fan-out path) runs the compressor once, and
// plain connections get the plain frame.
func TestDeflateBroadcastCompressesOnce(t *testing.T) {
	const deflateConns, plainConns = fanOutBatch + 44, 10
	n := startNode(t, nil)
	var zs, plain []*zClient
	for i := 0; i < deflateConns; i++ {
		zs = append(zs, dialZ(t, n.addr, fmt.Sprintf("z%d", i), chromeOffer, nil))
	}
	for i := 0; i < plainConns; i++ {
		plain = append(plain, dialZ(t, n.addr, fmt.Sprintf("p%d", i), "", nil))
	}
	data := jsonData(2048)
	before := n.deflated.Load()
	zBefore, rawBefore := counterValue(t, n, "wsgate_compressed_bytes_total", ""), counterValue(t, n, "wsgate_uncompressed_bytes_total", "")
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: protocol.TargetBroadcast}, Event: "big", Data: data})
	var wire int
	for _, c := range zs {
		f := c.expect(`"event":"big"`)
		if !f.rsv1 {
			t.Fatal("a deflate connection got the broadcast uncompressed")
		}
		wire = f.wire
	}
	for _, c := range plain {
		if f := c.expect(`"event":"big"`); f.rsv1 {
			t.Fatal("a plain connection got a compressed frame")
		}
	}
	if got := n.deflated.Load() - before; got != 1 {
		t.Fatalf("a broadcast to %d deflate connections ran the compressor %d times, want 1", deflateConns, got)
	}
	// The metrics count every compressed frame queued.
	if got := counterValue(t, n, "wsgate_compressed_bytes_total", "") - zBefore; got != float64(deflateConns*wire) {
		t.Fatalf("wsgate_compressed_bytes_total grew by %v, want %d x %d", got, deflateConns, wire)
	}
	if got := counterValue(t, n, "wsgate_uncompressed_bytes_total", "") - rawBefore; got <= float64(deflateConns*len(data)) {
		t.Fatalf("wsgate_uncompressed_bytes_total grew by %v, want more than %d x %d", got, deflateConns, len(data))
	}
}

// The frame a delivery gives its deflate recipients is one frame, the
// same bytes in memory for each (not a compression per recipient that
// happens to be equal); a plain recipient gets the plain frame.
func TestDeflateRecipientsShareOneFrame(t *testing.T) {
	n := startNode(t, nil)
	msg, _ := json.Marshal(map[string]any{"type": "message", "event": "big", "data": jsonData(2048)})
	d := newDelivery(msg, classChat, 0, 0)
	before := n.deflated.Load()
	var first []byte
	for i := range 50 {
		fr := d.frameFor(&conn{n: n.Node, format: protocol.JSON, deflate: true})
		if len(fr) == 0 || fr[0]&0x40 == 0 {
			t.Fatalf("recipient %d: not a compressed frame", i)
		}
		if first == nil {
			first = fr
		} else if &fr[0] != &first[0] || len(fr) != len(first) {
			t.Fatalf("recipient %d got a frame of its own, want the shared one", i)
		}
	}
	if plain := d.frameFor(&conn{n: n.Node, format: protocol.JSON}); plain[0]&0x40 != 0 || len(plain) <= len(first) {
		t.Fatal("the plain recipient got the compressed frame")
	}
	if got := n.deflated.Load() - before; got != 1 {
		t.Fatalf("%d compressions for 50 recipients, want 1", got)
	}
}

// TestDeflateClientMessages: compressed client messages, whole and
// fragmented, are inflated and handled; small compressed ones too.
func TestDeflateClientMessages(t *testing.T) {
	n := startNode(t, nil)
	rx := dialZ(t, n.addr, "rx", "", nil)
	tx := dialZClaims(t, n.addr, "tx", map[string]any{"pub": []string{"user:*"}}, chromeOffer, nil)
	send := func(id string, data json.RawMessage, frag bool) {
		b, _ := json.Marshal(map[string]any{"type": "publish", "id": id, "target": map[string]string{"type": "user", "id": "rx"}, "event": "c", "data": data})
		z := wsframe.AppendDeflate(nil, b)
		if frag {
			tx.write(false, true, wsframe.OpText, z[:len(z)/2])
			tx.write(true, false, wsframe.OpContinuation, z[len(z)/2:])
		} else {
			tx.write(true, true, wsframe.OpText, z)
		}
		rep := tx.expect(`"id":"` + id + `"`)
		if !bytes.Contains(rep.payload, []byte(`"ok":true`)) {
			t.Fatalf("reply to %s: %s", id, rep.payload)
		}
		var m protocol.Message
		if err := json.Unmarshal(rx.expect(`"event":"c"`).payload, &m); err != nil || !bytes.Equal(m.Data, data) {
			t.Fatalf("%s: received %s (%v)", id, m.Data, err)
		}
	}
	send("small", json.RawMessage(`{"x":1}`), false)
	send("large", jsonData(4000), false)
	send("fragmented", jsonData(4000), true)
	// An uncompressed message on the same connection still works.
	tx.write(true, false, wsframe.OpText, []byte(`{"type":"ping","ts":5}`))
	tx.expect(`"pong"`)
}

// TestDeflateBomb: a compressed message inflating past
// WSGATE_MAX_MESSAGE_BYTES is closed with 1009, while the wire frame is
// far below it; the node keeps serving another connection.
func TestDeflateBomb(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.MaxMessageBytes = 4096 })
	other := dialZ(t, n.addr, "other", chromeOffer, nil)
	bomber := dialZ(t, n.addr, "bomber", chromeOffer, nil)
	b := append([]byte(`{"type":"ping","pad":"`), bytes.Repeat([]byte("a"), 1<<20)...)
	b = append(b, `"}`...)
	z := wsframe.AppendDeflate(nil, b)
	if len(z) >= 4096 {
		t.Fatalf("the bomb is %d bytes on the wire", len(z))
	}
	bomber.write(true, true, wsframe.OpText, z)
	if code := bomber.waitClosed(); code != protocol.CloseTooBig {
		t.Fatalf("bomb closed with %d, want 1009", code)
	}
	// Just under the limit inflated is fine.
	ok := dialZ(t, n.addr, "ok", chromeOffer, nil)
	b = append([]byte(`{"type":"ping","ts":7,"pad":"`), bytes.Repeat([]byte("a"), 4000)...)
	ok.write(true, true, wsframe.OpText, wsframe.AppendDeflate(nil, append(b, `"}`...)))
	ok.expect(`"pong"`)
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "other"}, Event: "still", Data: jsonData(1000)})
	if f := other.expect(`"event":"still"`); !f.rsv1 {
		t.Fatal("not compressed")
	}
}

// TestDeflateProtocolErrors: RSV1 where it may not be is closed with
// 1002; a compressed message that does not inflate with 1007.
func TestDeflateProtocolErrors(t *testing.T) {
	n := startNode(t, nil)
	z := wsframe.AppendDeflate(nil, []byte(`{"type":"ping"}`))
	for _, tc := range []struct {
		name  string
		offer string
		send  func(c *zClient)
		code  int
	}{
		{"rsv1 without negotiation", "", func(c *zClient) { c.write(true, true, wsframe.OpText, z) }, 1002},
		{"rsv1 when compression was declined", "permessage-deflate; server_max_window_bits=9", func(c *zClient) { c.write(true, true, wsframe.OpText, z) }, 1002},
		{"rsv1 on ping", chromeOffer, func(c *zClient) { c.write(true, true, wsframe.OpPing, nil) }, 1002},
		{"rsv1 on close", chromeOffer, func(c *zClient) { c.write(true, true, wsframe.OpClose, []byte{3, 232}) }, 1002},
		{"rsv1 on continuation", chromeOffer, func(c *zClient) {
			c.write(false, false, wsframe.OpText, []byte(`{"type":`))
			c.write(true, true, wsframe.OpContinuation, []byte(`"ping"}`))
		}, 1002},
		{"not deflate", chromeOffer, func(c *zClient) { c.write(true, true, wsframe.OpText, []byte{0xff, 0xff, 0xff, 0xff}) }, 1007},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialZ(t, n.addr, "pe", tc.offer, nil)
			tc.send(c)
			if code := c.waitClosed(); code != tc.code {
				t.Fatalf("closed with %d, want %d", code, tc.code)
			}
		})
	}
}

// TestDeflateOffers: whatever the extension header holds, the handshake
// succeeds; permessage-deflate is answered exactly for acceptable offers,
// on the own accept path and through net/http (TLS).
func TestDeflateOffers(t *testing.T) {
	certFile, keyFile := selfSigned(t)
	plain := startNode(t, nil)
	secure := startNode(t, func(c *config.Gateway) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile })
	for _, tc := range []struct {
		offer string
		want  bool
	}{
		{chromeOffer, true},
		{"permessage-deflate", true},
		{`permessage-deflate; client_max_window_bits="10"`, true},
		{"x-webkit-deflate-frame, permessage-deflate; server_no_context_takeover", true},
		{"permessage-deflate; server_max_window_bits=10", false},
		{"permessage-deflate; server_max_window_bits=10, permessage-deflate", true},
		{"permessage-deflate; bogus", false},
		{"permessage-deflate; client_max_window_bits=99", false},
		{`permessage-deflate; client_max_window_bits="12`, false},
		{";;,,=", false},
		{"x-webkit-deflate-frame", false},
	} {
		for _, path := range []struct {
			name string
			addr string
			tlsc *tls.Config
		}{{"own", plain.addr, nil}, {"tls", secure.addr, &tls.Config{InsecureSkipVerify: true}}, {"net/http", secure.addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12}}} {
			c := dialZ(t, path.addr, "o", tc.offer, path.tlsc)
			if got := c.ext != ""; got != tc.want {
				t.Fatalf("%s path, offer %q: answered %q, want accepted=%v", path.name, tc.offer, c.ext, tc.want)
			}
			if tc.want && c.ext != wsframe.DeflateResponse {
				t.Fatalf("answer %q", c.ext)
			}
			pub(t, pick(plain, secure, path.name), api.PublishRequest{Target: protocol.Target{Type: "user", ID: "o"}, Event: "x", Data: jsonData(1000)})
			if f := c.expect(`"event":"x"`); f.rsv1 != tc.want {
				t.Fatalf("%s path, offer %q: RSV1 %v", path.name, tc.offer, f.rsv1)
			}
			c.conn.Close()
		}
	}
}

func pick(plain, secure *testNode, path string) *testNode {
	if path == "own" {
		return plain
	}
	return secure
}

// TestDeflateIdleState: a connection that negotiated deflate holds no
// compression state: the conn and its extra hold no compressor or
// decompressor (only the bit conn.deflate), and after a compressed
// message each way the connection keeps no data.
func TestDeflateIdleState(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeOf(conn{}), reflect.TypeOf(connExtra{}), reflect.TypeOf(fragment{})} {
		for i := 0; i < typ.NumField(); i++ {
			ft := typ.Field(i).Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if p := ft.PkgPath(); p == "compress/flate" || strings.HasPrefix(p, "github.com/gobwas/ws/wsflate") ||
				(p == "github.com/wsgate/wsgate/internal/wsframe" && ft.Name() != "Header") {
				t.Fatalf("%s.%s holds compression state (%s)", typ.Name(), typ.Field(i).Name, ft)
			}
		}
	}
	// The one bit of state costs no byte: conn is as large without it.
	var fields []reflect.StructField
	for i, typ := 0, reflect.TypeOf(conn{}); i < typ.NumField(); i++ {
		if f := typ.Field(i); f.Name != "deflate" {
			fields = append(fields, reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: f.Type})
		}
	}
	if with, without := reflect.TypeOf(conn{}).Size(), reflect.StructOf(fields).Size(); with != without {
		t.Fatalf("conn is %d bytes, %d without its deflate bit", with, without)
	}
	n := startNode(t, nil)
	z := dialZ(t, n.addr, "idle", chromeOffer, nil)
	z.write(true, true, wsframe.OpText, wsframe.AppendDeflate(nil, []byte(`{"type":"ping","ts":1,"pad":"`+strings.Repeat("p", 2000)+`"}`)))
	z.expect(`"pong"`)
	pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "idle"}, Event: "x", Data: jsonData(3000)})
	if f := z.expect(`"event":"x"`); !f.rsv1 {
		t.Fatal("not compressed")
	}
	c := n.hub.userConns("idle")[0]
	eventually(t, 5*time.Second, "idle", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.running && !c.writing
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deflate {
		t.Fatal("deflate not negotiated")
	}
	// What a plain connection keeps after a message (outq and lat keep
	// their small backing arrays) is the same; nothing else is left.
	if len(c.outq) != 0 || c.wbuf != nil || c.rbuf != nil || c.frag != nil || len(c.lat) != 0 {
		t.Fatalf("an idle deflate connection holds data: outq %d wbuf %d rbuf %d frag %v lat %d", len(c.outq), cap(c.wbuf), cap(c.rbuf), c.frag != nil, len(c.lat))
	}
	if (c.x != nil && len(c.x.inq) > 0) || c.sess.Holding() > 0 {
		t.Fatalf("an idle deflate connection holds frames: %+v", c.x)
	}
}

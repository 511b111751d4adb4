package gateway

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/golang-jwt/jwt/v5"
	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testSecret = "test-secret-0123456789"

// testNode is a node on a real loopback listener with the embedded backend.
type testNode struct {
	*Node
	addr  string
	admin string // the admin listener's address, when cfg.AdminListen was set
	stop  func() // Shutdown and wait for Serve (once; the test's cleanup calls it too)
}

func startNode(t *testing.T, mutate func(*config.Gateway)) *testNode {
	t.Helper()
	return startNodeWith(t, cluster.NewMemory(), mutate)
}

// before, when given, runs between New and Start (e.g. EnableEvents).
func startNodeWith(t testing.TB, backend cluster.Backend, mutate func(*config.Gateway), before ...func(*Node)) *testNode {
	t.Helper()
	cfg := new(config.Gateway)
	if err := config.NewGatewaySet(cfg).Load(nil, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.NodeID = "t1"
	cfg.JWTSecret = testSecret
	cfg.APIKey = "k"
	cfg.HeartbeatInterval = 200 * time.Millisecond
	if mutate != nil {
		mutate(cfg)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AdvertiseURL = "ws://" + ln.Addr().String() + "/ws"
	var adminLn net.Listener
	if cfg.AdminListen != "" {
		if adminLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			t.Fatal(err)
		}
		cfg.Listen, cfg.AdminListen = ln.Addr().String(), adminLn.Addr().String()
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, err := New(*cfg, backend, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		f(n)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); n.Serve(ln) }()
	adminDone := make(chan struct{})
	tn := &testNode{Node: n, addr: ln.Addr().String()}
	if adminLn != nil {
		tn.admin = adminLn.Addr().String()
		go func() { defer close(adminDone); n.ServeAdmin(adminLn) }()
	} else {
		close(adminDone)
	}
	tn.stop = sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
		<-done
		<-adminDone
	})
	t.Cleanup(tn.stop)
	return tn
}

func token(t testing.TB, sub string, extra map[string]any) string {
	claims := jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		claims[k] = v
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wsClient is a raw test client: a reader goroutine collects frames.
type wsClient struct {
	t      testing.TB
	conn   net.Conn
	r      io.Reader
	frames chan map[string]any
	closed chan struct{}
	code   int
	wmu    sync.Mutex
}

func (n *testNode) dial(t testing.TB, query string, hdr http.Header, read bool) *wsClient {
	t.Helper()
	d := ws.Dialer{Header: ws.HandshakeHeaderHTTP(hdr), Timeout: 5 * time.Second}
	conn, br, _, err := d.Dial(context.Background(), "ws://"+n.addr+"/ws"+query)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c := &wsClient{t: t, conn: conn, r: conn, frames: make(chan map[string]any, 4096), closed: make(chan struct{})}
	if br != nil {
		// The welcome may have come with the 101 answer.
		c.r = io.MultiReader(br, conn)
	}
	t.Cleanup(func() { conn.Close(); <-c.closed })
	if read {
		go c.readLoop()
	} else {
		close(c.closed)
	}
	return c
}

func (n *testNode) connect(t testing.TB, user string, query string) *wsClient {
	t.Helper()
	c := n.dial(t, query, http.Header{"Authorization": {"Bearer " + token(t, user, nil)}}, true)
	if w := c.next(5 * time.Second); w["type"] != "welcome" {
		t.Fatalf("first frame %v", w)
	}
	return c
}

func (c *wsClient) readLoop() {
	defer close(c.closed)
	for {
		h, err := ws.ReadHeader(c.r)
		if err != nil {
			return
		}
		payload := make([]byte, h.Length)
		if _, err := io.ReadFull(c.r, payload); err != nil {
			return
		}
		switch h.OpCode {
		case ws.OpClose:
			if len(payload) >= 2 {
				c.code = int(binary.BigEndian.Uint16(payload))
			}
			c.conn.Close()
			return
		case ws.OpPing:
			c.wmu.Lock()
			wsutil.WriteClientMessage(c.conn, ws.OpPong, payload)
			c.wmu.Unlock()
		case ws.OpText:
			var m map[string]any
			if err := json.Unmarshal(payload, &m); err != nil {
				m = map[string]any{"type": "undecodable", "raw": string(payload)}
			}
			c.frames <- m
		case ws.OpBinary: // format=msgpack
			var m map[string]any
			if err := msgpack.Unmarshal(payload, &m); err != nil {
				m = map[string]any{"type": "undecodable", "raw": string(payload)}
			}
			c.frames <- m
		}
	}
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	var b []byte
	switch x := v.(type) {
	case string:
		b = []byte(x)
	default:
		b, _ = json.Marshal(v)
	}
	c.sendRaw(ws.OpText, b)
}

func (c *wsClient) sendRaw(op ws.OpCode, b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	wsutil.WriteClientMessage(c.conn, op, b)
}

// next returns the next frame or fails after d.
func (c *wsClient) next(d time.Duration) map[string]any {
	c.t.Helper()
	select {
	case f := <-c.frames:
		return f
	case <-time.After(d):
		c.t.Fatalf("no frame within %v", d)
	}
	return nil
}

// expect skips frames until one of type typ.
func (c *wsClient) expect(typ string) map[string]any {
	c.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case f := <-c.frames:
			if f["type"] == typ {
				return f
			}
		case <-deadline:
			c.t.Fatalf("no %q frame within 5s", typ)
		}
	}
}

// waitClosed waits for the server's close and returns its code.
func (c *wsClient) waitClosed(d time.Duration) int {
	c.t.Helper()
	select {
	case <-c.closed:
		return c.code
	case <-time.After(d):
		c.t.Fatalf("connection still open after %v", d)
	}
	return 0
}

// eventually polls cond until true or fails after d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pub(t testing.TB, n *testNode, r api.PublishRequest) api.PublishResult {
	t.Helper()
	res, err := n.Publish(context.Background(), r)
	if err != nil {
		t.Fatalf("publish %+v: %v", r, err)
	}
	return res
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// publishBatch publishes a batch's JSON messages as POST
// /api/v1/publish/batch does, each with the trace context tp.
func (n *testNode) publishBatch(ctx context.Context, msgs []json.RawMessage, tp string) []any {
	reqs, errs := api.DecodeBatch(msgs, tp)
	return n.PublishBatch(ctx, reqs, errs)
}

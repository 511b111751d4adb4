package client_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/wsgate/wsgate/protocol"
)

// A small gateway stand-in speaking the contract's frames over a real
// loopback listener: welcome, messages, replies, pongs, gaps, redirects,
// closes with any code and refused handshakes.

// waitTimeout bounds every wait of the tests on an event.
const waitTimeout = 5 * time.Second

type handshake struct {
	n         int64
	query     url.Values
	auth      string
	protocols []string // offered by the client
	selected  string   // selected by the server
	at        time.Time
}

type refusal struct {
	status     int
	retryAfter string
	code, msg  string
}

type serverOpts struct {
	node string
	// refuse, when it returns non-nil, refuses handshake number n.
	refuse func(n int64) *refusal
	// script runs after the welcome of connection number sc.n; the
	// connection stays open until the client or the script closes it.
	script func(sc *serverConn)
	// respond answers a join/leave/publish; nil = reply ok.
	respond func(sc *serverConn, cf *protocol.ClientFrame)
	// inboxSeq is the welcome's inbox_seq; 0 = 1,000,000 (a user with a
	// long history, so that it never lowers the client's resume point).
	inboxSeq int64
	// rooms is the welcome's rooms (reliable rooms and their seqs).
	rooms map[string]int64
}

type testServer struct {
	t    *testing.T
	opts serverOpts
	srv  *httptest.Server
	URL  string // ws://127.0.0.1:port/ws

	n     atomic.Int64
	hs    chan *handshake
	conns chan *serverConn // every accepted connection, in order

	mu   sync.Mutex
	live map[*serverConn]struct{}
	wg   sync.WaitGroup
}

func newServer(t *testing.T, opts serverOpts) *testServer {
	t.Helper()
	if opts.node == "" {
		opts.node = "n1"
	}
	s := &testServer{
		t:     t,
		opts:  opts,
		hs:    make(chan *handshake, 100),
		conns: make(chan *serverConn, 100),
		live:  make(map[*serverConn]struct{}),
	}
	s.srv = httptest.NewServer(s)
	s.URL = "ws" + strings.TrimPrefix(s.srv.URL, "http") + "/ws"
	t.Cleanup(s.Close)
	return s
}

// Close drops every connection and waits for their goroutines.
func (s *testServer) Close() {
	s.srv.Close()
	s.mu.Lock()
	for sc := range s.live {
		sc.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *testServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.wg.Add(1)
	defer s.wg.Done()
	n := s.n.Add(1)
	h := &handshake{n: n, query: r.URL.Query(), auth: r.Header.Get("Authorization"), at: time.Now()}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			h.protocols = append(h.protocols, strings.TrimSpace(p))
		}
	}
	if s.opts.refuse != nil {
		if rf := s.opts.refuse(n); rf != nil {
			s.hs <- h
			if rf.retryAfter != "" {
				w.Header().Set("Retry-After", rf.retryAfter)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rf.status)
			json.NewEncoder(w).Encode(map[string]any{"error": protocol.ErrorBody{Code: rf.code, Message: rf.msg}})
			return
		}
	}
	up := ws.HTTPUpgrader{Protocol: func(p string) bool { return p == "wsgate.v1" }}
	nc, rw, hsr, err := up.Upgrade(r, w)
	if err != nil {
		s.t.Errorf("server: upgrade: %v", err)
		return
	}
	h.selected = hsr.Protocol
	s.hs <- h
	format, _ := protocol.ParseFormat(r.URL.Query().Get("format"))
	sc := &serverConn{
		s: s, n: n, nc: nc, br: rw.Reader, format: format, hs: h,
		frames: make(chan *protocol.ClientFrame, 1000),
		acks:   make(chan int64, 1000),
		pongs:  make(chan []byte, 10),
		closed: make(chan struct{}),
	}
	s.mu.Lock()
	s.live[sc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		nc.Close()
		s.mu.Lock()
		delete(s.live, sc)
		s.mu.Unlock()
	}()

	user := h.query.Get("user")
	if user == "" {
		user = "alice"
	}
	inboxSeq := s.opts.inboxSeq
	if inboxSeq == 0 {
		inboxSeq = 1_000_000
	}
	sc.send(&protocol.Welcome{Type: protocol.TypeWelcome, ConnID: "c" + strconv.FormatInt(n, 10), Node: s.opts.node, User: user, PingIntervalMS: 25000, InboxSeq: inboxSeq, Rooms: s.opts.rooms})
	s.conns <- sc
	s.wg.Add(1)
	go sc.readLoop()
	if s.opts.script != nil {
		s.opts.script(sc)
	}
	<-sc.closed
}

// handshake returns the next handshake the server saw.
func (s *testServer) handshake(t *testing.T) *handshake {
	t.Helper()
	return recv(t, s.hs, "handshake")
}

// conn returns the next connection the server accepted.
func (s *testServer) conn(t *testing.T) *serverConn {
	t.Helper()
	return recv(t, s.conns, "server connection")
}

type serverConn struct {
	s      *testServer
	n      int64
	nc     net.Conn
	br     *bufio.Reader
	format protocol.Format
	hs     *handshake
	wmu    sync.Mutex

	frames    chan *protocol.ClientFrame // every data frame received
	acks      chan int64                 // seq of every ack received
	pongs     chan []byte                // payload of WebSocket pongs
	closed    chan struct{}              // the reader ended
	closeCode atomic.Int64               // code of the client's close frame
}

func (sc *serverConn) write(op ws.OpCode, p []byte) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	ws.WriteFrame(sc.nc, ws.NewFrame(op, true, p))
}

func (sc *serverConn) dataOp() ws.OpCode {
	if sc.format == protocol.MsgPack {
		return ws.OpBinary
	}
	return ws.OpText
}

// send writes any server frame struct.
func (sc *serverConn) send(v any) {
	p, err := protocol.Encode(sc.format, v)
	if err != nil {
		panic(err)
	}
	sc.write(sc.dataOp(), p)
}

func (sc *serverConn) message(seq int64, event, data string) {
	m := &protocol.Message{ID: "m" + strconv.FormatInt(seq, 10), Event: event, Data: json.RawMessage(data), TS: time.Now().UnixMilli(), Target: protocol.Target{Type: protocol.TargetUser, ID: "alice"}, Seq: seq}
	p, err := protocol.EncodeMessage(sc.format, m)
	if err != nil {
		panic(err)
	}
	sc.write(sc.dataOp(), p)
}

// roomMessages sends reliable messages of room with the given seqs.
func (sc *serverConn) roomMessages(room string, seqs ...int64) {
	for _, seq := range seqs {
		m := &protocol.Message{ID: room + strconv.FormatInt(seq, 10), Event: "e", Data: json.RawMessage(`1`), TS: time.Now().UnixMilli(), Target: protocol.Target{Type: protocol.TargetRoom, ID: room}, Seq: seq}
		p, err := protocol.EncodeMessage(sc.format, m)
		if err != nil {
			panic(err)
		}
		sc.write(sc.dataOp(), p)
	}
}

// messages sends reliable messages with the given seqs.
func (sc *serverConn) messages(seqs ...int64) {
	for _, seq := range seqs {
		sc.message(seq, "e", `{"seq":`+strconv.FormatInt(seq, 10)+`}`)
	}
}

// closeWith sends a close frame and waits for the client's echo (or
// gives up after waitTimeout) before closing the socket.
func (sc *serverConn) closeWith(code int, reason string) {
	sc.write(ws.OpClose, ws.NewCloseFrameBody(ws.StatusCode(code), reason))
	select {
	case <-sc.closed:
	case <-time.After(waitTimeout):
	}
	sc.nc.Close()
}

// drop closes the socket without a close frame.
func (sc *serverConn) drop() { sc.nc.Close() }

// waitAck waits until the client acknowledged seq.
func (sc *serverConn) waitAck(seq int64) bool {
	deadline := time.After(waitTimeout)
	for {
		select {
		case a := <-sc.acks:
			if a >= seq {
				return true
			}
		case <-sc.closed:
			return false
		case <-deadline:
			return false
		}
	}
}

func (sc *serverConn) readLoop() {
	defer sc.s.wg.Done()
	defer close(sc.closed)
	defer sc.nc.Close()
	rd := wsutil.NewServerSideReader(sc.br)
	for {
		hdr, err := rd.NextFrame()
		if err != nil {
			return
		}
		p, err := io.ReadAll(rd)
		if err != nil {
			return
		}
		switch hdr.OpCode {
		case ws.OpPing:
			sc.write(ws.OpPong, p)
			continue
		case ws.OpPong:
			sc.pongs <- p
			continue
		case ws.OpClose:
			code, _ := ws.ParseCloseFrameData(p)
			sc.closeCode.Store(int64(code))
			sc.write(ws.OpClose, ws.NewCloseFrameBody(code, ""))
			return
		}
		cf, err := protocol.DecodeClient(sc.format, p)
		if err != nil {
			sc.send(&protocol.ErrorFrame{Type: protocol.TypeError, Code: protocol.ErrBadFrame, Message: err.Error()})
			continue
		}
		sc.frames <- cf
		switch cf.Type {
		case protocol.TypeAck:
			sc.acks <- cf.Seq
		case protocol.TypePing:
			var ts float64
			if cf.TS != nil {
				ts = *cf.TS
			}
			sc.send(&protocol.Pong{Type: protocol.TypePong, TS: ts})
		default:
			if sc.s.opts.respond != nil {
				sc.s.opts.respond(sc, cf)
			} else {
				sc.send(&protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, OK: true})
			}
		}
	}
}

// waitClosed waits until the client went away.
func (sc *serverConn) waitClosed(t *testing.T) {
	t.Helper()
	select {
	case <-sc.closed:
	case <-time.After(waitTimeout):
		t.Fatalf("connection %d still open after %v", sc.n, waitTimeout)
	}
}

// frame returns the next data frame of type typ the client sent.
func (sc *serverConn) frame(t *testing.T, typ string) *protocol.ClientFrame {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case f := <-sc.frames:
			if f.Type == typ {
				return f
			}
		case <-deadline:
			t.Fatalf("no %s frame from the client within %v", typ, waitTimeout)
		}
	}
}

// recv takes one value from ch within waitTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("no %s within %v", what, waitTimeout)
	}
	var zero T
	return zero
}

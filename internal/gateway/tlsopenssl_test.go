package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/tlsrec"
	"github.com/wsgate/wsgate/protocol"
)

// sClient is `openssl s_client -tls1_3` connected to a node, in its
// interactive mode (a line "K" sends a KeyUpdate with update_requested):
// the test writes its stdin and reads the plaintext it prints.
type sClient struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	errMu sync.Mutex
	errs  bytes.Buffer  // its stderr
	errCh chan struct{} // a signal per stderr chunk
}

func startSClient(t *testing.T, n *testNode) *sClient {
	t.Helper()
	cmd := exec.Command("/usr/bin/openssl", "s_client", "-tls1_3", "-connect", n.addr, "-no_ign_eof")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errp, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sClient{t: t, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<16), errCh: make(chan struct{}, 1)}
	go func() {
		b := make([]byte, 4096)
		for {
			k, err := errp.Read(b)
			s.errMu.Lock()
			s.errs.Write(b[:k])
			s.errMu.Unlock()
			select {
			case s.errCh <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	// A watchdog: a test that waits for output that never comes fails
	// on a read error instead of hanging.
	watchdog := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	t.Cleanup(func() {
		watchdog.Stop()
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	// s_client prints the session once its handshake is done, and reads
	// its stdin from then on.
	s.until("Verify return code")
	return s
}

func (s *sClient) stderr() string {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.errs.String()
}

// until reads s_client's stdout up to and including text.
func (s *sClient) until(text string) {
	s.t.Helper()
	var got []byte
	for !bytes.HasSuffix(got, []byte(text)) {
		b, err := s.out.ReadByte()
		if err != nil {
			s.t.Fatalf("s_client output ended before %q: %v\nstdout: %q\nstderr: %s", text, err, got, s.stderr())
		}
		got = append(got, b)
	}
}

// keyUpdate types K (a KeyUpdate with update_requested) and waits until
// s_client has taken it (a chunk of stdin that starts with K is a
// command, the rest of the chunk is dropped).
func (s *sClient) keyUpdate() {
	s.t.Helper()
	before := strings.Count(s.stderr(), "KEYUPDATE")
	if _, err := s.in.Write([]byte("K\n")); err != nil {
		s.t.Fatal(err)
	}
	for strings.Count(s.stderr(), "KEYUPDATE") == before {
		<-s.errCh
	}
}

func (s *sClient) write(b []byte) {
	s.t.Helper()
	if _, err := s.in.Write(b); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sClient) upgrade(user string) {
	s.t.Helper()
	s.write([]byte("GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer " + token(s.t, user, nil) + "\r\n\r\n"))
	s.until("HTTP/1.1 101 Switching Protocols\r\n")
	s.until("\r\n\r\n")
	if f := s.frame(); f["type"] != "welcome" {
		s.t.Fatalf("first frame %v", f)
	}
}

// frame reads the next text frame (JSON).
func (s *sClient) frame() map[string]any {
	s.t.Helper()
	h, err := ws.ReadHeader(s.out)
	if err != nil {
		s.t.Fatalf("frame: %v\nstderr: %s", err, s.stderr())
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(s.out, p); err != nil {
		s.t.Fatalf("frame: %v\nstderr: %s", err, s.stderr())
	}
	var m map[string]any
	if h.OpCode != ws.OpText || json.Unmarshal(p, &m) != nil {
		s.t.Fatalf("frame %v %q", h.OpCode, p)
	}
	return m
}

func (s *sClient) ping(ts int) {
	s.t.Helper()
	var f bytes.Buffer
	ws.WriteFrame(&f, ws.MaskFrame(ws.NewTextFrame([]byte(fmt.Sprintf(`{"type":"ping","ts":%d}`, ts)))))
	s.write(f.Bytes())
	if m := s.frame(); m["type"] != "pong" || m["ts"] != float64(ts) {
		s.t.Fatalf("after ping %d: %v", ts, m)
	}
}

// OpenSSL's s_client sends a KeyUpdate (update_requested) before its
// upgrade request, and more once the WebSocket is open: every record
// either way authenticates (OpenSSL fails with "bad record mac" on a
// (key, nonce) used twice or a key it did not expect).
func TestTLSOpenSSLKeyUpdateBeforeRequest(t *testing.T) {
	n := tlsNode(t, nil)
	s := startSClient(t, n)
	s.keyUpdate()
	s.upgrade("ossl")
	for i := 0; i < 3; i++ {
		s.ping(i)
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "ossl"}, Event: "e", Data: raw(fmt.Sprint(i))})
		if m := s.frame(); m["type"] != "message" || m["data"] != float64(i) {
			t.Fatalf("message %d: %v", i, m)
		}
		s.keyUpdate()
	}
	s.ping(9)
}

// On the loop's record layer: s_client's KeyUpdates, and the node's own
// every tlsrec.KeyUpdateAfter records (here 4).
func TestTLSOpenSSLKeyUpdatesBothWays(t *testing.T) {
	setKeyUpdateAfter(t, 4)
	n := tlsNode(t, nil)
	s := startSClient(t, n)
	s.upgrade("ossl2")
	if c := n.hub.userConns("ossl2"); len(c) != 1 || c[0].tr == nil {
		t.Fatal("not on the loop's record layer")
	}
	sc := n.hub.userConns("ossl2")[0]
	for i := 0; i < 40; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "ossl2"}, Event: "e", Data: raw(fmt.Sprint(i))})
		if m := s.frame(); m["type"] != "message" || m["data"] != float64(i) {
			t.Fatalf("message %d: %v", i, m)
		}
		if i%10 == 0 {
			s.keyUpdate()
			s.ping(i)
		}
	}
	// Since s_client's last KeyUpdate the node sealed ten records: its
	// own KeyUpdates keep the sequence number at tlsrec.KeyUpdateAfter or so.
	sc.mu.Lock()
	seq := sc.tr.Out.Seq
	sc.mu.Unlock()
	if seq > tlsrec.KeyUpdateAfter+4 {
		t.Fatalf("the node's write sequence is %d: no KeyUpdate every %d records", seq, tlsrec.KeyUpdateAfter)
	}
}

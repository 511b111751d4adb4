package gateway

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
)

// FuzzScanHead feeds arbitrary request heads to the own accept path's
// strict checks and to gobwas' upgrader: they never panic, and a head
// they both accept is one net/http reads the same way (no second Host,
// Origin or key, no body, a 16-byte key).
func FuzzScanHead(f *testing.F) {
	f.Add([]byte("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"))
	f.Fuzz(func(t *testing.T, req []byte) {
		end := bytes.Index(req, headerEnd)
		if end < 0 || bareLF(req) >= 0 {
			return
		}
		req = req[:end+4]
		u, err := scanHead(req)
		if err != nil || u.problem() != "" {
			return
		}
		if _, _, err := parseUpgrade(req); err != nil {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(req)))
		if err != nil {
			return // net/http is stricter in places; the upgrader decides here
		}
		if p := headOf(r).problem(); p != "" {
			t.Fatalf("accepted %q, which net/http reads as: %s", req, p)
		}
	})
}

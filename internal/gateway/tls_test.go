package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

func selfSigned(t *testing.T) (certFile, keyFile string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

func TestTLSListener(t *testing.T) {
	certFile, keyFile := selfSigned(t)
	n := startNode(t, func(c *config.Gateway) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile })
	d := ws.Dialer{
		Header:    ws.HandshakeHeaderHTTP(map[string][]string{"Authorization": {"Bearer " + token(t, "secure", nil)}}),
		TLSConfig: &tls.Config{InsecureSkipVerify: true},
		Timeout:   5 * time.Second,
	}
	conn, br, _, err := d.Dial(context.Background(), "wss://"+n.addr+"/ws")
	if err != nil {
		t.Fatal(err)
	}
	c := &wsClient{t: t, conn: conn, r: conn, frames: make(chan map[string]any, 64), closed: make(chan struct{})}
	if br != nil {
		c.r = io.MultiReader(br, conn)
	}
	go c.readLoop()
	t.Cleanup(func() { conn.Close(); <-c.closed })
	if w := c.next(5 * time.Second); w["type"] != "welcome" {
		t.Fatalf("welcome %v", w)
	}
	c.send(`{"type":"ping","ts":9}`)
	c.expect("pong")
	for i := 0; i < 50; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: "secure"}, Event: "e", Data: raw(`{"i":1}`)})
	}
	for i := 0; i < 50; i++ {
		c.expect("message")
	}
	conns := n.hub.userConns("secure")
	conns[0].close(protocol.CloseDisconnected, "bye")
	if code := c.waitClosed(5 * time.Second); code != protocol.CloseDisconnected {
		t.Fatalf("close %d", code)
	}
	eventually(t, 5*time.Second, "forgotten", func() bool { return n.hub.count() == 0 })
}

package client_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/gateway"
	"github.com/wsgate/wsgate/protocol"
)

// startGateway runs a real gateway node (embedded backend, insecure
// auth) on a loopback port and returns its WebSocket URL.
func startGateway(t *testing.T) (*gateway.Node, string) {
	t.Helper()
	return startGatewayWith(t, nil)
}

// startGatewayWith is startGateway with settings changed by mutate.
func startGatewayWith(t *testing.T, mutate func(*config.Gateway)) (*gateway.Node, string) {
	t.Helper()
	cfg := new(config.Gateway)
	if err := config.NewGatewaySet(cfg).Load(nil, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.NodeID, cfg.AuthInsecure, cfg.APIKey = "127.0.0.1:0", "c1", true, "k"
	if mutate != nil {
		mutate(cfg)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AdvertiseURL = "ws://" + ln.Addr().String() + "/ws"
	n, err := gateway.New(*cfg, cluster.NewMemory(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); n.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
		<-done
	})
	return n, cfg.AdvertiseURL
}

func compressedBytes(t *testing.T, n *gateway.Node) float64 {
	mfs, err := n.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "wsgate_compressed_bytes_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestCompression: with Compression the client negotiates
// permessage-deflate with a real gateway, its large publish goes out
// compressed (the gateway inflates it) and the large message that comes
// back compressed is inflated intact; small ones stay plain both ways.
func TestCompression(t *testing.T) {
	n, url := startGateway(t)
	for _, on := range []bool{true, false} {
		c, _, err := client.Dial(context.Background(), url, client.DialOptions{User: "z", Compression: on})
		if err != nil {
			t.Fatal(err)
		}
		if c.Compressed() != on {
			t.Fatalf("Compression %v: negotiated %v", on, c.Compressed())
		}
		before := compressedBytes(t, n)
		for i, data := range []string{`{"small":true}`, `{"big":"` + strings.Repeat("wsgate ", 600) + `"}`} {
			id := []string{"s", "b"}[i]
			if err := c.WriteFrame(&protocol.ClientFrame{Type: protocol.TypePublish, ID: id, Target: &protocol.Target{Type: "user", ID: "z"}, Event: "e", Data: json.RawMessage(data)}); err != nil {
				t.Fatal(err)
			}
			var got *protocol.Message
			for got == nil {
				f, err := c.ReadFrame()
				if err != nil {
					t.Fatalf("Compression %v: %v", on, err)
				}
				if f.Type == protocol.TypeMessage {
					m := f.AsMessage()
					got = &m
				}
			}
			if string(got.Data) != data {
				t.Fatalf("Compression %v: data %.80s", on, got.Data)
			}
		}
		if grew := compressedBytes(t, n) > before; grew != on {
			t.Fatalf("Compression %v: the gateway compressed: %v", on, grew)
		}
		c.Close()
	}
}

// TestCompressionBadAnswer: a server answering the offer without
// server_no_context_takeover fails the dial (the client would inflate
// its messages without the context they need).
func TestCompressionBadAnswer(t *testing.T) {
	for _, answer := range []string{"permessage-deflate", "permessage-deflate; server_no_context_takeover; bogus"} {
		srv := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			up := ws.HTTPUpgrader{Header: http.Header{"Sec-Websocket-Extensions": {answer}}}
			if nc, _, _, err := up.Upgrade(r, w); err == nil {
				nc.Close()
			}
		})}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		_, _, err = client.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws", client.DialOptions{User: "z", Compression: true})
		srv.Close()
		if err == nil || !strings.Contains(err.Error(), "wsflate") {
			t.Fatalf("answer %q: dial error %v", answer, err)
		}
	}
}

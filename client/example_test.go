package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

func Example() {
	ctx := context.Background()
	c, err := client.New(client.Config{
		Allocator: "http://127.0.0.1:8080",
		User:      "alice",
		Token:     func(ctx context.Context) (string, error) { return "<jwt for alice>", nil },
		Handlers: client.Handlers{
			OnMessage: func(m protocol.Message) { fmt.Printf("%s seq=%d %s\n", m.Event, m.Seq, m.Data) },
			OnGap:     func(from, to, missed int64) { log.Printf("lost %d reliable messages", missed) },
			OnState:   func(s client.State, err error) { log.Printf("%v %v", s, err) },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		// nil after Close; a *CloseError or *HandshakeError when told to stop.
		if err := c.Run(ctx); err != nil {
			log.Print(err)
		}
	}()
	defer c.Close()

	if err := c.Join(ctx, "lobby"); err != nil {
		log.Print(err)
	}
	err = c.Publish(ctx, protocol.Target{Type: protocol.TargetRoom, ID: "lobby"}, "chat", map[string]string{"text": "hi"})
	if err != nil {
		log.Print(err)
	}
}

func ExampleDial() {
	ctx := context.Background()
	conn, welcome, err := client.Dial(ctx, "ws://127.0.0.1:8080/ws", client.DialOptions{User: "bench-1", LocalAddr: "127.0.0.2"})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	log.Printf("connected to %s as %s", welcome.Node, welcome.ConnID)
	for {
		f, err := conn.ReadFrame()
		if err != nil {
			return // a *CloseError, or a broken connection
		}
		if f.Type == protocol.TypeMessage && f.Seq > 0 {
			conn.WriteFrame(&protocol.ClientFrame{Type: protocol.TypeAck, Seq: f.Seq})
		}
	}
}

// ExampleConn_ReadRaw reads many messages cheaply: no decode, no
// allocation; only the rare frames whose other fields matter are decoded
// in full.
func ExampleConn_ReadRaw() {
	ctx := context.Background()
	conn, _, err := client.Dial(ctx, "ws://127.0.0.1:8080/ws", client.DialOptions{User: "bench-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	for {
		format, payload, err := conn.ReadRaw() // valid until the next read
		if err != nil {
			return // a *CloseError, or a broken connection
		}
		p, err := protocol.PeekServer(format, payload)
		switch {
		case err == nil && p.Type == protocol.TypeMessage:
			if p.Seq > 0 {
				conn.WriteFrame(&protocol.ClientFrame{Type: protocol.TypeAck, Seq: p.Seq})
			}
		case err == nil && p.Type != protocol.TypeGap && p.Type != protocol.TypeRedirect:
			// nothing else to read in a pong, reply, welcome or error
		default:
			if f, err := protocol.DecodeServer(format, payload); err == nil {
				log.Printf("%s frame: %+v", f.Type, f)
			}
		}
	}
}

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

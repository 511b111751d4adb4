// Package client is the Go client of wsgate (contract §3, §4, §6).
//
// A Client connects to a gateway (through the allocator when one is
// configured), reconnects as the close codes say (protocol.CloseAction)
// with exponential backoff and full jitter, follows redirects of draining
// nodes, resumes reliable delivery with since=LastSeq, drops duplicates,
// acknowledges in batches and reports everything through Handlers:
//
//	c, err := client.New(client.Config{
//		Allocator: "http://gateway:8080",
//		User:      "alice",
//		Token:     func(ctx context.Context) (string, error) { return tokens.Get(ctx, "alice") },
//		Handlers: client.Handlers{
//			OnMessage: func(m protocol.Message) { fmt.Printf("%s %s\n", m.Event, m.Data) },
//			OnGap:     func(from, to, missed int64) { log.Printf("lost %d messages", missed) },
//		},
//	})
//	if err != nil {
//		return err
//	}
//	go func() {
//		if err := c.Run(ctx); err != nil {
//			log.Print(err) // a stop close code, a refused handshake, ctx.Err()
//		}
//	}()
//	defer c.Close() // final ack, close 1000, waits for Run
//	err = c.Publish(ctx, protocol.Target{Type: protocol.TargetRoom, ID: "lobby"}, "chat", map[string]string{"text": "hi"})
//
// Handlers are called from the goroutine that runs Run, in frame order.
//
// Dial is the one-shot, low-level form used by the load generator: one
// connection, its welcome, then Conn.ReadFrame and Conn.WriteFrame with no
// reconnect logic and no goroutine or buffer of its own. Conn.ReadRaw
// returns a message's payload without decoding it (no copy, no
// allocation), for protocol.PeekServer; Conn.Detach hands the socket to
// the caller's own event loop.
//
// With Config.Compression (or DialOptions.Compression) the client offers
// permessage-deflate without context takeover; it is off by default, as
// a server-side client usually has bandwidth to spare and counts CPU.
//
// Where WebSocket is blocked, the same session runs over Server-Sent
// Events or HTTP streaming (contract §18): Config.Transports (default
// WebSocket, SSE, Stream) is tried in order, the next at once at the same
// node when a dial fails, and Welcome.Transport names the one in use.
// DialStream is the one-shot form; its StreamConn posts the client's
// frames in order to POST /v1/conn/{conn_id} with the welcome's session.
// Seqs, acks and resume are the client's own, so a change of transport
// neither repeats nor skips a message.
package client

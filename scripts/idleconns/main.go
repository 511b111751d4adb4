// Command idleconns opens N WebSocket connections to one URL, reads the
// first frame of each (a wsgate welcome, or Pusher's
// connection_established), and holds them idle until it is killed: the
// load client of scripts/transport-memory.sh's Pusher measurement, the
// same for wsgate's own protocol, the Pusher protocol and other Pusher
// servers. Each connection answers the server's pings (a WebSocket ping
// with a pong, pusher:ping with pusher:pong) so none is dropped as dead.
//
//	go run ./scripts/idleconns -n 10000 -url 'ws://127.0.0.1:8080/app/KEY?protocol=7'
//
// "{i}" in the URL is replaced by the connection's number. It prints
// "ready N" once every connection got its first frame.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

func main() {
	n := flag.Int("n", 10000, "connections")
	url := flag.String("url", "", "ws:// URL; {i} is replaced by the connection's number")
	par := flag.Int("parallel", 64, "connections dialled at once")
	flag.Parse()
	var wg sync.WaitGroup
	sem := make(chan struct{}, *par)
	var mu sync.Mutex
	failed := 0
	conns := make([]conn, 0, *n)
	for i := range *n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := dial(strings.ReplaceAll(*url, "{i}", strconv.Itoa(i)))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if failed <= 3 {
					fmt.Fprintln(os.Stderr, "dial:", err)
				}
				return
			}
			conns = append(conns, c)
		}()
	}
	wg.Wait()
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "%d connections failed\n", failed)
		os.Exit(1)
	}
	fmt.Println("ready", len(conns))
	for _, c := range conns {
		go hold(c)
	}
	select {}
}

// conn is a held connection: its reader starts with what came with the
// upgrade answer.
type conn struct {
	net.Conn
	r io.Reader
}

// dial connects and reads the first frame.
func dial(url string) (conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, br, _, err := ws.Dialer{}.Dial(ctx, url)
	if err != nil {
		return conn{}, err
	}
	cc := conn{Conn: c, r: c}
	if br != nil {
		cc.r = io.MultiReader(br, c)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, _, err := wsutil.ReadServerData(rw{cc}); err != nil {
		c.Close()
		return conn{}, err
	}
	_ = c.SetReadDeadline(time.Time{})
	return cc, nil
}

// rw reads from a conn's reader and writes to its socket.
type rw struct{ c conn }

func (x rw) Read(p []byte) (int, error)  { return x.c.r.Read(p) }
func (x rw) Write(p []byte) (int, error) { return x.c.Write(p) }

// hold answers the server's pings until the connection ends.
func hold(c conn) {
	for {
		msgs, err := wsutil.ReadServerMessage(rw{c}, nil)
		if err != nil {
			return
		}
		for _, m := range msgs {
			switch {
			case m.OpCode == ws.OpPing:
				_ = wsutil.WriteClientMessage(c, ws.OpPong, m.Payload)
			case m.OpCode == ws.OpText && strings.Contains(string(m.Payload), `"pusher:ping"`):
				_ = wsutil.WriteClientMessage(c, ws.OpText, []byte(`{"event":"pusher:pong","data":{}}`))
			}
		}
	}
}

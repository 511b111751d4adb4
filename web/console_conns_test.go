package web_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

// ---- console: connections and rates --------------------------------------------

// ticker is a Go client connected to one node (insecure user name) that
// joined a room; closed gets the error that ended its reads.
type ticker struct {
	conn     *client.Conn
	id       string
	received chan struct{}
	closed   chan error
}

func dialTicker(t *testing.T, n *node, user, room string) *ticker {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, w, err := client.Dial(ctx, strings.Replace(n.base, "http://", "ws://", 1)+"/ws", client.DialOptions{User: user})
	if err != nil {
		t.Fatalf("dial %s as %s: %v", n.base, user, err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.WriteFrame(&protocol.ClientFrame{Type: protocol.TypeJoin, ID: "join", Room: room}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := c.ReadFrame()
		if err != nil {
			t.Fatalf("%s waiting for the join's reply: %v", user, err)
		}
		if f.ID == "join" {
			if !f.OK {
				t.Fatalf("%s could not join %s: %+v", user, room, f.Error)
			}
			break
		}
	}
	tk := &ticker{conn: c, id: w.ConnID, received: make(chan struct{}, 1), closed: make(chan error, 1)}
	go func() {
		for {
			f, err := c.ReadFrame()
			if err != nil {
				tk.closed <- err
				return
			}
			if f.Type == protocol.TypeMessage {
				select {
				case tk.received <- struct{}{}:
				default:
				}
			}
		}
	}()
	return tk
}

// close closes the ticker's connection and waits for its reader.
func (tk *ticker) close() {
	tk.conn.Close()
	<-tk.closed
	tk.closed <- nil
}

// closeCode waits for the ticker's connection to end and returns the
// server's close code.
func (tk *ticker) closeCode(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case err := <-tk.closed:
		var ce *client.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("the connection ended with %v, not a close frame", err)
		}
		return ce.Code
	case <-time.After(d):
		t.Fatalf("the connection is still open after %v", d)
	}
	return 0
}

// publishEvery publishes to user through n's API every period until the
// returned stop is called.
func publishEvery(t *testing.T, n *node, user string, period time.Duration) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			api(t, n, apiKey, "POST", "/api/v1/publish", map[string]any{
				"target": map[string]string{"type": "user", "id": user}, "event": "tick", "data": i, "class": "realtime",
			}, nil)
		}
	}()
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}

// listConns lists node's connections in the console's panel and waits
// until its rows are exactly users (sorted, comma-joined).
func listConns(p *page, node, users string) {
	p.t.Helper()
	p.waitFor(10*time.Second, "node "+node+" in the picker", fmt.Sprintf(`[...document.getElementById('conns-node').options].some(o => o.value === %s)`, jsString(node)))
	p.fill("#conns-node", node)
	p.click("#conns-load")
	p.waitFor(10*time.Second, fmt.Sprintf("the connections of %s: %s", node, users),
		fmt.Sprintf(`[...document.querySelectorAll('#conns-result tr[data-conn]')].map(e => e.dataset.user).sort().join(',') === %s`, jsString(users)))
}

// pageUsers waits for page of the connections list, with rows rows, and
// returns its users.
func pageUsers(p *page, page, rows int) []string {
	p.t.Helper()
	p.waitFor(10*time.Second, fmt.Sprintf("page %d of the connections with %d rows", page, rows),
		fmt.Sprintf(`document.getElementById('conns-page').textContent === 'page %d' && document.querySelectorAll('#conns-result tr[data-conn]').length === %d`, page, rows))
	return eval[[]string](p, `[...document.querySelectorAll('#conns-result tr[data-conn]')].map(e => e.dataset.user)`)
}

// connRow returns the fields the console shows for user's connection.
func connRow(p *page, user string) map[string]string {
	p.t.Helper()
	return eval[map[string]string](p, fmt.Sprintf(`Object.fromEntries([...document.querySelector('#conns-result tr[data-user=%s]').querySelectorAll('td[data-field]')].map(td => [td.dataset.field, td.textContent]))`, jsString(user)))
}

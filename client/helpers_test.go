package client_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

type stateEvent struct {
	state client.State
	err   error
}

type closeEvent struct {
	code   int
	reason string
}

// events collects a client's callbacks into channels the tests wait on.
type events struct {
	msgs     chan protocol.Message
	welcomes chan client.Welcome
	gaps     chan [3]int64
	states   chan stateEvent
	closes   chan closeEvent
	errs     chan protocol.ErrorBody
}

func newEvents() *events {
	return &events{
		msgs:     make(chan protocol.Message, 1000),
		welcomes: make(chan client.Welcome, 100),
		gaps:     make(chan [3]int64, 100),
		states:   make(chan stateEvent, 1000),
		closes:   make(chan closeEvent, 100),
		errs:     make(chan protocol.ErrorBody, 100),
	}
}

func (e *events) handlers() client.Handlers {
	return client.Handlers{
		OnMessage: func(m protocol.Message) { e.msgs <- m },
		OnWelcome: func(w client.Welcome) { e.welcomes <- w },
		OnGap:     func(from, to, missed int64) { e.gaps <- [3]int64{from, to, missed} },
		OnState:   func(s client.State, err error) { e.states <- stateEvent{s, err} },
		OnClose:   func(code int, reason string) { e.closes <- closeEvent{code, reason} },
		OnError:   func(b protocol.ErrorBody) { e.errs <- b },
	}
}

func (e *events) welcome(t *testing.T) client.Welcome {
	t.Helper()
	return recv(t, e.welcomes, "welcome")
}

// seqs waits for n messages and returns their seqs in delivery order.
func (e *events) seqs(t *testing.T, n int) []int64 {
	t.Helper()
	var out []int64
	for range n {
		out = append(out, recv(t, e.msgs, "message").Seq)
	}
	return out
}

// baseConfig is a config for the test server with a fast backoff.
func baseConfig(url string, ev *events) client.Config {
	return client.Config{
		URL:        url,
		User:       "alice",
		MinBackoff: 5 * time.Millisecond,
		MaxBackoff: 40 * time.Millisecond,
		AckDelay:   20 * time.Millisecond,
		Handlers:   ev.handlers(),
		// The stand-in speaks WebSocket only (stream_test.go has the others).
		Transports: []client.Transport{client.WebSocket},
	}
}

// running is a Run in a goroutine.
type running struct {
	c    *client.Client
	done chan struct{}
	err  error
}

// start creates a client and runs it; the test's cleanup closes it.
func start(t *testing.T, cfg client.Config) *running {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, c, context.Background())
}

func run(t *testing.T, c *client.Client, ctx context.Context) *running {
	r := &running{c: c, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = c.Run(ctx)
	}()
	t.Cleanup(func() {
		c.Close()
		r.wait(t)
	})
	return r
}

// wait returns Run's error, failing the test if Run does not return.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(waitTimeout):
		t.Fatalf("Run did not return within %v", waitTimeout)
		return nil
	}
}

// counter is a Token func that returns tok-1, tok-2, ...
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) token(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return "tok-" + strconv.Itoa(c.n), nil
}

func (c *counter) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

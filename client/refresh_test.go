package client_test

import (
	"context"
	"encoding/base64"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// jwtTokens is a Token func handing out JWT-shaped tokens (unsigned: the
// stand-in server does not verify) whose exp is now+ttl.
type jwtTokens struct {
	mu     sync.Mutex
	ttl    time.Duration
	issued []string
}

func (j *jwtTokens) token(ctx context.Context) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	payload := `{"sub":"alice","n":` + strconv.Itoa(len(j.issued)) + `,"exp":` + strconv.FormatInt(time.Now().Add(j.ttl).Unix(), 10) + `}`
	tok := "eyJhbGciOiJIUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
	j.issued = append(j.issued, tok)
	return tok, nil
}

func (j *jwtTokens) get(i int) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.issued[i]
}

// nextRefresh returns the next refresh frame the server received.
func nextRefresh(t *testing.T, sc *serverConn) *protocol.ClientFrame {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case f := <-sc.frames:
			if f.Type == protocol.TypeRefresh {
				return f
			}
		case <-deadline:
			t.Fatal("no refresh frame")
		}
	}
}

func TestRefreshOnExpiringFrame(t *testing.T) {
	toks := &jwtTokens{ttl: time.Hour}
	srv := newServer(t, serverOpts{script: func(sc *serverConn) {
		sc.send(&protocol.Expiring{Type: protocol.TypeExpiring, Exp: time.Now().Add(30 * time.Second).Unix()})
	}})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.Token = toks.token
	r := start(t, cfg)
	sc := srv.conn(t)
	f := nextRefresh(t, sc)
	if f.ID == "" || f.Token != toks.get(1) {
		t.Fatalf("refresh frame %+v, want id and the second token %q", f, toks.get(1))
	}
	for end := time.Now().Add(waitTimeout); r.c.Stats().Refreshes != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("refresh not counted: %+v", r.c.Stats())
		}
	}
	if st := r.c.Stats(); st.Dials != 1 || st.Connects != 1 {
		t.Fatalf("stats %+v: the refresh must not reconnect", st)
	}
}

func TestRefreshBeforeExpWithoutNotice(t *testing.T) {
	// The first token expires 11 s from now: 1 s before the client's own
	// refresh point (10 s before exp); the server never sends expiring.
	toks := &jwtTokens{ttl: 11 * time.Second}
	srv := newServer(t, serverOpts{})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.Token = toks.token
	start(t, cfg)
	sc := srv.conn(t)
	if f := nextRefresh(t, sc); f.Token != toks.get(1) {
		t.Fatalf("refresh token %q, want the second token", f.Token)
	}
}

func TestRefreshRefusedKeepsTheConnection(t *testing.T) {
	toks := &jwtTokens{ttl: time.Hour}
	srv := newServer(t, serverOpts{
		script: func(sc *serverConn) {
			sc.send(&protocol.Expiring{Type: protocol.TypeExpiring, Exp: time.Now().Add(30 * time.Second).Unix()})
		},
		respond: func(sc *serverConn, cf *protocol.ClientFrame) {
			sc.send(&protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, OK: false, Error: &protocol.ErrorBody{Code: protocol.ErrUnauthorized, Message: "no"}})
		},
	})
	ev := newEvents()
	cfg := baseConfig(srv.URL, ev)
	cfg.Token = toks.token
	r := start(t, cfg)
	sc := srv.conn(t)
	nextRefresh(t, sc)
	// Still served: a ping after the refused refresh gets its pong.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := r.c.Ping(ctx); err != nil {
		t.Fatalf("ping after a refused refresh: %v", err)
	}
	if st := r.c.Stats(); st.Refreshes != 0 || st.Dials != 1 {
		t.Fatalf("stats %+v", st)
	}
}

package client_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/config"
)

// Room presence through the Go client against a real node: a join with a
// room token, the joined and left of another connection, Presence.
func TestRoomPresenceAndRoomTokens(t *testing.T) {
	rf := filepath.Join(t.TempDir(), "rooms.yml")
	if err := os.WriteFile(rf, []byte("rooms:\n  - pattern: \"meet:*\"\n    presence: true\n    join_leave: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url := startGatewayWith(t, func(c *config.Gateway) { c.RoomsFile, c.JWTSecret = rf, "room-secret" })
	roomToken := func(user string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": user, "room": "meet:1", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("room-secret"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var mu sync.Mutex
	var events []client.PresenceEvent
	got := make(chan struct{}, 10)
	a, err := client.New(client.Config{URL: url, User: "ann", Handlers: client.Handlers{OnPresence: func(e client.PresenceEvent) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		got <- struct{}{}
	}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.New(client.Config{URL: url, User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runA, runB := make(chan error, 1), make(chan error, 1)
	bctx, stopB := context.WithCancel(ctx)
	go func() { runA <- a.Run(ctx) }()
	go func() { runB <- b.Run(bctx) }()
	if err := a.JoinWith(ctx, "meet:1", client.JoinOptions{Token: roomToken("bob")}); err == nil {
		t.Fatal("a join with another user's room token was allowed")
	}
	if err := a.JoinWith(ctx, "meet:1", client.JoinOptions{Token: roomToken("ann")}); err != nil {
		t.Fatal(err)
	}
	if err := b.JoinWith(ctx, "meet:1", client.JoinOptions{Token: roomToken("bob")}); err != nil {
		t.Fatal(err)
	}
	<-got
	p, err := a.Presence(ctx, "meet:1")
	if err != nil || p.Users != 2 || p.Connections != 2 || len(p.Clients) != 2 {
		t.Fatalf("presence %+v, %v", p, err)
	}
	stopB()
	<-runB
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("no left after bob's close")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0].Type != "joined" || events[0].User != "bob" || events[1].Type != "left" || events[1].ConnID != events[0].ConnID {
		t.Fatalf("presence events %+v", events)
	}
	_ = a.Close()
	<-runA
}

package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/protocol"
)

// History sends the history frame of its query and returns the reply's
// result as a page; a refusal is a *ReplyError.
func TestHistory(t *testing.T) {
	srv := newServer(t, serverOpts{respond: func(sc *serverConn, cf *protocol.ClientFrame) {
		if cf.Room == "secret" {
			sc.send(&protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, Error: &protocol.ErrorBody{Code: protocol.ErrForbidden, Message: "not a member"}})
			return
		}
		res := json.RawMessage(`{"seq":9,"messages":[{"type":"message","id":"m8","event":"e","data":8,"ts":1,"target":{"type":"room","id":"chat"},"seq":8},{"type":"message","id":"m7","event":"e","data":7,"ts":1,"target":{"type":"room","id":"chat"},"seq":7}]}`)
		sc.send(&protocol.Reply{Type: protocol.TypeReply, ID: cf.ID, OK: true, Result: res})
	}})
	ev := newEvents()
	c, err := client.New(baseConfig(srv.URL, ev))
	if err != nil {
		t.Fatal(err)
	}
	run(t, c, context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	page, err := c.History(ctx, "chat", client.HistoryQuery{Before: 9, Limit: 2, Reverse: true})
	if err != nil {
		t.Fatal(err)
	}
	if page.Seq != 9 || len(page.Messages) != 2 || page.Messages[0].Seq != 8 || page.Messages[1].Seq != 7 || string(page.Messages[1].Data) != "7" {
		t.Fatalf("page %+v", page)
	}
	f := srv.conn(t).frame(t, protocol.TypeHistory)
	if f.ID == "" || f.Room != "chat" || f.Before == nil || *f.Before != 9 || f.Limit == nil || *f.Limit != 2 || !f.Reverse || f.Since != nil {
		t.Fatalf("history frame %+v", f)
	}
	var re *client.ReplyError
	if _, err := c.History(ctx, "secret", client.HistoryQuery{}); !errors.As(err, &re) || re.Code != protocol.ErrForbidden {
		t.Fatalf("refused: %v", err)
	}
	for _, q := range []client.HistoryQuery{{Before: 3}, {Since: 3, Reverse: true}, {Limit: 1001}, {Since: -1}} {
		if _, err := c.History(ctx, "chat", q); err == nil {
			t.Fatalf("%+v: no error", q)
		}
	}
}

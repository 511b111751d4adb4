package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/wsgate/wsgate/internal/api"
	wsgatev1 "github.com/wsgate/wsgate/proto/wsgate/v1"
	"github.com/wsgate/wsgate/protocol"
)

// publishHistory publishes n reliable messages to room (seqs 1..n, data
// the seq).
func publishHistory(t *testing.T, n *testNode, room string, count int) {
	t.Helper()
	for i := 1; i <= count; i++ {
		pub(t, n, api.PublishRequest{Target: protocol.Target{Type: protocol.TargetRoom, ID: room}, Event: "e", Data: raw(fmt.Sprint(i)), Reliable: true})
	}
}

// pageSeqs reads the seqs of a history answer's messages.
func pageSeqs(t *testing.T, res map[string]any) []int64 {
	t.Helper()
	msgs, ok := res["messages"].([]any)
	if !ok {
		t.Fatalf("no messages in %v", res)
	}
	out := []int64{}
	for _, m := range msgs {
		mm := m.(map[string]any)
		seq := toInt64(mm["seq"])
		if mm["type"] != "message" || toInt64(mm["data"]) != seq {
			t.Fatalf("history message %v: not the message frame of seq %d", mm, seq)
		}
		out = append(out, seq)
	}
	return out
}

// toInt64 reads a JSON or MessagePack number (-1: not a number).
func toInt64(v any) int64 {
	f, err := strconv.ParseFloat(fmt.Sprint(v), 64)
	if err != nil {
		return -1
	}
	return int64(f)
}

// History pages of the API (contract 19): before, newest first, at most
// limit; since keeps v2's meaning; before goes with reverse=true only.
func TestHistoryPagesAPI(t *testing.T) {
	n := startNode(t, nil)
	publishHistory(t, n, "h", 5)
	get := func(q string) (int, map[string]any) {
		t.Helper()
		return apiCall(t, n, "GET", "/api/v1/rooms/h/history?"+q, "k", "")
	}
	for _, tc := range []struct {
		q    string
		want []int64
	}{
		{"reverse=true", []int64{5, 4, 3, 2, 1}},
		{"reverse=true&limit=2", []int64{5, 4}},
		{"before=4&reverse=true", []int64{3, 2, 1}},
		{"before=4&reverse=true&limit=1", []int64{3}},
		{"before=1&reverse=true", []int64{}},
		{"before=99&reverse=true&limit=2", []int64{5, 4}},
		{"since=2", []int64{3, 4, 5}},
		{"since=2&reverse=false&limit=2", []int64{3, 4}},
		{"", []int64{1, 2, 3, 4, 5}},
	} {
		status, res := get(tc.q)
		if status != http.StatusOK || toInt64(res["seq"]) != 5 {
			t.Fatalf("?%s: %d %v", tc.q, status, res)
		}
		if got := pageSeqs(t, res); !slices.Equal(got, tc.want) {
			t.Fatalf("?%s: seqs %v, want %v", tc.q, got, tc.want)
		}
	}
	// Paging backwards by each page's oldest seq gives every message once.
	var all []int64
	for before := int64(0); ; {
		q := "reverse=true&limit=2"
		if before > 0 {
			q += fmt.Sprint("&before=", before)
		}
		_, res := get(q)
		page := pageSeqs(t, res)
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		before = page[len(page)-1]
	}
	if !slices.Equal(all, []int64{5, 4, 3, 2, 1}) {
		t.Fatalf("pages of 2: %v", all)
	}
	for _, q := range []string{"before=4", "before=4&reverse=false", "since=1&reverse=true", "reverse=yes", "before=-1&reverse=true", "before=x&reverse=true"} {
		if status, res := get(q); status != http.StatusBadRequest {
			t.Fatalf("?%s: %d %v, want 400", q, status, res)
		}
	}
}

// historyReply sends a history frame and returns its reply.
func historyReply(t *testing.T, c *wsClient, frame map[string]any) map[string]any {
	t.Helper()
	frame["type"] = "history"
	c.send(frame)
	for {
		f := c.next(5 * time.Second)
		if f["type"] == "reply" && f["id"] == frame["id"] || f["type"] == "error" {
			return f
		}
	}
}

// The history frame (contract 19): answered with the API's object for a
// member, or for a connection whose rooms claim allows the room;
// refused forbidden for anyone else; malformed ones get an error frame.
func TestHistoryFrame(t *testing.T) {
	n := startNode(t, nil)
	publishHistory(t, n, "h", 5)
	if err := n.JoinRoom(context.Background(), "h", "alice"); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"", "?format=msgpack"} {
		member := n.connect(t, "alice", format)
		r := historyReply(t, member, map[string]any{"id": "1", "room": "h", "before": 5, "limit": 2, "reverse": true})
		res, _ := r["result"].(map[string]any)
		if r["ok"] != true || toInt64(res["seq"]) != 5 {
			t.Fatalf("member%s: %v", format, r)
		}
		if got := pageSeqs(t, res); !slices.Equal(got, []int64{4, 3}) {
			t.Fatalf("member%s: seqs %v, want [4 3]", format, got)
		}
		r = historyReply(t, member, map[string]any{"id": "2", "room": "h", "since": 3})
		if res, _ := r["result"].(map[string]any); r["ok"] != true || !slices.Equal(pageSeqs(t, res), []int64{4, 5}) {
			t.Fatalf("member%s since 3: %v", format, r)
		}
	}

	claim := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, "bob", map[string]any{"rooms": []string{"h"}})}}, true)
	claim.expect("welcome")
	r := historyReply(t, claim, map[string]any{"id": "3", "room": "h", "reverse": true, "limit": 1})
	if res, _ := r["result"].(map[string]any); r["ok"] != true || !slices.Equal(pageSeqs(t, res), []int64{5}) {
		t.Fatalf("allowed by the rooms claim: %v", r)
	}

	stranger := n.connect(t, "carol", "")
	r = historyReply(t, stranger, map[string]any{"id": "4", "room": "h", "reverse": true})
	if e, _ := r["error"].(map[string]any); r["ok"] != false || e["code"] != protocol.ErrForbidden || r["result"] != nil {
		t.Fatalf("neither member nor allowed: %v", r)
	}
	for _, bad := range []map[string]any{
		{"id": "5", "room": "h", "before": 3},
		{"id": "6", "room": "h", "since": 1, "before": 3, "reverse": true},
		{"id": "7", "room": "h", "limit": 0},
		{"id": "8", "room": "h", "limit": 1001},
		{"room": "h"},
	} {
		if f := historyReply(t, stranger, bad); f["type"] != "error" || f["code"] != protocol.ErrBadFrame {
			t.Fatalf("%v: %v, want an error frame bad_frame", bad, f)
		}
	}
}

// The gRPC API's GetHistory takes before and reverse as the HTTP API does.
func TestHistoryPagesGRPC(t *testing.T) {
	n := startNode(t, nil)
	publishHistory(t, n, "h", 5)
	tr := newTransport(t, n, "grpc").(grpcTransport)
	get := func(m *wsgatev1.GetHistoryRequest) ([]int64, error) {
		ctx, cancel := grpcCtx()
		defer cancel()
		m.Room = "h"
		res, err := tr.c.GetHistory(ctx, request("k", m, nil))
		if err != nil {
			return nil, err
		}
		if res.Msg.GetSeq() != 5 {
			t.Fatalf("%v: seq %d", m, res.Msg.GetSeq())
		}
		out := []int64{}
		for _, h := range res.Msg.GetMessages() {
			out = append(out, h.GetSeq())
		}
		return out, nil
	}
	if got, err := get(&wsgatev1.GetHistoryRequest{Before: 4, Limit: 2, Reverse: true}); err != nil || !slices.Equal(got, []int64{3, 2}) {
		t.Fatalf("before 4, limit 2, reverse: %v %v", got, err)
	}
	if got, err := get(&wsgatev1.GetHistoryRequest{Reverse: true}); err != nil || !slices.Equal(got, []int64{5, 4, 3, 2, 1}) {
		t.Fatalf("reverse: %v %v", got, err)
	}
	if got, err := get(&wsgatev1.GetHistoryRequest{Since: 3}); err != nil || !slices.Equal(got, []int64{4, 5}) {
		t.Fatalf("since 3: %v %v", got, err)
	}
	if _, err := get(&wsgatev1.GetHistoryRequest{Before: 4}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("before without reverse: %v, want invalid argument", err)
	}
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

func reliable(t testing.TB, n *testNode, user string, i int) int64 {
	t.Helper()
	res := pub(t, n, api.PublishRequest{Target: protocol.Target{Type: "user", ID: user}, Event: "r", Data: raw(fmt.Sprint(i)), Reliable: true})
	return res.Seq
}

// seqs reads message frames until seq upTo, checking strict order.
func seqs(t *testing.T, c *wsClient, upTo int64) []int64 {
	t.Helper()
	var out []int64
	for {
		var f map[string]any
		select {
		case f = <-c.frames:
		case <-time.After(5 * time.Second):
			t.Fatalf("waiting for seq %d: got %d seqs, last %v", upTo, len(out), out[max(0, len(out)-5):])
		}
		if f["type"] != "message" {
			continue
		}
		s, ok := f["seq"].(float64)
		if !ok {
			continue
		}
		if len(out) > 0 && int64(s) <= out[len(out)-1] {
			t.Fatalf("seq %v after %v: out of order or duplicate", s, out)
		}
		out = append(out, int64(s))
		if int64(s) >= upTo {
			return out
		}
	}
}

func TestOfflineMessagesComeOnConnectAndAckTrims(t *testing.T) {
	n := startNode(t, nil)
	for i := 1; i <= 5; i++ {
		if s := reliable(t, n, "carol", i); s != int64(i) {
			t.Fatalf("seq %d for publish %d", s, i)
		}
	}
	c := n.connect(t, "carol", "")
	if got := seqs(t, c, 5); len(got) != 5 {
		t.Fatalf("replay %v", got)
	}
	c.send(`{"type":"ack","seq":3}`)
	c.send(`{"type":"ping"}`) // barrier: the ack took effect before the pong
	c.expect("pong")
	c2 := n.connect(t, "carol", "")
	if got := seqs(t, c2, 5); len(got) != 2 || got[0] != 4 {
		t.Fatalf("after ack 3 a connect without since gets 4,5; got %v", got)
	}
}

func TestResumeWithGapWhenTrimmed(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.InboxLimit = 3 })
	for i := 1; i <= 6; i++ {
		reliable(t, n, "dave", i)
	}
	c := n.connect(t, "dave", "?since=1")
	g := c.expect("gap")
	if g["from"].(float64) != 2 || g["to"].(float64) != 3 || g["missed"].(float64) != 2 {
		t.Fatalf("gap %v", g)
	}
	if got := seqs(t, c, 6); len(got) != 3 || got[0] != 4 {
		t.Fatalf("replay %v", got)
	}
	c3 := n.connect(t, "dave", "?since=9")
	for i := 7; i <= 10; i++ {
		reliable(t, n, "dave", i)
	}
	if got := seqs(t, c3, 10); len(got) != 1 || got[0] != 10 {
		t.Fatalf("since=9 above inbox_seq 6: nothing replayed, then only seq > 9: %v", got)
	}
}

// Replay and live overlap: publishes run while connections resume; each
// connection must see every seq after its since exactly once, in order.
func TestResumeDuringContinuousPublishing(t *testing.T) {
	n := startNode(t, func(c *config.Gateway) { c.InboxLimit = 1000 })
	const total = 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i <= total; i++ {
			reliable(t, n, "erin", i)
		}
	}()
	var clients []*wsClient
	var since []int64
	for i := 0; i < 6; i++ {
		s := int64(i * 20)
		clients = append(clients, n.connect(t, "erin", fmt.Sprintf("?since=%d", s)))
		since = append(since, s)
	}
	wg.Wait()
	for i, c := range clients {
		got := seqs(t, c, total)
		if got[0] != since[i]+1 || int64(len(got)) != total-since[i] {
			t.Fatalf("client %d since %d: got %d seqs from %d", i, since[i], len(got), got[0])
		}
	}
}

func TestWelcomeInboxSeq(t *testing.T) {
	n := startNode(t, nil)
	reliable(t, n, "fay", 1)
	reliable(t, n, "fay", 2)
	c := n.dial(t, "", map[string][]string{"Authorization": {"Bearer " + token(t, "fay", nil)}}, true)
	w := c.next(5 * time.Second)
	if w["type"] != "welcome" || w["inbox_seq"].(float64) != 2 || w["user"] != "fay" || w["node"] != "t1" {
		t.Fatalf("welcome %v", w)
	}
}

// An ack followed at once by the client's close still takes effect.
func TestAckRightBeforeCloseTakesEffect(t *testing.T) {
	n := startNode(t, nil)
	for i := 1; i <= 5; i++ {
		reliable(t, n, "quick", i)
	}
	c := n.connect(t, "quick", "")
	seqs(t, c, 5)
	c.send(`{"type":"ack","seq":5}`)
	c.sendRaw(ws.OpClose, ws.NewCloseFrameBody(1000, ""))
	c.waitClosed(5 * time.Second)
	eventually(t, 5*time.Second, "ack applied", func() bool {
		rd, err := n.backend.ReadInbox(context.Background(), "quick", 0, n.inboxOpts())
		return err == nil && rd.Acked == 5
	})
}

// since above inbox_seq: nothing replayed, and no seq <= since later either.
func TestSinceAboveInboxSeqHoldsForLiveMessages(t *testing.T) {
	n := startNode(t, nil)
	reliable(t, n, "zed", 1)
	c := n.connect(t, "zed", "?since=3")
	for i := 2; i <= 5; i++ {
		reliable(t, n, "zed", i)
	}
	if got := seqs(t, c, 5); len(got) != 2 || got[0] != 4 {
		t.Fatalf("since=3 got %v, want [4 5]", got)
	}
}

// flakyInbox is the embedded backend with its next inbox reads failing,
// as right after Redis came back, when a pooled connection is still the
// one the restart broke.
type flakyInbox struct {
	cluster.Backend
	fails atomic.Int32
}

func (f *flakyInbox) ReadInbox(ctx context.Context, user string, since int64, opt cluster.InboxOptions) (cluster.InboxRead, error) {
	if f.fails.Add(-1) >= 0 {
		return cluster.InboxRead{}, errors.New("connection reset by peer")
	}
	return f.Backend.ReadInbox(ctx, user, since, opt)
}

// A hole in the live sequence whose catch-up read fails is filled once
// the backend answers again, not skipped.
func TestCatchUpRetriesAFailedInboxRead(t *testing.T) {
	b := &flakyInbox{Backend: cluster.NewMemory()}
	n := startNodeWith(t, b, nil)
	c := n.connect(t, "hole", "")
	if s := reliable(t, n, "hole", 1); s != 1 {
		t.Fatalf("first seq %d", s)
	}
	// Seq 2 reaches the inbox but not the connection (as when the bus
	// lost it); seq 3 then arrives live and shows the hole.
	msg := protocol.Message{ID: "lost", Event: "r", Data: raw("2"), TS: time.Now().UnixMilli(), Target: protocol.Target{Type: "user", ID: "hole"}}
	if _, err := b.AppendInbox(context.Background(), "hole", protocol.AppendMessageJSON(nil, &msg), n.inboxOpts()); err != nil {
		t.Fatal(err)
	}
	b.fails.Store(2)
	reliable(t, n, "hole", 3)
	if got := seqs(t, c, 3); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("seqs %v, want [1 2 3]", got)
	}
	if b.fails.Load() >= 0 {
		t.Fatal("the inbox reads did not fail as arranged")
	}
}

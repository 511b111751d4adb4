package gateway

import (
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/config"
)

// trickler opens a connection that starts a frame of size bytes and then
// sends its payload chunk by chunk (trickle), never finishing it.
type trickler struct {
	c    *wsClient
	left int
}

func newTrickler(t *testing.T, n *testNode, i, size int) *trickler {
	c := n.dial(t, "", http.Header{"Authorization": {"Bearer " + token(t, fmt.Sprintf("trickler%d", i), nil)}}, true)
	c.expect("welcome")
	c.wmu.Lock()
	ws.WriteHeader(c.conn, ws.Header{Fin: true, OpCode: ws.OpText, Length: int64(size), Masked: true})
	c.wmu.Unlock()
	return &trickler{c: c, left: size - 1} // never the last byte
}

func (tr *trickler) trickle(chunk []byte) {
	if tr.left <= 0 {
		return
	}
	k := min(len(chunk), tr.left)
	tr.left -= k
	tr.c.wmu.Lock()
	tr.c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	tr.c.conn.Write(chunk[:k]) // fails once the node closed it
	tr.c.wmu.Unlock()
}

// pingRTT sends k pings one after another on c and returns the round trip
// of each, sorted (every ping must be answered).
func pingRTT(c *wsClient, k int) []time.Duration {
	c.t.Helper()
	rtts := make([]time.Duration, 0, k)
	for range k {
		start := time.Now()
		c.send(map[string]any{"type": "ping"})
		c.expect("pong")
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts
}

func rttSummary(rtts []time.Duration) string {
	return fmt.Sprintf("median %v, max %v over %d pings", rtts[len(rtts)/2].Round(time.Microsecond), rtts[len(rtts)-1].Round(time.Microsecond), len(rtts))
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A fleet of tricklers, each under the message limit and the 10 s limit,
// cannot hold more than the node's partial-frame budget: the largest
// holders are closed with 1008, and a bystander keeps its ping answered.
func TestPartialFrameBudgetHoldsAgainstATricklerFleet(t *testing.T) {
	const (
		budget = 1 << 20
		fleet  = 160
		size   = 60000 // per trickler: 160 x 60000 = 9.2 MiB without the budget
	)
	n := startNode(t, func(c *config.Gateway) { c.PartialFrameBudget = budget })
	bystander := n.connect(t, "bystander", "")
	trs := make([]*trickler, fleet)
	for i := range trs {
		trs[i] = newTrickler(t, n, i, size)
	}
	base := heapAlloc() // the connections are open, no payload sent yet
	chunk := make([]byte, 2000)
	var maxHeld int64
	var rtts []time.Duration
	for round := 0; round*len(chunk) < size; round++ {
		for _, tr := range trs {
			tr.trickle(chunk)
		}
		rtts = append(rtts, pingRTT(bystander, 1)...)
		maxHeld = max(maxHeld, n.partialBytes.Load())
	}
	eventually(t, 10*time.Second, "the budget held at the end", func() bool { return n.partialBytes.Load() <= budget })
	// The heap once the closed ones are gone: what the open tricklers hold.
	closed := 0
	eventually(t, 10*time.Second, "closed tricklers torn down", func() bool {
		closed = 0
		for _, tr := range trs {
			select {
			case <-tr.c.closed:
				closed++
			default:
			}
		}
		return n.hub.count() == 1+fleet-closed
	})
	for _, tr := range trs {
		select {
		case <-tr.c.closed:
			if tr.c.code != 1008 {
				t.Errorf("a trickler closed with %d, want 1008", tr.c.code)
			}
		default:
		}
	}
	grown := int64(heapAlloc()) - int64(base)
	slices.Sort(rtts)
	t.Logf("partial-frame budget %d B, %d tricklers of %d B: max held %d B, heap grew %d B, %d closed with 1008; bystander RTT %s",
		budget, fleet, size, maxHeld, grown, closed, rttSummary(rtts))
	// One read may take the total over before the largest holders go.
	if maxHeld > budget+2*size {
		t.Errorf("held %d B of partial frames, budget %d B", maxHeld, budget)
	}
	if grown > 4*budget {
		t.Errorf("heap grew by %d B during the attack, budget %d B", grown, budget)
	}
	if closed == 0 {
		t.Error("no trickler was closed")
	}
	if bystander.code != 0 {
		t.Errorf("the bystander was closed (%d)", bystander.code)
	}
}

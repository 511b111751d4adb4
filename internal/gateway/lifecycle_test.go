package gateway

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
)

// A warming node accepts the clients the allocator sends it while /readyz
// stays 503; its weight rises in steps and the allocator gives it a share
// of new connections in proportion to that weight.
func TestWarmingNodeAcceptsAndRampsItsShare(t *testing.T) {
	mem := cluster.NewMemory()
	n := startNodeWith(t, mem, func(c *config.Gateway) { c.Warmup = 4 * time.Second })
	if s := n.Status(); s != cluster.StatusWarming {
		t.Fatalf("status %s at start, want warming", s)
	}
	n.connect(t, "early", "") // fails on a 503 refusal
	rnd := rand.New(rand.NewPCG(3, 3))
	var weights []int
	for {
		before := n.Status()
		status, _ := apiCall(t, n, "GET", "/readyz", "", "")
		if before == cluster.StatusWarming && n.Status() == cluster.StatusWarming && status != 503 {
			t.Fatalf("/readyz %d while warming, want 503", status)
		}
		rec := nodeRecord(t, mem, n.cfg.NodeID)
		if rec.Status == cluster.StatusActive {
			// The record is written from the node's status: active here.
			if status, _ = apiCall(t, n, "GET", "/readyz", "", ""); rec.Weight != 100 || status != 200 {
				t.Fatalf("after warm-up: weight %d, /readyz %d; want 100 and 200", rec.Weight, status)
			}
			break
		}
		if len(weights) == 0 || weights[len(weights)-1] != rec.Weight {
			weights = append(weights, rec.Weight)
			// The allocator's picks between this node (no connection
			// yet counted) and a loaded active one: admitted with
			// probability weight/100, then one of the best two.
			busy := cluster.NodeInfo{ID: "busy", URL: "ws://busy/ws", Status: cluster.StatusActive, Connections: 500, Weight: 100, Heartbeat: rec.Heartbeat}
			rec.Connections = 0
			picks := 0
			const calls = 4000
			for range calls {
				if got, _ := allocator.Choose([]cluster.NodeInfo{rec, busy}, time.UnixMilli(rec.Heartbeat), time.Minute, rnd); got.ID == rec.ID {
					picks++
				}
			}
			want := float64(rec.Weight) / 200
			if share := float64(picks) / calls; share < want*0.8 || share > want*1.2 {
				t.Fatalf("weight %d: %.3f of the picks, want about %.3f", rec.Weight, share, want)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !slices.IsSorted(weights) || len(weights) < 3 || weights[0] != 10 {
		t.Fatalf("weights seen while warming %v: want a rising ramp from 10 with at least 3 steps", weights)
	}
}

func nodeRecord(t *testing.T, b cluster.Backend, id string) cluster.NodeInfo {
	t.Helper()
	nodes, err := b.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range nodes {
		if x.ID == id {
			return x
		}
	}
	t.Fatalf("no record of node %s", id)
	return cluster.NodeInfo{}
}

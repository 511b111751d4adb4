package allocator

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

func node(id string, status cluster.NodeStatus, conns, weight int, age time.Duration, now time.Time) cluster.NodeInfo {
	return cluster.NodeInfo{ID: id, URL: "ws://" + id + "/ws", Status: status, Connections: conns, Weight: weight, Heartbeat: now.Add(-age).UnixMilli()}
}

func TestChoose(t *testing.T) {
	now := time.Now()
	stale := 6 * time.Second
	cases := []struct {
		name  string
		nodes []cluster.NodeInfo
		want  map[string]bool // acceptable picks; nil = none available
	}{
		{"none", nil, nil},
		{"only draining", []cluster.NodeInfo{node("a", cluster.StatusDraining, 0, 100, 0, now)}, nil},
		{"only stale", []cluster.NodeInfo{node("a", cluster.StatusActive, 0, 100, 10*time.Second, now)}, nil},
		{"one active", []cluster.NodeInfo{node("a", cluster.StatusActive, 50, 100, 0, now)}, map[string]bool{"a": true}},
		{"the two least loaded", []cluster.NodeInfo{
			node("a", cluster.StatusActive, 100, 100, 0, now),
			node("b", cluster.StatusActive, 10, 100, 0, now),
			node("c", cluster.StatusActive, 20, 100, 0, now),
			node("d", cluster.StatusDraining, 0, 100, 0, now),
			node("e", cluster.StatusActive, 0, 100, 20*time.Second, now),
		}, map[string]bool{"b": true, "c": true}},
		{"load is per weight", []cluster.NodeInfo{
			node("a", cluster.StatusActive, 100, 100, 0, now), // 1.0
			node("b", cluster.StatusActive, 60, 50, 0, now),   // 1.2
			node("c", cluster.StatusActive, 300, 100, 0, now), // 3.0
		}, map[string]bool{"a": true, "b": true}},
	}
	for _, tc := range cases {
		for i := 0; i < 50; i++ {
			got, ok := Choose(tc.nodes, now, stale, rand.New(rand.NewPCG(uint64(i), 1)))
			if tc.want == nil {
				if ok {
					t.Fatalf("%s: chose %s, want none", tc.name, got.ID)
				}
				continue
			}
			if !ok || !tc.want[got.ID] {
				t.Fatalf("%s: chose %q (ok=%v), want one of %v", tc.name, got.ID, ok, tc.want)
			}
		}
	}
}

// A warming node gets new connections in proportion to its weight.
func TestWarmingNodeShareFollowsWeight(t *testing.T) {
	now := time.Now()
	rnd := rand.New(rand.NewPCG(7, 7))
	for _, w := range []int{10, 50, 100} {
		nodes := []cluster.NodeInfo{
			node("warm", cluster.StatusWarming, 0, w, 0, now),
			node("a", cluster.StatusActive, 1000, 100, 0, now),
		}
		picks := 0
		const n = 4000
		for i := 0; i < n; i++ {
			if got, _ := Choose(nodes, now, time.Minute, rnd); got.ID == "warm" {
				picks++
			}
		}
		// Admitted with probability w/100, then one of the best two at
		// random: expected share w/200.
		want := float64(w) / 200
		if share := float64(picks) / n; share < want*0.8 || share > want*1.2 {
			t.Errorf("weight %d: warming node got %.3f of the picks, want about %.3f", w, share, want)
		}
	}
}

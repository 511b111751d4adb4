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
		{"the least loaded", []cluster.NodeInfo{
			node("a", cluster.StatusActive, 100, 100, 0, now),
			node("b", cluster.StatusActive, 10, 100, 0, now),
			node("c", cluster.StatusActive, 20, 100, 0, now),
			node("d", cluster.StatusDraining, 0, 100, 0, now),
			node("e", cluster.StatusActive, 0, 100, 20*time.Second, now),
		}, map[string]bool{"b": true}},
		{"load is per weight", []cluster.NodeInfo{
			node("a", cluster.StatusActive, 100, 100, 0, now), // 1.0
			node("b", cluster.StatusActive, 60, 50, 0, now),   // 1.2
			node("c", cluster.StatusActive, 300, 100, 0, now), // 3.0
		}, map[string]bool{"a": true}},
		{"ties at random", []cluster.NodeInfo{
			node("a", cluster.StatusActive, 10, 100, 0, now),
			node("b", cluster.StatusActive, 10, 100, 0, now),
			node("c", cluster.StatusActive, 30, 100, 0, now),
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
		// Admitted with probability w/100, then the least loaded: expected
		// share w/100.
		want := float64(w) / 100
		if share := float64(picks) / n; share < want*0.8 || share > want*1.2 {
			t.Errorf("weight %d: warming node got %.3f of the picks, want about %.3f", w, share, want)
		}
	}
}

// A wave of reconnects (a drained node's clients) through one allocator,
// between two heartbeats: the assignments in flight count, so the wave
// fills the least loaded nodes evenly, every node with room gets some, and
// nodes that tie are taken at random (not by id).
func TestReconnectWaveSpreadsOverEveryNode(t *testing.T) {
	now := time.Now()
	var nodes []cluster.NodeInfo
	for i := range 10 {
		conns := 20
		if i >= 5 {
			conns = 24 // five fuller nodes
		}
		nodes = append(nodes, node(string(rune('a'+i)), cluster.StatusActive, conns, 100, 0, now))
	}
	firsts := map[string]bool{}
	for seed := range uint64(8) {
		var a Allocator
		rnd := rand.New(rand.NewPCG(seed, 3))
		got := map[string]int{}
		const wave = 60 // 5*4 to level the nodes, then 40 over all ten
		for i := range wave {
			c, ok := a.Choose(nodes, now, time.Minute, rnd)
			if !ok {
				t.Fatal("no node")
			}
			if i == 0 {
				firsts[c.ID] = true
			}
			got[c.ID]++
		}
		for _, n := range nodes {
			final := n.Connections + got[n.ID]
			if final != 28 {
				t.Fatalf("seed %d: node %s ends with %d connections (%d assigned), want every node at 28: %v", seed, n.ID, final, got[n.ID], got)
			}
		}
	}
	if len(firsts) < 2 {
		t.Fatalf("the first pick of 8 waves was always %v: ties must be broken at random", firsts)
	}
	// A heartbeat reports the node's own count: what was in flight for it
	// is forgotten then.
	var a Allocator
	two := []cluster.NodeInfo{node("a", cluster.StatusActive, 0, 100, 0, now), node("b", cluster.StatusActive, 0, 100, 0, now)}
	for range 4 {
		a.Choose(two[:1], now, time.Minute, nil)
	}
	if c, _ := a.Choose(two, now, time.Minute, nil); c.ID != "b" {
		t.Fatalf("chose %s with 4 in flight to a, want b", c.ID)
	}
	two[0].Heartbeat++ // a's next heartbeat: 0 connections after all
	two[1].Connections = 1
	if c, _ := a.Choose(two, now, time.Minute, nil); c.ID != "a" {
		t.Fatalf("chose %s after a's heartbeat reported 0 connections, want a", c.ID)
	}
}

// Package allocator chooses the node a new connection should go to:
// among fresh, non-draining nodes, the least loaded by connections divided
// by weight, counting the connections this allocator sent to each node
// since that node's last heartbeat (which counts them itself), and picking
// at random among the nodes that tie for the least load, so that a wave
// of reconnects (a drain, a crash) spreads over every node with room and
// allocators acting at once do not all pile onto one. A warming node takes
// new connections only in proportion to its weight.
package allocator

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// Allocator chooses nodes and remembers its assignments in flight: those
// made since each node's last heartbeat. Its zero value is ready.
type Allocator struct {
	mu      sync.Mutex
	pending map[string]inFlight // by node id
}

type inFlight struct {
	heartbeat int64 // the node's heartbeat the count is since
	n         int
}

// Choose returns a node with a stateless allocator (no assignment in
// flight is remembered between calls).
func Choose(nodes []cluster.NodeInfo, now time.Time, staleAfter time.Duration, rnd *rand.Rand) (cluster.NodeInfo, bool) {
	var a Allocator
	return a.Choose(nodes, now, staleAfter, rnd)
}

// Choose returns the chosen node, or false when none is available, and
// counts the assignment. now and staleAfter decide which heartbeats are
// too old; rnd may be nil.
func (a *Allocator) Choose(nodes []cluster.NodeInfo, now time.Time, staleAfter time.Duration, rnd *rand.Rand) (cluster.NodeInfo, bool) {
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(uint64(now.UnixNano()), 0x9e3779b97f4a7c15))
	}
	var cands []cluster.NodeInfo
	for _, n := range Eligible(nodes, now, staleAfter) {
		if n.Status == cluster.StatusWarming {
			// Admit a warming node with probability weight/100.
			if rnd.IntN(100) >= n.Weight {
				continue
			}
		}
		cands = append(cands, n)
	}
	if len(cands) == 0 {
		// Every candidate was a warming node that lost its draw: better
		// a warming node than none.
		cands = Eligible(nodes, now, staleAfter)
		if len(cands) == 0 {
			return cluster.NodeInfo{}, false
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := make(map[string]inFlight, len(nodes))
	for _, n := range nodes {
		if p, ok := a.pending[n.ID]; ok && p.heartbeat == n.Heartbeat {
			seen[n.ID] = p
		}
	}
	a.pending = seen // a node's count ends with its next heartbeat, or when it is gone
	var least []cluster.NodeInfo
	var min float64
	for _, n := range cands {
		l := loadWith(n, seen[n.ID].n)
		switch {
		case len(least) == 0 || l < min:
			least, min = append(least[:0], n), l
		case l == min:
			least = append(least, n)
		}
	}
	choice := least[rnd.IntN(len(least))]
	a.pending[choice.ID] = inFlight{heartbeat: choice.Heartbeat, n: seen[choice.ID].n + 1}
	return choice, true
}

// Eligible filters nodes that may take connections: active or warming,
// with a fresh heartbeat and a URL.
func Eligible(nodes []cluster.NodeInfo, now time.Time, staleAfter time.Duration) []cluster.NodeInfo {
	var out []cluster.NodeInfo
	for _, n := range nodes {
		if n.Status != cluster.StatusActive && n.Status != cluster.StatusWarming {
			continue
		}
		if n.URL == "" || Stale(n, now, staleAfter) {
			continue
		}
		out = append(out, n)
	}
	return out
}

// Stale reports whether a node's last heartbeat is older than staleAfter.
func Stale(n cluster.NodeInfo, now time.Time, staleAfter time.Duration) bool {
	return now.UnixMilli()-n.Heartbeat > staleAfter.Milliseconds()
}

// Load is connections per unit of weight.
func Load(n cluster.NodeInfo) float64 { return loadWith(n, 0) }

// loadWith is Load with extra connections assigned.
func loadWith(n cluster.NodeInfo, extra int) float64 {
	w := n.Weight
	if w <= 0 {
		w = 1
	}
	return float64(n.Connections+extra) / float64(w)
}

// Package allocator chooses the node a new connection should go to:
// among fresh, non-draining nodes, the least loaded by connections divided
// by weight, picking at random between the best two so that allocators
// acting at once do not all pile onto one node. A warming node takes new
// connections only in proportion to its weight.
package allocator

import (
	"math/rand/v2"
	"sort"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// Choose returns the chosen node, or false when none is available. now
// and staleAfter decide which heartbeats are too old; rnd may be nil.
func Choose(nodes []cluster.NodeInfo, now time.Time, staleAfter time.Duration, rnd *rand.Rand) (cluster.NodeInfo, bool) {
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
	sort.Slice(cands, func(i, j int) bool {
		li, lj := Load(cands[i]), Load(cands[j])
		if li != lj {
			return li < lj
		}
		return cands[i].ID < cands[j].ID
	})
	if len(cands) == 1 {
		return cands[0], true
	}
	return cands[rnd.IntN(2)], true
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
func Load(n cluster.NodeInfo) float64 {
	w := n.Weight
	if w <= 0 {
		w = 1
	}
	return float64(n.Connections) / float64(w)
}

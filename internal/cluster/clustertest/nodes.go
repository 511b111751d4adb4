package clustertest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/internal/cluster"
)

var nodeTests = []subtest{
	{"RegisterAndList", testNodesRegisterAndList},
	{"HeartbeatUpdates", testNodesHeartbeat},
	{"HeartbeatReportsLostRecord", testNodesLost},
	{"FirstHeartbeatRegisters", testNodesFirstHeartbeat},
	{"Remove", testNodesRemove},
}

func sampleNode(id string) cluster.NodeInfo {
	return cluster.NodeInfo{
		ID:          id,
		URL:         "ws://10.0.0.1:8080/ws?n=" + id,
		APIURL:      "http://10.0.0.1:8080",
		Status:      cluster.StatusWarming,
		Weight:      30,
		Connections: 1234,
		Load:        0.375,
		StartedAt:   1_700_000_000_000,
		Heartbeat:   1_700_000_001_000,
		Version:     "v1.2.3",
		IDPrefix:    "0a1b2c3d",
		Published:   1 << 40,
		Delivered:   7,
	}
}

func listNodes(t *testing.T, b cluster.NodeRegistry) []cluster.NodeInfo {
	t.Helper()
	nodes, err := b.Nodes(ctxFor(t))
	must(t, err)
	slices.SortFunc(nodes, func(a, b cluster.NodeInfo) int { return strings.Compare(a.ID, b.ID) })
	return nodes
}

func checkNodes(t *testing.T, b cluster.NodeRegistry, want ...cluster.NodeInfo) {
	t.Helper()
	got := listNodes(t, b)
	if !slices.Equal(got, want) {
		t.Fatalf("Nodes() =\n%+v\nwant\n%+v", got, want)
	}
}

func nodeIDs(nodes []cluster.NodeInfo) string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	return fmt.Sprint(ids)
}

func testNodesRegisterAndList(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	checkNodes(t, b)
	n1, n2 := sampleNode("n1"), sampleNode("n2|{x}")
	n2.Status, n2.Weight, n2.Load = cluster.StatusActive, 100, 0
	must(t, b.RegisterNode(ctx, n1))
	must(t, b.RegisterNode(ctx, n2))
	checkNodes(t, b, n1, n2)
	// Registering again overwrites.
	n1.Status = cluster.StatusDraining
	n1.Connections = 0
	must(t, b.RegisterNode(ctx, n1))
	checkNodes(t, b, n1, n2)
}

func testNodesHeartbeat(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	n := sampleNode("n1")
	must(t, b.RegisterNode(ctx, n))
	for i := range 3 {
		n.Connections = 2000 + i
		n.Heartbeat += 1000
		n.Status = cluster.StatusActive
		lost, err := b.Heartbeat(ctx, n)
		must(t, err)
		if lost {
			t.Fatalf("heartbeat %d reports lost=true for a record that is there", i)
		}
		checkNodes(t, b, n)
	}
	// A zero Heartbeat is stamped by the backend.
	n.Heartbeat = 0
	_, err := b.Heartbeat(ctx, n)
	must(t, err)
	if got := listNodes(t, b); len(got) != 1 || got[0].Heartbeat == 0 {
		t.Fatalf("Nodes() after a heartbeat without time = %+v, want Heartbeat set", got)
	}
}

func testNodesLost(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	n := sampleNode("n1")
	must(t, b.RegisterNode(ctx, n))
	must(t, b.RemoveNode(ctx, "n1"))
	lost, err := b.Heartbeat(ctx, n)
	must(t, err)
	if !lost {
		t.Fatal("Heartbeat after the record vanished reports lost=false")
	}
	checkNodes(t, b, n) // the heartbeat wrote the record again
	lost, err = b.Heartbeat(ctx, n)
	must(t, err)
	if lost {
		t.Fatal("second Heartbeat reports lost=true again")
	}
}

// A node that has never registered through this backend and sends a
// heartbeat is not "lost": there was nothing to lose.
func testNodesFirstHeartbeat(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	n := sampleNode("n1")
	lost, err := b.Heartbeat(ctx, n)
	must(t, err)
	if lost {
		t.Fatal("first Heartbeat without RegisterNode reports lost=true")
	}
	checkNodes(t, b, n)
}

func testNodesRemove(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	n1, n2 := sampleNode("n1"), sampleNode("n2")
	must(t, b.RegisterNode(ctx, n1))
	must(t, b.RegisterNode(ctx, n2))
	must(t, b.RemoveNode(ctx, "n1"))
	checkNodes(t, b, n2)
	must(t, b.RemoveNode(ctx, "n1"))      // twice
	must(t, b.RemoveNode(ctx, "unknown")) // never registered
	must(t, b.RemoveNode(ctx, "n2"))
	if got := listNodes(t, b); len(got) != 0 {
		t.Fatalf("Nodes() after removing all = %s", nodeIDs(got))
	}
}

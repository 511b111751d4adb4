// Package fleet is what a node knows of the other nodes: which are alive
// (Liveness: the routes of a node whose heartbeat stopped stop counting,
// and are removed once it is gone for good), the ages at which a silent
// node is stale and then gone (StaleAfter, GoneAfter), and what a node's
// record tells the allocator about it (APIURL, CPULoad).
//
// The heartbeat that keeps the record fresh, the warm-up and the paced
// drain run in the node (internal/gateway), which holds the connections
// they act on.
package fleet

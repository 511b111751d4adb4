// Package fleet is what a node knows of the other nodes: which are alive
// (Liveness: the routes of a node whose heartbeat stopped stop counting,
// and are removed once it is gone for good), the ages at which a silent
// node is stale and then gone (StaleAfter, GoneAfter), and what a node's
// record tells the allocator about it (APIURL, CPULoad), and the pace of
// a drain (Drain: so many connections redirected a second, the rest
// closed at the timeout), over the node's connections as a Drainee.
//
// The heartbeat that keeps the record fresh and re-registers the node's
// routes and rooms runs in the node (internal/gateway), which holds the
// connections it registers.
package fleet

// Package e2e holds the multi-process tests of wsgate: real `wsgate
// gateway` processes (built once per package run by TestMain) on loopback
// ports, clustered through real redis-server processes (standalone, Redis
// Cluster or Sentinel, started by internal/testutil/redistest), driven
// through the server API, the Go client and raw WebSocket connections.
//
// The package has no code of its own: everything is in its _test.go files.
// harness_test.go starts, kills and restarts the processes and wraps the
// API, /metrics, tokens and raw connections; each other file is one theme:
//
//	cluster_test.go     many nodes act as one, on every Redis deployment
//	bus_test.go         the bus wakes only the nodes that hold the target
//	faults_test.go      a node killed, Redis stopped, paused, the bus cut
//	routecache_test.go  users moving between nodes, quick reconnects
//	cost_test.go        Redis commands per operation (go test -v -run TestRedisCommandsPerOperation)
//	chaos_test.go       reconnecting clients, a steady reliable publisher, and everything at once
//	campaign_test.go    a randomized, seeded fault campaign (WSGATE_CHAOS_SEED, WSGATE_CHAOS_DURATION)
//	rawrec_test.go      rawClient: reconnects and records every server frame off the socket, and its acks
//	checker_test.go     the independent checker of those records against the publisher's ledger
//	downstream_test.go  WSGATE_DOWNSTREAM_URL: nodes SIGKILLed between publish and XACK, takeover in 30 s
//	downstream_others_test.go  the JetStream (server restarted) and Kafka (kfake, rebalance) sources, a node SIGKILLed
//	joinrace_test.go    an API join racing a room's first reliable message, Pub/Sub connections killed (WSGATE_CHAOS_SEED)
//
// Run with
//
//	go test -race -count=1 ./test/e2e/
//
// Under -race the gateway binary is built with the race detector too (so
// is it without, when WSGATE_E2E_RACE=1); a race a gateway reports then
// fails the test that ran it.
package e2e

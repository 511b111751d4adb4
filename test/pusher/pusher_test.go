package pusher

import "testing"

// TestPusherJSChannels: channels.test.js on two nodes: public channels
// with trigger, triggerBatch, socket_id exclusion and get channels through
// the server library; private and presence channels through an auth
// endpoint that signs with the library's authorizeChannel, client events,
// members across nodes.
func TestPusherJSChannels(t *testing.T) {
	c := startCluster(t, 2, nil)
	runNode(t, c, 2, "channels.test.js")
}

// TestLaravelEcho: echo.test.js, Laravel Echo over pusher-js on two nodes.
func TestLaravelEcho(t *testing.T) {
	c := startCluster(t, 2, nil)
	runNode(t, c, 1, "echo.test.js")
}

// TestPusherJSFailover: failover.test.js, pusher-js through a balancer
// while a node is killed with SIGKILL and another drained.
func TestPusherJSFailover(t *testing.T) {
	c := startCluster(t, 2, nil)
	runNode(t, c, 1, "failover.test.js")
}

// TestPusherJSWebhooks: webhooks.test.js, the nodes' Pusher-format
// webhooks checked with the pusher library's webhook().
func TestPusherJSWebhooks(t *testing.T) {
	c := startCluster(t, 2, nil)
	runNode(t, c, 1, "webhooks.test.js")
}

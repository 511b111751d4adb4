package clustertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

var deviceTests = []subtest{
	{"AckIsPerDevice", testDevicesPerDeviceAck},
	{"NewDeviceGetsEveryKeptMessage", testDevicesNewDevice},
	{"RoutesCarryDevice", testDevicesRoutes},
	{"BoundForgetsLeastRecentlySeen", testDevicesBound},
	{"UnseenWithinTTLForgotten", testDevicesTTL},
}

// connectDevice connects a route of user's device without since (from the
// device's own acknowledgement) and returns its inbox read.
func connectDevice(t *testing.T, b cluster.Backend, user, device string, opt cluster.InboxOptions) cluster.InboxRead {
	t.Helper()
	r := cluster.Route{User: user, ConnID: device + "-conn", Node: "n1", ConnectedAt: 1, Device: device}
	res, err := b.Connect(ctxFor(t), r, longTTL, -1, opt, cluster.ConnLimit{})
	must(t, err)
	return res.Inbox
}

// The multi-device scenario: the phone's acknowledgement keeps the
// messages for the laptop, which gets them all at its connect without
// since; once both acknowledged, the inbox is empty.
func testDevicesPerDeviceAck(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	connectDevice(t, b, "alice", "phone", inboxOpts)
	connectDevice(t, b, "alice", "laptop", inboxOpts)
	appendN(t, b, "alice", 3, inboxOpts)
	must(t, b.Ack(ctx, "alice", "phone", 3, inboxOpts))
	checkRead(t, "read after the phone's ack", read(t, b, "alice", 0, inboxOpts), []int64{1, 2, 3}, 0, 0, 3, 0)
	checkRead(t, "laptop's connect", connectDevice(t, b, "alice", "laptop", inboxOpts), []int64{1, 2, 3}, 0, 0, 3, 0)
	checkRead(t, "phone's connect", connectDevice(t, b, "alice", "phone", inboxOpts), nil, 0, 0, 3, 3)
	must(t, b.Ack(ctx, "alice", "laptop", 2, inboxOpts))
	checkRead(t, "after the laptop's ack of 2", read(t, b, "alice", 0, inboxOpts), []int64{3}, 0, 0, 3, 2)
	checkRead(t, "laptop's reconnect", connectDevice(t, b, "alice", "laptop", inboxOpts), []int64{3}, 0, 0, 3, 2)
	must(t, b.Ack(ctx, "alice", "laptop", 3, inboxOpts))
	checkRead(t, "after both acked", read(t, b, "alice", 0, inboxOpts), nil, 0, 0, 3, 3)
	// A connect with since still gets what its device acknowledged when
	// another device holds it back.
	appendN(t, b, "alice", 1, inboxOpts)
	must(t, b.Ack(ctx, "alice", "phone", 4, inboxOpts))
	res, err := b.Connect(ctx, cluster.Route{User: "alice", ConnID: "p2", Node: "n1", Device: "phone"}, longTTL, 3, inboxOpts, cluster.ConnLimit{})
	must(t, err)
	checkRead(t, "phone's connect with since 3", res.Inbox, []int64{4}, 0, 0, 4, 4)
}

// A device never seen before gets every message still kept, with the gap
// for what the limit dropped, and holds back the next acks of the others.
func testDevicesNewDevice(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	opt := cluster.InboxOptions{Limit: 4, TTL: longTTL}
	connectDevice(t, b, "bob", "phone", opt)
	appendN(t, b, "bob", 6, opt) // 1 and 2 dropped by the limit
	must(t, b.Ack(ctx, "bob", "phone", 4, opt))
	checkRead(t, "tablet's first connect", connectDevice(t, b, "bob", "tablet", opt), []int64{5, 6}, 0, 0, 6, 4)
	must(t, b.Ack(ctx, "bob", "phone", 6, opt))
	checkRead(t, "tablet's second connect", connectDevice(t, b, "bob", "tablet", opt), []int64{5, 6}, 0, 0, 6, 4)
	// Limit drops also show to a device that was seen: the gap starts
	// after its own acknowledgement.
	appendN(t, b, "bob", 4, opt) // 7..10; 5 and 6 dropped
	checkRead(t, "tablet after the limit", connectDevice(t, b, "bob", "tablet", opt), []int64{7, 8, 9, 10}, 5, 6, 10, 4)
	checkRead(t, "phone after the limit", connectDevice(t, b, "bob", "phone", opt), []int64{7, 8, 9, 10}, 0, 0, 10, 6)
}

func testDevicesRoutes(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	phone := cluster.Route{User: "carol", ConnID: "c1", Node: "n1", ConnectedAt: 1, Device: "phone"}
	plain := cluster.Route{User: "carol", ConnID: "c2", Node: "n|2", ConnectedAt: 2}
	_, err := b.Connect(ctx, phone, longTTL, -1, inboxOpts, cluster.ConnLimit{Max: 5})
	must(t, err)
	must(t, b.AddRoutes(ctx, []cluster.Route{plain}, longTTL))
	routes, err := b.UserRoutes(ctx, "carol")
	must(t, err)
	checkRoutes(t, "UserRoutes", routes, phone, plain)
	res, err := b.AppendInbox(ctx, "carol", []byte("x"), inboxOpts)
	must(t, err)
	checkRoutes(t, "append routes", res.Routes, phone, plain)
	// The limit counts routes of named devices too.
	_, err = b.Connect(ctx, cluster.Route{User: "carol", ConnID: "c3", Node: "n1", Device: "tv"}, longTTL, -1, inboxOpts, cluster.ConnLimit{Max: 2})
	if err != cluster.ErrConnLimit {
		t.Fatalf("third connect with a limit of 2: %v, want ErrConnLimit", err)
	}
}

// Past MaxDevices the least recently seen device is forgotten: its
// acknowledgement no longer holds messages back, an ack of it changes
// nothing while the others fill the bound, and when it connects again it
// is a new device (every message still kept).
func testDevicesBound(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	connectDevice(t, b, "dave", "old", inboxOpts)
	appendN(t, b, "dave", 2, inboxOpts)
	// Every other device is seen strictly later than "old".
	for t0 := time.Now().UnixMilli(); time.Now().UnixMilli() <= t0+1; {
		time.Sleep(time.Millisecond)
	}
	for i := range cluster.MaxDevices {
		connectDevice(t, b, "dave", fmt.Sprint("d", i), inboxOpts)
	}
	for i := range cluster.MaxDevices {
		must(t, b.Ack(ctx, "dave", fmt.Sprint("d", i), 1, inboxOpts))
	}
	checkRead(t, "after every kept device acked 1", read(t, b, "dave", 0, inboxOpts), []int64{2}, 0, 0, 2, 1)
	must(t, b.Ack(ctx, "dave", "old", 2, inboxOpts))
	checkRead(t, "after the forgotten device's ack", read(t, b, "dave", 0, inboxOpts), []int64{2}, 0, 0, 2, 1)
	checkRead(t, "the forgotten device's connect", connectDevice(t, b, "dave", "old", inboxOpts), []int64{2}, 0, 0, 2, 1)
}

// A device not seen within the inbox TTL stops holding messages back.
func testDevicesTTL(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	short := cluster.InboxOptions{Limit: 100, TTL: shortTTL}
	connectDevice(t, b, "erin", "laptop", short)
	connectDevice(t, b, "erin", "phone", short)
	appendN(t, b, "erin", 1, inboxOpts) // kept for an hour
	must(t, b.Ack(ctx, "erin", "phone", 1, inboxOpts))
	checkRead(t, "laptop seen", read(t, b, "erin", 0, inboxOpts), []int64{1}, 0, 0, 1, 0)
	eventually(t, "the laptop is forgotten", func() (bool, string) {
		must(t, b.Ack(ctx, "erin", "phone", 1, short))
		r := read(t, b, "erin", 0, inboxOpts)
		return len(r.Messages) == 0 && r.Acked == 1, fmt.Sprint(seqs(r), r.Acked)
	})
}

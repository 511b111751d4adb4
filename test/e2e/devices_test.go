package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

// dialDevice opens a probe of user's device on g, without since, and
// checks the welcome's device.
func dialDevice(t *testing.T, g *gateway, user, device string) *probe {
	t.Helper()
	p, err := dialWith(t, g, user, client.DialOptions{Token: token(t, user, nil), Device: device})
	if err != nil {
		t.Fatalf("dial %s as %s/%s: %v", g.ID, user, device, err)
	}
	if p.w.Device != device {
		t.Fatalf("welcome device %q, want %q", p.w.Device, device)
	}
	return p
}

// seqsUpTo reads messages until seq last and returns their seqs, failing
// on a duplicate or a seq out of order.
func (p *probe) seqsUpTo(last int64) []int64 {
	p.t.Helper()
	var got []int64
	for len(got) == 0 || got[len(got)-1] < last {
		f := p.next(10 * time.Second)
		if f.Seq == 0 {
			continue
		}
		if len(got) > 0 && f.Seq <= got[len(got)-1] {
			p.t.Fatalf("probe %s on %s: seq %d after %v", p.user, p.node, f.Seq, got)
		}
		got = append(got, f.Seq)
	}
	return got
}

// ack acknowledges seq and waits for the node's reply (the ack is done).
func (p *probe) ack(seq int64) {
	p.t.Helper()
	if r := p.request(protocol.ClientFrame{Type: protocol.TypeAck, Seq: seq}); !r.OK {
		p.t.Fatalf("probe %s: ack %d refused: %+v", p.user, seq, r.Error)
	}
}

func publishReliable(t *testing.T, g *gateway, user string, n int) int64 {
	t.Helper()
	var last int64
	for i := range n {
		b := toUser(user, "r")
		b.Reliable = true
		b.Data = map[string]int{"i": i}
		last = g.mustPublish(t, b).Seq
	}
	return last
}

func checkSeqs(t *testing.T, what string, got []int64, from, to int64) {
	t.Helper()
	var want []int64
	for q := from; q <= to; q++ {
		want = append(want, q)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got seqs %v, want %d..%d", what, got, from, to)
	}
}

// multiDeviceAcross is the multi-device scenario on two nodes: the phone
// (node a) reads and acknowledges everything while the laptop (node b) is
// offline; the laptop's reconnect without since gets every message; once
// both acknowledged, nothing is kept (a device never seen gets only what
// comes next). Presence shows both devices.
func multiDeviceAcross(t *testing.T, a, b *gateway, user string) {
	dialDevice(t, b, user, "laptop").Close()
	phone := dialDevice(t, a, user, "phone")
	last := publishReliable(t, a, user, 5)
	checkSeqs(t, "phone", phone.seqsUpTo(last), 1, last)
	phone.ack(last)
	laptop := dialDevice(t, b, user, "laptop")
	checkSeqs(t, "laptop's reconnect without since", laptop.seqsUpTo(last), 1, last)
	eventually(t, 10*time.Second, "presence of phone and laptop", func() (bool, string) {
		p, err := b.presence(user)
		var devs []string
		for _, c := range p.Connections {
			devs = append(devs, c.Device)
		}
		slices.Sort(devs)
		return err == nil && strings.Join(devs, ",") == "laptop,phone", fmt.Sprint(devs, err)
	})
	laptop.ack(last)
	tablet := dialDevice(t, a, user, "tablet")
	next := publishReliable(t, b, user, 1)
	checkSeqs(t, "a new device after both acknowledged", tablet.seqsUpTo(next), next, next)
}

// The multi-device scenario on each Redis deployment (standalone, Redis
// Cluster, Sentinel).
func TestDevicesMultiDeviceAcrossNodes(t *testing.T) {
	t.Parallel()
	for _, dep := range redisDeployments {
		t.Run(dep.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, dep.start(t), nil)
			n := c.startNodes("n", 2, nil)
			multiDeviceAcross(t, n[0], n[1], "md-"+dep.name)
		})
	}
}

// The laptop's node is SIGKILLed while it holds unacknowledged messages
// and more come; the phone acknowledged everything. The laptop's
// reconnect without since, on the surviving node, gets every message
// from its own acknowledgement: nothing the phone acknowledged is lost to
// it, and nothing it acknowledged comes again.
func TestDevicesNodeKill(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, srv.URL(), nil)
	n := c.startNodes("n", 2, nil)
	const user = "mk"
	phone := dialDevice(t, n[0], user, "phone")
	laptop := dialDevice(t, n[1], user, "laptop")
	first := publishReliable(t, n[0], user, 4)
	checkSeqs(t, "phone", phone.seqsUpTo(first), 1, first)
	checkSeqs(t, "laptop", laptop.seqsUpTo(first), 1, first)
	laptop.ack(2)
	phone.ack(first)
	n[1].Kill()
	if code := laptop.waitClosed(10 * time.Second); code != 1006 {
		t.Fatalf("laptop's connection closed with %d, want 1006 (node killed)", code)
	}
	last := publishReliable(t, n[0], user, 3)
	checkSeqs(t, "phone after the kill", phone.seqsUpTo(last), first+1, last)
	phone.ack(last)
	laptop = dialDevice(t, n[0], user, "laptop")
	checkSeqs(t, "laptop's reconnect on the surviving node", laptop.seqsUpTo(last), 3, last)
}

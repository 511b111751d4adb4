package gateway

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gobwas/ws"

	"github.com/wsgate/wsgate/internal/config"
)

// TestBystanderRTTUnderAttack measures the ping round trip of a bystander
// connection while each attack family runs against the same node, and
// logs it (docs/security.md records the figures; run with -v). Every ping
// is answered, the bystander stays open, and its median round trip under
// the attack stays within attackRTTRatio times its own baseline, measured
// on the same node just before the attack (the median, so that a few
// pings delayed by the machine's other load do not decide).
func TestBystanderRTTUnderAttack(t *testing.T) {
	const pings = 50
	const attackRTTRatio = 20
	run := func(t *testing.T, mutate func(*config.Gateway), attack func(t *testing.T, n *testNode, bystander *wsClient) []string) {
		n := startNode(t, mutate)
		bystander := n.connect(t, "bystander", "")
		pingRTT(bystander, 5) // warm up
		base := pingRTT(bystander, pings)
		notes := attack(t, n, bystander)
		rtts := pingRTT(bystander, pings)
		if bystander.code != 0 {
			t.Fatalf("the bystander was closed (%d)", bystander.code)
		}
		t.Logf("bystander RTT %s (before the attack: %s) %v", rttSummary(rtts), rttSummary(base), notes)
		if m, b := rtts[len(rtts)/2], base[len(base)/2]; m > attackRTTRatio*b {
			t.Errorf("median RTT %v under the attack, %.1f times the %v before it: want at most %d times", m, float64(m)/float64(b), b, attackRTTRatio)
		}
	}
	t.Run("baseline", func(t *testing.T) {
		run(t, nil, func(*testing.T, *testNode, *wsClient) []string { return nil })
	})
	t.Run("slow bodies", func(t *testing.T) {
		run(t, nil, func(t *testing.T, n *testNode, _ *wsClient) []string {
			for range 200 {
				c, _ := rawDial(t, n.addr)
				io.WriteString(c, "POST /api/v1/publish HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
			}
			return []string{"200 requests announcing a body never sent"}
		})
	})
	t.Run("tricklers", func(t *testing.T) {
		run(t, nil, func(t *testing.T, n *testNode, _ *wsClient) []string {
			chunk := make([]byte, 10)
			for i := range 200 {
				newTrickler(t, n, i, 100).trickle(chunk)
			}
			return []string{"200 connections holding an unfinished frame"}
		})
	})
	t.Run("msgpack bombs", func(t *testing.T) {
		run(t, func(c *config.Gateway) { c.MaxMessageBytes = 1 << 20 }, func(t *testing.T, n *testNode, _ *wsClient) []string {
			bomb := []byte{0x82, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'p', 'i', 'n', 'g', 0xa4, 'd', 'a', 't', 'a'}
			for range 64 << 10 {
				bomb = append(bomb, 0x91)
			}
			bomb = append(bomb, 0xc0)
			for i := range 2 {
				a := n.dial(t, "?format=msgpack", http.Header{"Authorization": {"Bearer " + token(t, fmt.Sprintf("attacker%d", i), nil)}}, false)
				go func() {
					for range 8 {
						a.sendRaw(ws.OpBinary, bomb)
					}
				}()
			}
			return []string{"16 frames of 64 Ki nested arrays on 2 connections"}
		})
	})
	t.Run("partial-frame budget", func(t *testing.T) {
		run(t, func(c *config.Gateway) { c.PartialFrameBudget = 1 << 20 }, func(t *testing.T, n *testNode, bystander *wsClient) []string {
			trs := make([]*trickler, 96)
			for i := range trs {
				trs[i] = newTrickler(t, n, i, 60000)
			}
			chunk := make([]byte, 2000)
			var during []string
			for round := 0; round < 30; round++ {
				for _, tr := range trs {
					tr.trickle(chunk)
				}
				if round%10 == 9 {
					during = append(during, rttSummary(pingRTT(bystander, 5)))
				}
			}
			return append([]string{"96 tricklers of 60000 B against a 1 MiB budget; during:"}, during...)
		})
	})
	t.Run("API-key guessing", func(t *testing.T) {
		run(t, nil, func(t *testing.T, n *testNode, bystander *wsClient) []string {
			var guesses, throttled atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if got, _ := getFrom(t, "127.0.0.2", "GET", "http://"+n.addr+"/api/v1/nodes", http.Header{"Authorization": {"Bearer guess"}}); got == 429 {
							throttled.Add(1)
						}
						guesses.Add(1)
					}
				})
			}
			rtts := pingRTT(bystander, pings)
			close(stop)
			wg.Wait()
			return []string{fmt.Sprintf("during %d guesses (%d answered 429): %s", guesses.Load(), throttled.Load(), rttSummary(rtts))}
		})
	})
}

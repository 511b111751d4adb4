package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// lostClaimReply makes the claim of one send id and loses its answer,
// once (the Redis connection killed, or Redis stopped, after the claim
// ran): the caller gets an error, the claim stays pending.
type lostClaimReply struct {
	cluster.Backend
	id   string // the send id whose first claim's answer is lost
	done atomic.Bool
}

func (l *lostClaimReply) ClaimKey(ctx context.Context, key, fp, id string, ttl time.Duration) (cluster.KeyClaim, error) {
	kc, err := l.Backend.ClaimKey(ctx, key, fp, id, ttl)
	if err == nil && strings.HasSuffix(key, ":"+l.id) && l.done.CompareAndSwap(false, true) {
		return cluster.KeyClaim{}, errors.New("claim's answer lost")
	}
	return kc, err
}

// A client that retries its sends in order, one reply at a time, keeps
// their order in the sink when the claim of the first one is made but its
// answer lost: the second, sent after the first was answered unavailable,
// does not overtake it (it is answered unavailable untried until the first
// is accepted), and the first one's retry is not refused as "still being
// forwarded" for the claim's 10 s lease.
func TestSendRetriedInOrderKeepsOrderAfterALostClaimAnswer(t *testing.T) {
	h := newHook(t)
	n := startNodeWith(t, &lostClaimReply{Backend: cluster.NewMemory(), id: "s1"}, withHook(h))
	c := n.connect(t, "orderly", "")
	var log []string
	accepted := map[string]bool{}
	for round := 0; round < 3 && len(accepted) < 2; round++ {
		for _, id := range []string{"s1", "s2"} {
			if accepted[id] {
				continue
			}
			c.send(fmt.Sprintf(`{"type":"send","id":%q,"event":"chat","data":%q}`, id, id))
			f := c.replyTo(id, 10*time.Second)
			log = append(log, fmt.Sprintf("%s:%v", id, f["ok"]))
			if f["ok"] == true {
				accepted[id] = true
			}
		}
	}
	var got []string
	for _, r := range h.records() {
		got = append(got, r.ClientMsgID)
	}
	if fmt.Sprint(got) != "[s1 s2]" {
		t.Fatalf("sink records %v after replies %v, want [s1 s2]", got, log)
	}
}

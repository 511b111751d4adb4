package e2e

// The campaign's reliable rooms: two rooms (every user in the first,
// about half in the second), a share of the publisher's messages sent to
// them reliably (single and in batches, with idempotency keys), a last
// message to each room after the quiet period, and the checker's room
// rules (checker_rooms_test.go) over the same raw records.

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"time"
)

// campaignRooms are the campaign's reliable rooms.
var campaignRooms = []string{"cp-hall", "cp-half"}

// joinRooms makes the users members of the campaign's rooms (drawn from
// rng), through the API of a live node.
func (cp *campaign) joinRooms(rng *rand.Rand) {
	via := cp.liveNodes()[0]
	for _, u := range cp.users {
		for k, room := range campaignRooms {
			if k == 0 || rng.IntN(2) == 0 {
				via.mustCall(cp.t, http.StatusNoContent, http.MethodPut, "/api/v1/rooms/"+room+"/members/"+u, nil)
			}
		}
	}
}

// roomJob turns about one message in six of the publisher into a
// reliable message to one of the rooms (with an idempotency key, like
// the reliable user messages) and returns the ledger record of m.
func (cp *campaign) roomJob(rng *rand.Rand, m *cmpMsg) *jobRec {
	if rng.IntN(6) != 0 {
		return &jobRec{job: m.job, user: m.Target.ID, reliable: m.Reliable, keyed: m.Reliable, class: m.Class}
	}
	room := campaignRooms[rng.IntN(len(campaignRooms))]
	m.Target = target{Type: "room", ID: room}
	m.Reliable = true
	m.IdempotencyKey = fmt.Sprintf("cp-%d-%d", cp.seed, m.job)
	return &jobRec{job: m.job, room: room, reliable: true, keyed: true, class: m.Class}
}

// presenceQuiet checks room presence after the faults: every client's
// user is a member of the first room, whose namespace has presence, so
// its presence must list exactly the connections the clients hold (no
// connection of a killed node, none twice, none missing).
func (cp *campaign) presenceQuiet() {
	waitConnected(cp.t, 30*time.Second, cp.clients)
	eventually(cp.t, 30*time.Second, cp.pre+"presence of "+campaignRooms[0]+" equals the clients' connections", func() (bool, string) {
		want := map[string]bool{}
		for _, r := range cp.clients {
			if id := r.connID(); id != "" {
				want[id] = true
			}
		}
		got, err := roomPresenceOf(cp.liveNodes()[0], campaignRooms[0])
		if err != nil {
			return false, err.Error()
		}
		return maps.Equal(got, want), fmt.Sprintf("%d present, %d held: %s", len(got), len(want), diffSets(got, want))
	})
}

// roomQuiet is quiet for the rooms: one last message to each, awaited on
// every member's connection.
func (cp *campaign) roomQuiet() {
	roomFence(cp.t, cp.pre, cp.ledger, cp.node, 3_000_000, campaignRooms, cp.clients, 20*time.Second)
}

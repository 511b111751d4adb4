package clustertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/wsgate/wsgate/internal/cluster"
)

var presenceTests = []subtest{
	{"Counts", testPresenceCounts},
	{"RemoveOnce", testPresenceRemoveOnce},
	{"Pages", testPresencePages},
	{"NodeLists", testPresenceNodeLists},
	{"KeptSeq", testPresenceKeptSeq},
	{"Rooms", testPresenceRooms},
}

// The rooms with a presence, by prefix, paged by name; an emptied room
// leaves the list.
func testPresenceRooms(t *testing.T, b cluster.Backend) {
	p, ctx := presenceOf(t, b), ctxFor(t)
	for i, room := range []string{"chat:b", "chat:a", "chat:c", "game:1", "chat:é"} {
		for j := range i%2 + 1 {
			need[cluster.PresenceChange](t)(p.AddPresence(ctx, room, entry(fmt.Sprintf("u%d", j), fmt.Sprintf("%s-%d", room, j), "n1")))
		}
	}
	list := func(prefix, cursor string, limit int) []string {
		rs, err := p.PresenceRooms(ctx, prefix, cursor, limit)
		must(t, err)
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s/%d/%d", r.Room, r.Users, r.Conns))
		}
		return out
	}
	if got := list("chat:", "", 2); !slices.Equal(got, []string{"chat:a/2/2", "chat:b/1/1"}) {
		t.Fatalf("first page: %v", got)
	}
	if got := list("chat:", "chat:b", 10); !slices.Equal(got, []string{"chat:c/1/1", "chat:é/1/1"}) {
		t.Fatalf("second page: %v", got)
	}
	if got := list("", "", 10); len(got) != 5 {
		t.Fatalf("all rooms: %v", got)
	}
	need[cluster.PresenceChange](t)(p.RemovePresence(ctx, "chat:b", entry("u0", "chat:b-0", "n1")))
	if got := list("chat:", "", 10); !slices.Equal(got, []string{"chat:a/2/2", "chat:c/1/1", "chat:é/1/1"}) {
		t.Fatalf("after chat:b emptied: %v", got)
	}
}

func presenceOf(t *testing.T, b cluster.Backend) cluster.Presence {
	t.Helper()
	p, ok := b.(cluster.Presence)
	if !ok {
		t.Fatalf("%T does not implement cluster.Presence", b)
	}
	return p
}

func entry(user, conn, node string) cluster.PresenceEntry {
	return cluster.PresenceEntry{User: user, ConnID: conn, Node: node, Device: "default"}
}

func testPresenceCounts(t *testing.T, b cluster.Backend) {
	p, ctx := presenceOf(t, b), ctxFor(t)
	a1 := entry("a", "a1", "n1")
	a1.Info = json.RawMessage(`{"name":"Ann"}`)
	ch := need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", a1))
	if !ch.Changed || ch.Seq != 1 || ch.Counts != (cluster.PresenceCounts{Users: 1, Conns: 1}) || ch.UserConns != 1 {
		t.Fatalf("first add: %+v", ch)
	}
	again := need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", a1))
	if again.Changed || again.Seq != 1 || again.Counts != ch.Counts || again.UserConns != 1 {
		t.Fatalf("the same entry again: %+v, want unchanged with seq 1", again)
	}
	ch = need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", entry("a", "a2", "n2")))
	if !ch.Changed || ch.Seq != 2 || ch.Counts != (cluster.PresenceCounts{Users: 1, Conns: 2}) || ch.UserConns != 2 {
		t.Fatalf("the user's second connection: %+v", ch)
	}
	ch = need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", entry("b", "b1", "n1")))
	if ch.Seq != 3 || ch.Counts != (cluster.PresenceCounts{Users: 2, Conns: 3}) {
		t.Fatalf("a second user: %+v", ch)
	}
	if ch := need[cluster.PresenceChange](t)(p.AddPresence(ctx, "other", entry("b", "b1", "n1"))); ch.Seq != 1 {
		t.Fatalf("another room has its own seq: %+v", ch)
	}
	ch = need[cluster.PresenceChange](t)(p.RemovePresence(ctx, "r", entry("a", "a1", "n1")))
	if !ch.Changed || ch.Seq != 1 || ch.At != 4 || ch.Counts != (cluster.PresenceCounts{Users: 2, Conns: 2}) || ch.UserConns != 1 {
		t.Fatalf("remove a1: %+v, want seq 1 at 4", ch)
	}
	seq, snap, err := p.PresenceSnapshot(ctx, "r")
	must(t, err)
	var ids []string
	for _, e := range snap {
		ids = append(ids, fmt.Sprintf("%s/%s/%d", e.ConnID, e.Node, e.Seq))
	}
	slices.Sort(ids)
	if seq != 4 || !slices.Equal(ids, []string{"a2/n2/2", "b1/n1/3"}) {
		t.Fatalf("snapshot: seq %d, %v; want 4, [a2/n2/2 b1/n1/3]", seq, ids)
	}
	if again := need[cluster.PresenceChange](t)(p.RemovePresence(ctx, "r", entry("a", "a1", "n1"))); again.Changed || again.At != 0 {
		t.Fatalf("remove a1 again: %+v, want unchanged", again)
	}
	ch = need[cluster.PresenceChange](t)(p.RemovePresence(ctx, "r", entry("a", "a2", "n2")))
	if !ch.Changed || ch.At != 5 || ch.Counts != (cluster.PresenceCounts{Users: 1, Conns: 1}) || ch.UserConns != 0 {
		t.Fatalf("remove a2, the user's last: %+v", ch)
	}
	counts, list, next, err := p.RoomPresence(ctx, "r", "", 100)
	must(t, err)
	if counts != (cluster.PresenceCounts{Users: 1, Conns: 1}) || len(list) != 1 || list[0].ConnID != "b1" || list[0].Seq != 3 || next != "" {
		t.Fatalf("presence: %+v %+v next %q", counts, list, next)
	}
	must(t, func() error { _, err := p.RemovePresence(ctx, "r", entry("b", "b1", "n1")); return err }())
	if counts, _, _, _ := p.RoomPresence(ctx, "r", "", 0); counts != (cluster.PresenceCounts{}) {
		t.Fatalf("empty room: %+v", counts)
	}
	// The seq goes on from where it was: a new entry is newer than every
	// change the room ever had.
	if ch := need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", entry("c", "c1", "n1"))); ch.Seq != 7 {
		t.Fatalf("after the room emptied: seq %d, want 7", ch.Seq)
	}
	floor := entry("d", "d1", "n1")
	floor.Seq, floor.Floor = 3, 20
	if ch := need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", floor)); ch.Seq != 3 {
		t.Fatalf("rebuilt entry with a floor: %+v", ch)
	}
	if seq, _, _ := p.PresenceSnapshot(ctx, "r"); seq != 20 {
		t.Fatalf("after a floor of 20: the room's seq is %d", seq)
	}
}

// Concurrent removes of one entry (its node and survivors cleaning up
// after it): exactly one changes it.
func testPresenceRemoveOnce(t *testing.T, b cluster.Backend) {
	p, ctx := presenceOf(t, b), ctxFor(t)
	for i := range 20 {
		e := entry("u", fmt.Sprintf("c%d", i), "n1")
		need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", e))
		var wg sync.WaitGroup
		var mu sync.Mutex
		changed := 0
		for range 4 {
			wg.Go(func() {
				ch, err := p.RemovePresence(ctx, "r", e)
				if err != nil {
					t.Error(err)
					return
				}
				if ch.Changed {
					mu.Lock()
					changed++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if changed != 1 {
			t.Fatalf("entry %d removed by %d callers, want 1", i, changed)
		}
	}
}

func testPresencePages(t *testing.T, b cluster.Backend) {
	p, ctx := presenceOf(t, b), ctxFor(t)
	const n = 250
	for i := range n {
		need[cluster.PresenceChange](t)(p.AddPresence(ctx, "big", entry(fmt.Sprintf("u%d", i%100), fmt.Sprintf("c%03d", i), "n1")))
	}
	seen := map[string]int{}
	cursor, pages := "", 0
	for {
		counts, list, next, err := p.RoomPresence(ctx, "big", cursor, 40)
		must(t, err)
		if counts != (cluster.PresenceCounts{Users: 100, Conns: n}) {
			t.Fatalf("counts %+v", counts)
		}
		for _, e := range list {
			seen[e.ConnID]++
		}
		pages++
		if next == "" {
			break
		}
		if pages > n {
			t.Fatal("the cursor never ends")
		}
		cursor = next
	}
	if len(seen) != n {
		t.Fatalf("pages listed %d connections, want %d", len(seen), n)
	}
	if _, _, _, err := p.RoomPresence(ctx, "big", "not-a-cursor", 10); err == nil {
		t.Fatal("a bad cursor was accepted")
	}
}

func testPresenceNodeLists(t *testing.T, b cluster.Backend) {
	p, ctx := presenceOf(t, b), ctxFor(t)
	need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r1", entry("a", "a1", "dead")))
	need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r2", entry("a", "a1", "dead")))
	need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r1", entry("b", "b1", "alive")))
	nodes := need[[]string](t)(p.PresenceNodes(ctx))
	slices.Sort(nodes)
	if !slices.Equal(nodes, []string{"alive", "dead"}) {
		t.Fatalf("nodes %v", nodes)
	}
	list := need[[]cluster.PresenceEntry](t)(p.NodePresence(ctx, "dead"))
	var got []string
	for _, e := range list {
		got = append(got, e.Room+"/"+e.User+"/"+e.ConnID+"/"+e.Node)
		if ch := need[cluster.PresenceChange](t)(p.RemovePresence(ctx, e.Room, e)); !ch.Changed {
			t.Fatalf("removing %+v changed nothing", e)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"r1/a/a1/dead", "r2/a/a1/dead"}) {
		t.Fatalf("the dead node's entries: %v", got)
	}
	if left := need[[]cluster.PresenceEntry](t)(p.NodePresence(ctx, "dead")); len(left) != 0 {
		t.Fatalf("removed entries still listed: %v", left)
	}
	must(t, p.DropNodePresence(ctx, "dead"))
	if nodes := need[[]string](t)(p.PresenceNodes(ctx)); !slices.Equal(nodes, []string{"alive"}) {
		t.Fatalf("after the drop: %v", nodes)
	}
	if counts, _, _, _ := p.RoomPresence(ctx, "r1", "", 0); counts != (cluster.PresenceCounts{Users: 1, Conns: 1}) {
		t.Fatalf("r1 after the dead node's entries left: %+v", counts)
	}
}

// A rebuilt entry keeps its seq, and later entries get higher ones.
func testPresenceKeptSeq(t *testing.T, b cluster.Backend) {
	p, ctx := presenceOf(t, b), ctxFor(t)
	e := entry("a", "a1", "n1")
	e.Seq = 41
	if ch := need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", e)); !ch.Changed || ch.Seq != 41 {
		t.Fatalf("rebuilt entry: %+v, want seq 41", ch)
	}
	if ch := need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", entry("b", "b1", "n1"))); ch.Seq != 42 {
		t.Fatalf("next entry: seq %d, want 42", ch.Seq)
	}
	low := entry("c", "c1", "n1")
	low.Seq = 7
	if ch := need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", low)); ch.Seq != 7 {
		t.Fatalf("rebuilt older entry: %+v", ch)
	}
	if ch := need[cluster.PresenceChange](t)(p.AddPresence(ctx, "r", entry("d", "d1", "n1"))); ch.Seq != 43 {
		t.Fatalf("after an older rebuilt entry: seq %d, want 43", ch.Seq)
	}
}

package e2e

// The checker's rules for reliable rooms (contract 12), judged from the
// same raw records: per connection and room, the room's seqs strictly
// increase from the connection's starting point (its room_since, else the
// welcome's seq for the room, else 0) with no hole unless a gap frame with
// the room's target covered it (room history is not acknowledged, so no
// other excuse); a connection still open at the end misses nothing at its
// tail; every seq the API answered for a room reached a connection that
// followed the room; a delivered seq carries the job answered for it.

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"
)

// roomStart is where connection c starts following room: the seq before
// the first one it is owed.
func roomStart(c *connRec, room string) int64 {
	if s, ok := c.roomSince[room]; ok {
		if w, ok := c.rooms[room]; ok && w < s {
			return w // history lost: the room's seq is the base
		}
		return s
	}
	return c.rooms[room]
}

func checkRooms(rec *recorder, jobs map[int]*jobRec, conns []*connRec, o checkOpts, s *checkSummary, report func(kind, format string, args ...any)) {
	answered := map[string]map[int64]int{} // room -> seq -> job
	for _, j := range jobs {
		if j.room == "" || !j.reliable {
			continue
		}
		s.jobs++
		s.reliableJobs++
		s.attempts += j.attempts
		if j.answered {
			s.answered++
		} else if j.unknown {
			s.unknown++
		}
		if answered[j.room] == nil {
			answered[j.room] = map[int64]int{}
		}
		for _, q := range j.seqs {
			if other, ok := answered[j.room][q]; ok && other != j.job {
				report("wrong-message", "room %s: seq %d answered for job %d and for job %d", j.room, q, other, j.job)
			}
			answered[j.room][q] = j.job
		}
	}
	exists := map[string]map[int64]bool{}
	mark := func(room string, q int64) {
		if exists[room] == nil {
			exists[room] = map[int64]bool{}
		}
		exists[room][q] = true
	}
	for room, qs := range answered {
		for q := range qs {
			mark(room, q)
		}
	}
	for _, c := range conns {
		for _, e := range c.events {
			if e.room != "" && e.kind == evMessage {
				mark(e.room, e.seq)
			}
		}
	}
	top := map[string]int64{}
	for room, qs := range exists {
		for q := range qs {
			top[room] = max(top[room], q)
		}
	}
	delivered := map[string]map[int64]bool{}
	trimmed := map[string]map[int64]bool{} // reported gone by a room gap on some connection
	followed := map[string]bool{}
	jobSeqs := map[int][]int64{} // job -> the distinct room seqs it was delivered under
	for _, c := range conns {
		high := map[string]int64{}
		started := map[string]bool{}
		gaps := map[string][][2]int64{}
		start := func(room string) {
			if !started[room] {
				started[room], high[room] = true, roomStart(c, room)
				followed[room] = true
			}
		}
		for room := range c.rooms {
			start(room)
		}
		holes := func(room string, from, to int64, kind string, i int) {
			var bad []int64
			for x := from; x <= to; x++ {
				covered := false
				for _, g := range gaps[room] {
					covered = covered || (x >= g[0] && x <= g[1])
				}
				if exists[room][x] && !covered {
					bad = append(bad, x)
				}
			}
			if len(bad) > 0 {
				s.holes += len(bad)
				report(kind, "%s: room %s seqs %v missing\n%s", connName(rec, c), room, compact(bad), window(rec, c, i))
			}
		}
		for i, e := range c.events {
			if e.room == "" {
				continue
			}
			start(e.room)
			switch e.kind {
			case evGap:
				s.gaps++
				gaps[e.room] = append(gaps[e.room], [2]int64{e.from, e.to})
				if !o.gapsAllowed {
					report("gap", "%s: room %s gap frame %d..%d, but no history limit or TTL was exceeded\n%s", connName(rec, c), e.room, e.from, e.to, window(rec, c, i))
				}
				high[e.room] = max(high[e.room], e.to)
				for q := e.from; q <= e.to; q++ {
					if trimmed[e.room] == nil {
						trimmed[e.room] = map[int64]bool{}
					}
					trimmed[e.room][q] = true
				}
			case evMessage:
				s.deliveredReliable++
				switch {
				case e.seq == high[e.room] || slices.ContainsFunc(c.events[:i], func(p event) bool { return p.kind == evMessage && p.room == e.room && p.seq == e.seq }):
					s.duplicates++
					report("duplicate", "%s: room %s seq %d again\n%s", connName(rec, c), e.room, e.seq, window(rec, c, i))
				case e.seq < high[e.room]:
					s.outOfOrder++
					report("out-of-order", "%s: room %s seq %d after seq %d\n%s", connName(rec, c), e.room, e.seq, high[e.room], window(rec, c, i))
				default:
					holes(e.room, high[e.room]+1, e.seq-1, "hole", i)
					high[e.room] = e.seq
				}
				if delivered[e.room] == nil {
					delivered[e.room] = map[int64]bool{}
				}
				delivered[e.room][e.seq] = true
				if !slices.Contains(jobSeqs[e.job], e.seq) {
					jobSeqs[e.job] = append(jobSeqs[e.job], e.seq)
				}
				if a, ok := answered[e.room][e.seq]; ok && a != e.job {
					report("wrong-message", "%s: room %s seq %d carried job %d, answered for job %d", connName(rec, c), e.room, e.seq, e.job, a)
				}
			}
		}
		if c.ourClose {
			for room := range started {
				holes(room, high[room]+1, top[room], "tail-hole", len(c.events)-1)
			}
		}
	}
	for job, qs := range jobSeqs {
		if j := jobs[job]; j != nil && j.keyed && len(qs) > 1 {
			report("stored-twice", "room %s: job %d (idempotency key) delivered under seqs %v; answered %v", j.room, job, qs, j.seqs)
		}
	}
	rooms := make([]string, 0, len(answered))
	for room := range answered {
		rooms = append(rooms, room)
	}
	sort.Strings(rooms)
	for _, room := range rooms {
		if !followed[room] {
			continue
		}
		var lost []int64
		for q := range answered[room] {
			if !delivered[room][q] && !trimmed[room][q] {
				lost = append(lost, q)
			}
		}
		slices.Sort(lost)
		if len(lost) > 0 {
			s.lost += len(lost)
			report("lost", "room %s: answered seqs %v reached no connection of its members", room, compact(lost))
		}
		s.distinctReliable += len(delivered[room])
	}
}

// TestCheckerReportsRoomViolations does for the room rules what
// TestCheckerReportsViolations does for the inbox's.
func TestCheckerReportsRoomViolations(t *testing.T) {
	t0 := time.Now()
	rec := &recorder{start: t0}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	msg := func(seq int64) event {
		return event{at: at(int(seq)), kind: evMessage, seq: seq, job: 100 + int(seq), id: fmt.Sprintf("r%d", seq), room: "r"}
	}
	gap := func(from, to int64) event {
		return event{at: at(0), kind: evGap, from: from, to: to, job: -1, room: "r"}
	}
	mkLedger := func() *ledger {
		l := newLedger(rec)
		for q := int64(1); q <= 5; q++ {
			l.add(&jobRec{job: 100 + int(q), room: "r", reliable: true})
			l.attempt(100+int(q), 200, q)
		}
		return l
	}
	conn := func(closeCode int, evs ...event) *connRec {
		return &connRec{client: "a", user: "u", node: "n1", connID: "a", welcomeAt: t0, events: evs, closed: closeCode != 0, closeCode: closeCode, closedAt: at(1000), ourClose: closeCode == 1000}
	}
	all := []event{msg(1), msg(2), msg(3), msg(4), msg(5)}
	resumed := func(since int64, evs ...event) *connRec {
		c := conn(1000, evs...)
		c.roomSince = map[string]int64{"r": since}
		return c
	}
	cases := []struct {
		name  string
		conns []*connRec
		opts  checkOpts
		want  []string
	}{
		{"clean", []*connRec{conn(1000, all...)}, checkOpts{}, nil},
		{"duplicate", []*connRec{conn(1000, msg(1), msg(2), msg(2), msg(3), msg(4), msg(5))}, checkOpts{}, []string{"duplicate"}},
		{"out of order", []*connRec{conn(1000, msg(1), msg(3), msg(2), msg(4), msg(5))}, checkOpts{}, []string{"hole", "out-of-order"}},
		{"hole", []*connRec{conn(1000, msg(1), msg(2), msg(4), msg(5)), conn(1000, all...)}, checkOpts{}, []string{"hole"}},
		{"hole covered by a room gap", []*connRec{conn(1000, gap(1, 2), msg(3), msg(4), msg(5))}, checkOpts{gapsAllowed: true}, nil},
		{"resume with room_since", []*connRec{conn(1006, msg(1), msg(2)), resumed(2, msg(3), msg(4), msg(5))}, checkOpts{}, nil},
		{"resume missing one", []*connRec{conn(1006, msg(1), msg(2)), resumed(2, msg(4), msg(5))}, checkOpts{}, []string{"hole", "lost"}},
		{"tail hole", []*connRec{conn(1000, msg(1), msg(2), msg(3)), conn(1006, all...)}, checkOpts{}, []string{"tail-hole"}},
		{"lost", []*connRec{conn(1006, msg(1), msg(2), msg(3))}, checkOpts{}, []string{"lost"}},
		{"a user's inbox seq is not a room's", []*connRec{conn(1000, append(all, event{at: at(9), kind: evMessage, seq: 9, job: 1, id: "u9"})...)}, checkOpts{}, []string{"unknown-message"}},
	}
	for _, tc := range cases {
		_, vs := checkRecords(rec, mkLedger(), tc.conns, tc.opts)
		var got []string
		for _, v := range vs {
			got = append(got, v.kind)
		}
		slices.Sort(got)
		got = slices.Compact(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: violations %v, want %v; reports:\n%v", tc.name, got, tc.want, vs)
		}
	}
	for _, inject := range []string{"room-dup", "room-reorder"} {
		r := &recorder{start: t0, inject: inject}
		c := conn(1000)
		for _, e := range all {
			r.add(c, e)
		}
		_, vs := checkRecords(r, mkLedger(), []*connRec{c}, checkOpts{})
		want := map[string]string{"room-dup": "duplicate", "room-reorder": "out-of-order"}[inject]
		if !slices.ContainsFunc(vs, func(v violation) bool { return v.kind == want }) {
			t.Errorf("inject %s: the checker reported %v, want a %s", inject, vs, want)
		}
	}
}

package e2e

// The independent checker of the multi-process reliability tests: it
// judges the raw records of rawClient (every frame off the socket, every
// ack sent) against the publisher's ledger (every publish attempt and its
// answer), by the contract's rules, and reports each violation with the
// frames around it.
//
// Per connection: reliable seqs strictly increase (a repeat is a
// duplicate, a lower seq out of order); no hole, unless a gap frame before
// the seq after the hole covered it, or (acks are cumulative and per
// device, §4.3) another connection of the same device of the user had
// acknowledged every missing seq before this one received the seq after
// the hole (an ack of another device excuses nothing); a
// connection still open at the end misses nothing at its tail by the same
// rule; a non-reliable message comes at most once; a gap frame is a
// violation unless the test allows them (inbox limit or TTL exceeded on
// purpose); the close code is one the run can cause (4008 only on a
// connection that stopped reading, 4001 only after a redirect frame); the
// welcome's inbox_seq is at least every seq answered before the dial
// (seqs never go back).
//
// Per user: every seq the API answered reached at least one connection of
// each of the user's devices (every device that has clients); every delivered reliable message is the one the API answered
// for that seq, or one whose publish had no definite answer (a 503 or a
// broken request may have stored it); a message published with an
// idempotency key is stored once (one seq); a non-reliable publish
// answered 503 is delivered nowhere.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// ---- the publisher's ledger ----

// jobRec is one logical message of the publisher and the outcome of its
// attempts.
type jobRec struct {
	job      int
	user     string
	room     string // a room job (user is empty); see checkRooms
	reliable bool
	keyed    bool // sent with an idempotency key (every retry the same)
	class    string

	attempts int
	seqs     []int64   // seqs of the 200 answers, in order (reliable)
	answered bool      // some attempt was answered 200
	unknown  bool      // some attempt had no definite answer (no answer, 5xx)
	refused  bool      // some attempt was answered 503
	rejected bool      // some attempt was answered 4xx (not stored)
	firstAt  time.Time // when the first 200 answer came
	history  []string
}

type ledger struct {
	rec  *recorder
	mu   sync.Mutex
	jobs map[int]*jobRec
}

// newLedger makes the ledger of a run whose clients record into rec
// (the attempts' times are written as offsets from its start).
func newLedger(rec *recorder) *ledger { return &ledger{rec: rec, jobs: map[int]*jobRec{}} }

// add registers a job before its first attempt.
func (l *ledger) add(j *jobRec) {
	l.mu.Lock()
	l.jobs[j.job] = j
	l.mu.Unlock()
}

// attempt records one try of job: the HTTP status (0: none) and the seq
// of a 200 answer. A 409 (a retry refused while the key is held) leaves
// the outcome open, as a 503 does.
func (l *ledger) attempt(job int, status int, seq int64) {
	l.attemptOn(job, "", status, seq)
}

// attemptOn is attempt with the node that answered, for the job's history.
func (l *ledger) attemptOn(job int, node string, status int, seq int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j := l.jobs[job]
	j.attempts++
	if node != "" {
		j.history = append(j.history, fmt.Sprintf("%s on %s: %d seq %d", l.rec.offset(time.Now()), node, status, seq))
	}
	switch {
	case status == 200:
		if !j.answered {
			j.firstAt = time.Now()
		}
		j.answered = true
		if j.reliable {
			j.seqs = append(j.seqs, seq)
		}
	case status == 0 || status >= 500 || status == 409:
		j.unknown = true
		j.refused = j.refused || status == 503
	default:
		j.rejected = true
	}
}

func (l *ledger) get(job int) *jobRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.jobs[job]
}

// ---- the checker ----

type violation struct {
	kind string // duplicate, out-of-order, hole, tail-hole, gap, lost, wrong-message, stored-twice, delivered-503, duplicate-nonreliable, close-code, unknown-message, inbox-seq
	msg  string
}

type checkOpts struct {
	gapsAllowed bool
}

type checkSummary struct {
	jobs, reliableJobs, answered, unknown, attempts     int
	deliveredReliable, distinctReliable, deliveredOther int
	duplicates, outOfOrder, holes, lost, gaps           int
	conns                                               int
	closeCodes                                          map[int]int
	violations                                          map[string]int
}

func (s checkSummary) String() string {
	codes := make([]string, 0, len(s.closeCodes))
	for c, n := range s.closeCodes {
		codes = append(codes, fmt.Sprintf("%d:%d", c, n))
	}
	sort.Strings(codes)
	return fmt.Sprintf("published %d jobs (%d reliable) in %d attempts, answered %d, without definite answer %d; "+
		"delivered %d reliable frames (%d distinct user seqs) and %d others on %d connections (close codes %s); "+
		"duplicates %d, out of order %d, holes %d, lost %d, gap frames %d",
		s.jobs, s.reliableJobs, s.attempts, s.answered, s.unknown, s.deliveredReliable, s.distinctReliable, s.deliveredOther,
		s.conns, strings.Join(codes, " "), s.duplicates, s.outOfOrder, s.holes, s.lost, s.gaps)
}

// userAcks answers "the highest seq another connection of the same
// device of the user had acknowledged at time t".
type userAcks struct {
	conns map[*connRec][]event // acks per connection, in time order
}

func (u userAcks) maxOther(self *connRec, t time.Time) (int64, string) {
	var best int64
	var who string
	for c, acks := range u.conns {
		if c == self || c.deviceName() != self.deviceName() {
			continue
		}
		for _, a := range acks {
			if a.at.After(t) {
				break
			}
			if a.seq > best {
				best, who = a.seq, c.client+"/"+c.connID
			}
		}
	}
	return best, who
}

// checkRecords judges the records; it returns the counts and every
// violation found.
func checkRecords(rec *recorder, l *ledger, conns []*connRec, o checkOpts) (checkSummary, []violation) {
	s := checkSummary{closeCodes: map[int]int{}, violations: map[string]int{}, conns: len(conns)}
	var vs []violation
	report := func(kind, format string, args ...any) {
		s.violations[kind]++
		vs = append(vs, violation{kind, fmt.Sprintf(format, args...)})
	}
	l.mu.Lock()
	jobs := make(map[int]*jobRec, len(l.jobs))
	for k, j := range l.jobs {
		cp := *j
		jobs[k] = &cp
	}
	l.mu.Unlock()
	// Answered seqs per user, and the job each seq was answered for.
	answeredBy := map[string]map[int64]int{}
	for _, j := range jobs {
		if j.room != "" {
			continue // checkRooms
		}
		s.jobs++
		s.attempts += j.attempts
		if j.reliable {
			s.reliableJobs++
		}
		if j.answered {
			s.answered++
		} else if j.unknown {
			s.unknown++
		}
		if answeredBy[j.user] == nil {
			answeredBy[j.user] = map[int64]int{}
		}
		for i, q := range j.seqs {
			if i > 0 && q != j.seqs[0] && j.keyed {
				report("stored-twice", "job %d to %s (idempotency key) answered seq %d, then seq %d on a retry", j.job, j.user, j.seqs[0], q)
			}
			if other, ok := answeredBy[j.user][q]; ok && other != j.job {
				report("wrong-message", "%s: seq %d answered for job %d and for job %d", j.user, q, other, j.job)
			}
			answeredBy[j.user][q] = j.job
		}
	}
	byUser := map[string][]*connRec{}
	for _, c := range conns {
		byUser[c.user] = append(byUser[c.user], c)
	}
	users := make([]string, 0, len(byUser))
	for u := range byUser {
		users = append(users, u)
	}
	for u := range answeredBy {
		if _, ok := byUser[u]; !ok {
			users = append(users, u)
		}
	}
	sort.Strings(users)
	for _, user := range users {
		ucs := byUser[user]
		acks := userAcks{conns: map[*connRec][]event{}}
		exists := map[int64]bool{}
		for q := range answeredBy[user] {
			exists[q] = true
		}
		deliveredJob := map[int64]int{}          // seq -> job carried
		deliveredAt := map[int][]int64{}         // job -> distinct seqs it was delivered under
		delivered := map[int64]bool{}            // seqs delivered on some connection
		deviceGot := map[string]map[int64]bool{} // device -> seqs delivered on its connections
		for _, c := range ucs {
			deviceGot[c.deviceName()] = map[int64]bool{}
		}
		type place struct {
			c *connRec
			i int
		}
		firstAt := map[int64]place{} // where each seq came first
		for _, c := range ucs {
			for _, e := range c.events {
				switch {
				case e.kind == evAck:
					acks.conns[c] = append(acks.conns[c], e)
				case e.kind == evMessage && e.seq > 0 && e.room == "":
					exists[e.seq] = true
				}
			}
		}
		var top int64
		for q := range exists {
			top = max(top, q)
		}
		// inboxBefore is the highest seq answered before t: a welcome
		// dialled after that must report an inbox_seq at least as high.
		inboxBefore := func(t time.Time) (int64, int) {
			var best int64
			job := -1
			for q, jn := range answeredBy[user] {
				if j := jobs[jn]; q > best && !j.firstAt.IsZero() && j.firstAt.Before(t) {
					best, job = q, jn
				}
			}
			return best, job
		}
		for _, c := range ucs {
			if c.closed {
				s.closeCodes[c.closeCode]++
				checkClose(c, report)
			}
			if q, jn := inboxBefore(c.dialAt); !c.dialAt.IsZero() && q > c.inboxSeq {
				report("inbox-seq", "%s: welcome inbox_seq %d, but seq %d (job %d) was answered before the dial: the user's seqs went back", connName(rec, c), c.inboxSeq, q, jn)
			}
			var high int64
			if c.since != nil {
				high = *c.since
			}
			seen := map[int64]int{}
			nonRel := map[string]int{}
			var gaps [][2]int64
			covered := func(x int64) bool {
				for _, g := range gaps {
					if x >= g[0] && x <= g[1] {
						return true
					}
				}
				return false
			}
			holes := func(from, to int64, at time.Time, kind string, i int) {
				var missing []int64
				for x := from; x <= to; x++ {
					if exists[x] && !covered(x) {
						missing = append(missing, x)
					}
				}
				if len(missing) == 0 {
					return
				}
				acked, who := acks.maxOther(c, at)
				var bad []int64
				for _, x := range missing {
					if x > acked {
						bad = append(bad, x)
					}
				}
				if len(bad) == 0 {
					return
				}
				s.holes += len(bad)
				report(kind, "%s: seqs %v missing (other connections of the device had acknowledged up to %d by then%s)\n%s",
					connName(rec, c), compact(bad), acked, whoSuffix(who), window(rec, c, i))
			}
			for i, e := range c.events {
				if e.room != "" {
					continue // a reliable room's: checkRooms
				}
				switch e.kind {
				case evGap:
					s.gaps++
					gaps = append(gaps, [2]int64{e.from, e.to})
					if !o.gapsAllowed {
						report("gap", "%s: gap frame %d..%d, but no inbox limit or TTL was exceeded\n%s", connName(rec, c), e.from, e.to, window(rec, c, i))
					}
				case evMessage:
					j := jobs[e.job]
					if e.seq == 0 {
						s.deliveredOther++
						if n, dup := nonRel[e.id]; dup {
							report("duplicate-nonreliable", "%s: message %s (job %d) delivered twice (frames %d and %d)\n%s", connName(rec, c), e.id, e.job, n, i, window(rec, c, i))
						}
						nonRel[e.id] = i
						switch {
						case j != nil && j.room != "" && !j.reliable:
							// A plain room message: at most once, as above.
						case j == nil || j.user != user || j.reliable:
							report("unknown-message", "%s: non-reliable message %s with job %d that was not published so\n%s", connName(rec, c), e.id, e.job, window(rec, c, i))
						case j.refused && !j.answered:
							report("delivered-503", "%s: non-reliable job %d delivered, but its publish was answered 503\n%s", connName(rec, c), e.job, window(rec, c, i))
						}
						continue
					}
					s.deliveredReliable++
					if first, ok := seen[e.seq]; ok {
						s.duplicates++
						report("duplicate", "%s: seq %d again (first at frame %d)\n%s", connName(rec, c), e.seq, first, window(rec, c, i))
						continue
					}
					seen[e.seq] = i
					delivered[e.seq] = true
					deviceGot[c.deviceName()][e.seq] = true
					if e.seq < high {
						s.outOfOrder++
						report("out-of-order", "%s: seq %d after seq %d\n%s", connName(rec, c), e.seq, high, window(rec, c, i))
					} else {
						holes(high+1, e.seq-1, e.at, "hole", i)
						high = e.seq
					}
					if prev, ok := deliveredJob[e.seq]; ok && prev != e.job {
						report("wrong-message", "%s: seq %d carried job %d, another connection got job %d under it\n%s", connName(rec, c), e.seq, e.job, prev, window(rec, c, i))
					}
					deliveredJob[e.seq] = e.job
					if _, ok := firstAt[e.seq]; !ok {
						firstAt[e.seq] = place{c, i}
					}
					if !slices.Contains(deliveredAt[e.job], e.seq) {
						deliveredAt[e.job] = append(deliveredAt[e.job], e.seq)
					}
				}
			}
			if c.ourClose {
				end := c.closedAt
				if end.IsZero() {
					end = time.Now()
				}
				holes(high+1, top, end, "tail-hole", len(c.events)-1)
			}
		}
		s.distinctReliable += len(delivered)
		// Answered but delivered nowhere.
		var lost []int64
		for q := range answeredBy[user] {
			if !delivered[q] {
				lost = append(lost, q)
			}
		}
		slices.Sort(lost)
		if len(lost) > 0 {
			s.lost += len(lost)
			var where []string
			for _, c := range ucs {
				where = append(where, connName(rec, c))
			}
			report("lost", "%s: answered seqs %v reached none of the user's connections: %s", user, compact(lost), strings.Join(where, "; "))
		}
		lostOnDevices(user, answeredBy[user], delivered, deviceGot, ucs, rec, &s, report)
		// Delivered: the message answered for the seq, or one without a
		// definite answer.
		for q, job := range deliveredJob {
			j := jobs[job]
			switch {
			case j == nil || j.user != user || !j.reliable:
				report("unknown-message", "%s: seq %d carried job %d, which was not published as a reliable message to the user", user, q, job)
			case len(j.seqs) > 0 && !slices.Contains(j.seqs, q):
				// Under several seqs: reported below.
				if len(deliveredAt[job]) == 1 && (j.keyed || !j.unknown) {
					report("stored-twice", "%s: job %d answered seq %v but delivered under seq %d; attempts: %s", user, job, j.seqs, q, strings.Join(j.history, ", "))
				}
			case len(j.seqs) == 0 && !j.unknown:
				report("unknown-message", "%s: seq %d carried job %d, whose every publish was refused", user, q, job)
			}
			if a, ok := answeredBy[user][q]; ok && a != job {
				report("wrong-message", "%s: seq %d was answered for job %d but carried job %d", user, q, a, job)
			}
		}
		for job, qs := range deliveredAt {
			if j := jobs[job]; len(qs) > 1 && j != nil && j.keyed {
				slices.Sort(qs)
				p := firstAt[qs[len(qs)-1]]
				report("stored-twice", "%s: job %d (idempotency key) delivered under seqs %v; answered %v; attempts: %s\n%s\n%s",
					user, job, qs, j.seqs, strings.Join(j.history, ", "), connName(rec, p.c), window(rec, p.c, p.i))
			}
		}
	}
	checkRooms(rec, jobs, conns, o, &s, report)
	return s, vs
}

// lostOnDevices reports the answered seqs that reached some connection of
// the user but none of one of its devices (a message acknowledged on the
// phone must still reach the laptop).
func lostOnDevices(user string, answered map[int64]int, delivered map[int64]bool, deviceGot map[string]map[int64]bool,
	ucs []*connRec, rec *recorder, s *checkSummary, report func(kind, format string, args ...any)) {
	devices := make([]string, 0, len(deviceGot))
	for d := range deviceGot {
		devices = append(devices, d)
	}
	sort.Strings(devices)
	for _, d := range devices {
		var lost []int64
		for q := range answered {
			if delivered[q] && !deviceGot[d][q] {
				lost = append(lost, q)
			}
		}
		if len(lost) == 0 {
			continue
		}
		slices.Sort(lost)
		s.lost += len(lost)
		var where []string
		for _, c := range ucs {
			if c.deviceName() == d {
				where = append(where, connName(rec, c))
			}
		}
		report("lost", "%s: answered seqs %v reached none of the connections of device %s: %s", user, compact(lost), d, strings.Join(where, "; "))
	}
}

// checkClose reports a close code the run cannot cause.
func checkClose(c *connRec, report func(kind, format string, args ...any)) {
	switch c.closeCode {
	case 1000:
		if c.ourClose {
			return
		}
	case 4001:
		// Drain: a redirect comes first (with no other active node the
		// close is 1001, contract §7).
		for _, e := range c.events {
			if e.kind == evRedirect {
				return
			}
		}
		report("close-code", "%s/%s on %s: closed 4001 (drain) without a redirect frame before it (%q)", c.client, c.connID, c.node, c.closeReason)
		return
	case 1001, 1006:
		return // shutdown without a target, crash or broken socket
	case 4008:
		if c.slow {
			return
		}
		report("close-code", "%s/%s on %s: closed 4008 (slow consumer) although it never stopped reading (%q)", c.client, c.connID, c.node, c.closeReason)
		return
	}
	report("close-code", "%s/%s on %s: closed %d (%q), which nothing in the run explains", c.client, c.connID, c.node, c.closeCode, c.closeReason)
}

func whoSuffix(who string) string {
	if who == "" {
		return ""
	}
	return ", last by " + who
}

func connName(rec *recorder, c *connRec) string {
	since := "none"
	if c.since != nil {
		since = fmt.Sprint(*c.since)
	}
	end := "open"
	if c.closed {
		end = fmt.Sprintf("closed %d at %s", c.closeCode, rec.offset(c.closedAt))
	}
	return fmt.Sprintf("%s (user %s, device %s) conn %s on %s, welcome at %s with since=%s inbox_seq=%d, %s", c.client, c.user, c.deviceName(), c.connID, c.node,
		rec.offset(c.welcomeAt), since, c.inboxSeq, end)
}

// window prints the frames of c around index i.
func window(rec *recorder, c *connRec, i int) string {
	var b strings.Builder
	from, to := max(0, i-6), min(len(c.events), i+5)
	if from > 0 {
		fmt.Fprintf(&b, "    ... %d earlier records\n", from)
	}
	for k := from; k < to; k++ {
		mark := "  "
		if k == i {
			mark = "=>"
		}
		fmt.Fprintf(&b, "  %s %s %s\n", mark, rec.offset(c.events[k].at), c.events[k])
	}
	if to < len(c.events) {
		fmt.Fprintf(&b, "    ... %d later records\n", len(c.events)-to)
	}
	return b.String()
}

// compact writes sorted seqs as ranges: [3 5-9 12].
func compact(q []int64) string {
	var parts []string
	for i := 0; i < len(q); {
		j := i
		for j+1 < len(q) && q[j+1] == q[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", q[i], q[j]))
		} else {
			parts = append(parts, fmt.Sprint(q[i]))
		}
		i = j + 1
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// assertRecords runs the checker and fails t for every violation (up to
// 8 of each kind with their evidence), each message led by prefix (the
// seed).
func assertRecords(t testing.TB, prefix string, rec *recorder, l *ledger, conns []*connRec, o checkOpts) checkSummary {
	t.Helper()
	s, vs := checkRecords(rec, l, conns, o)
	t.Logf("%scounts: %s", prefix, s)
	// At most 8 of each kind, so that a rare kind is not hidden behind
	// a frequent one.
	shown := map[string]int{}
	for _, v := range vs {
		if shown[v.kind]++; shown[v.kind] <= 8 {
			t.Errorf("%s%s: %s", prefix, v.kind, v.msg)
		}
	}
	if len(vs) > 0 {
		t.Errorf("%s%d violations by kind: %v", prefix, len(vs), s.violations)
	}
	return s
}

// ---- the checker's own test ----

// TestCheckerReportsViolations feeds the checker records with one defect
// each and asserts it reports exactly that defect, and nothing for the
// legitimate cases (a hole covered by a gap, or by another connection's
// earlier ack).
// onDevice sets the device of a record of the checker's own test.
func onDevice(device string, c *connRec) *connRec {
	c.device = device
	return c
}

func TestCheckerReportsViolations(t *testing.T) {
	t0 := time.Now()
	rec := &recorder{start: t0}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	msg := func(ms int, seq int64, job int) event {
		return event{at: at(ms), kind: evMessage, seq: seq, job: job, id: fmt.Sprintf("m%d", job)}
	}
	ack := func(ms int, seq int64) event { return event{at: at(ms), kind: evAck, seq: seq, job: -1} }
	gap := func(ms int, from, to int64) event { return event{at: at(ms), kind: evGap, from: from, to: to, job: -1} }
	// Jobs 1..5 answered seqs 1..5 for u; job 10 is non-reliable, job 11
	// non-reliable answered 503, job 12 reliable without answer (503).
	mkLedger := func() *ledger {
		l := newLedger(rec)
		for j := 1; j <= 5; j++ {
			l.add(&jobRec{job: j, user: "u", reliable: true, keyed: true})
			l.attempt(j, 200, int64(j))
		}
		l.add(&jobRec{job: 10, user: "u"})
		l.attempt(10, 200, 0)
		l.add(&jobRec{job: 11, user: "u"})
		l.attempt(11, 503, 0)
		l.add(&jobRec{job: 12, user: "u", reliable: true, keyed: true})
		l.attempt(12, 503, 0)
		return l
	}
	conn := func(name string, closeCode int, evs ...event) *connRec {
		return &connRec{client: name, user: "u", node: "n1", connID: name, welcomeAt: t0, events: evs, closed: closeCode != 0, closeCode: closeCode, closedAt: at(1000), ourClose: closeCode == 1000}
	}
	all := func() []event {
		return []event{msg(1, 1, 1), msg(2, 2, 2), msg(3, 3, 3), msg(4, 4, 4), msg(5, 5, 5)}
	}
	cases := []struct {
		name  string
		ledg  func(*ledger)
		conns []*connRec
		want  []string // violation kinds, sorted
	}{
		{"clean", nil, []*connRec{conn("a", 1000, all()...)}, nil},
		{"duplicate", nil, []*connRec{conn("a", 1000, msg(1, 1, 1), msg(2, 2, 2), msg(3, 2, 2), msg(4, 3, 3), msg(5, 4, 4), msg(6, 5, 5))}, []string{"duplicate"}},
		{"out of order", nil, []*connRec{conn("a", 1000, msg(1, 1, 1), msg(2, 3, 3), msg(3, 2, 2), msg(4, 4, 4), msg(5, 5, 5))}, []string{"hole", "out-of-order"}},
		{"hole", nil, []*connRec{conn("a", 1000, msg(1, 1, 1), msg(2, 2, 2), msg(4, 4, 4), msg(5, 5, 5)), conn("b", 1000, all()...)}, []string{"hole"}},
		{"hole acked by another connection later", nil, []*connRec{
			conn("a", 1000, msg(1, 1, 1), msg(2, 2, 2), msg(40, 4, 4), msg(50, 5, 5)),
			conn("b", 1000, msg(1, 1, 1), msg(2, 2, 2), msg(3, 3, 3), ack(45, 3), msg(50, 4, 4), msg(50, 5, 5)),
		}, []string{"hole"}},
		{"hole acked by another connection before", nil, []*connRec{
			conn("a", 1000, msg(1, 1, 1), msg(2, 2, 2), msg(40, 4, 4), msg(50, 5, 5)),
			conn("b", 1000, msg(1, 1, 1), msg(2, 2, 2), msg(3, 3, 3), ack(35, 3), msg(50, 4, 4), msg(50, 5, 5)),
		}, nil},
		{"own ack does not excuse a hole", nil, []*connRec{
			conn("a", 1000, msg(1, 1, 1), msg(2, 2, 2), ack(3, 2), msg(40, 4, 4), msg(50, 5, 5)),
			conn("b", 1000, all()...),
		}, []string{"hole"}},
		{"hole covered by a gap", nil, []*connRec{conn("a", 1000, gap(0, 1, 2), msg(3, 3, 3), msg(4, 4, 4), msg(5, 5, 5)), conn("b", 1000, all()...)}, []string{"gap"}},
		{"resume with since", nil, []*connRec{conn("a", 1006, msg(1, 1, 1), msg(2, 2, 2)), func() *connRec {
			c := conn("a", 1000, msg(3, 3, 3), msg(4, 4, 4), msg(5, 5, 5))
			since := int64(2)
			c.since = &since
			return c
		}()}, nil},
		{"tail hole", nil, []*connRec{conn("a", 1000, msg(1, 1, 1), msg(2, 2, 2), msg(3, 3, 3)), conn("b", 1006, all()...)}, []string{"tail-hole"}},
		{"lost", nil, []*connRec{conn("a", 1006, msg(1, 1, 1), msg(2, 2, 2), msg(3, 3, 3))}, []string{"lost"}},
		{"wrong message under a seq", nil, []*connRec{conn("a", 1000, msg(1, 1, 1), msg(2, 2, 3), msg(3, 3, 3), msg(4, 4, 4), msg(5, 5, 5))}, []string{"stored-twice", "wrong-message"}},
		{"unanswered reliable delivered (503: may be stored)", nil, []*connRec{conn("a", 1000, append(all(), msg(6, 6, 12))...)}, nil},
		{"idempotent job stored twice", func(l *ledger) { l.attempt(12, 200, 7) }, []*connRec{conn("a", 1000, append(all(), msg(6, 6, 12), msg(7, 7, 12))...)}, []string{"stored-twice"}},
		{"non-reliable twice", nil, []*connRec{conn("a", 1000, append(all(), msg(6, 0, 10), msg(7, 0, 10))...)}, []string{"duplicate-nonreliable"}},
		{"non-reliable answered 503 delivered", nil, []*connRec{conn("a", 1000, append(all(), msg(6, 0, 11))...)}, []string{"delivered-503"}},
		{"4008 without a pause", nil, []*connRec{conn("a", 4008, msg(1, 1, 1), msg(2, 2, 2)), conn("a", 1000, all()...)}, []string{"close-code"}},
		{"4008 after a pause", nil, []*connRec{func() *connRec { c := conn("a", 4008, msg(1, 1, 1), msg(2, 2, 2)); c.slow = true; return c }(), conn("a", 1000, all()...)}, nil},
		{"inbox_seq behind an answered seq", nil, []*connRec{func() *connRec {
			c := conn("a", 1000, all()...)
			c.dialAt, c.inboxSeq = time.Now().Add(time.Hour), 4
			return c
		}()}, []string{"inbox-seq"}},
		{"4001 without a redirect", nil, []*connRec{conn("a", 4001, msg(1, 1, 1), msg(2, 2, 2)), conn("a", 1000, all()...)}, []string{"close-code"}},
		{"4001 after a redirect", nil, []*connRec{conn("a", 4001, msg(1, 1, 1), msg(2, 2, 2), event{at: at(3), kind: evRedirect, job: -1}), conn("a", 1000, all()...)}, nil},
		{"4003", nil, []*connRec{conn("a", 4003, msg(1, 1, 1), msg(2, 2, 2)), conn("a", 1000, all()...)}, []string{"close-code"}},
		// Acks are per device: the phone's ack excuses no hole on the laptop.
		{"hole acked by another device before", nil, []*connRec{
			onDevice("laptop", conn("a", 1000, msg(1, 1, 1), msg(2, 2, 2), msg(40, 4, 4), msg(50, 5, 5))),
			onDevice("phone", conn("b", 1000, msg(1, 1, 1), msg(2, 2, 2), msg(3, 3, 3), ack(35, 3), msg(50, 4, 4), msg(50, 5, 5))),
		}, []string{"hole", "lost"}},
		{"hole acked by the same device before", nil, []*connRec{
			onDevice("laptop", conn("a", 1000, msg(1, 1, 1), msg(2, 2, 2), msg(40, 4, 4), msg(50, 5, 5))),
			onDevice("laptop", conn("b", 1006, msg(1, 1, 1), msg(2, 2, 2), msg(3, 3, 3), ack(35, 3))),
		}, nil},
		{"lost on one device", nil, []*connRec{
			onDevice("laptop", conn("a", 1006, msg(1, 1, 1), msg(2, 2, 2))),
			onDevice("phone", conn("b", 1000, all()...)),
		}, []string{"lost"}},
	}
	for _, tc := range cases {
		l := mkLedger()
		if tc.ledg != nil {
			tc.ledg(l)
		}
		s, vs := checkRecords(rec, l, tc.conns, checkOpts{})
		var got []string
		for _, v := range vs {
			got = append(got, v.kind)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: violations %v, want %v; reports:\n%v\ncounts %s", tc.name, got, tc.want, vs, s)
		}
	}
	// The injection switch of the recorder corrupts the record it feeds
	// the checker: the checker sees each.
	for _, inject := range []string{"dup", "reorder"} {
		r := &recorder{start: t0, inject: inject}
		c := conn("a", 1000)
		for _, e := range all() {
			r.add(c, e)
		}
		_, vs := checkRecords(r, mkLedger(), []*connRec{c}, checkOpts{})
		kinds := map[string]bool{}
		for _, v := range vs {
			kinds[v.kind] = true
		}
		want := map[string]string{"dup": "duplicate", "reorder": "out-of-order"}[inject]
		if !kinds[want] {
			t.Errorf("inject %s: the checker reported %v, want a %s", inject, vs, want)
		}
	}
}

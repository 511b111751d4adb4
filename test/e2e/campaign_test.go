package e2e

// TestCampaign: a randomized, seeded fault campaign checked by the
// independent checker (checker_test.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// cmpMsg is one message of a publish or of a batch.
type cmpMsg struct {
	Target         target         `json:"target"`
	Event          string         `json:"event"`
	Data           map[string]any `json:"data"`
	Reliable       bool           `json:"reliable,omitempty"`
	Class          string         `json:"class,omitempty"`
	IdempotencyKey string         `json:"idempotency_key,omitempty"`
	job            int
}

// campaign is one run: its seed and schedule, the cluster, the clients,
// the publisher's ledger and the faults injected.
type campaign struct {
	t      *testing.T
	seed   uint64
	pre    string // "seed N: " for every failure message
	dur    time.Duration
	mode   string // "standalone" (AOF, appendfsync always) or "sentinel"
	c      *gwCluster
	srv    *redistest.Server
	set    *redistest.SentinelSet
	rec    *recorder
	ledger *ledger
	users  []string

	clients []*rawClient
	slowOK  []*rawClient // clients that may stop reading

	liveSet
	mu        sync.Mutex
	nextNode  int
	faults    []string
	faultKind map[string]int
	conflicts map[int]bool // jobs whose retry was answered 409

	failedAttempts atomic.Int64
}

// campaignSeed is WSGATE_CHAOS_SEED, or a fresh one.
func campaignSeed(t *testing.T) uint64 {
	if s := os.Getenv("WSGATE_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WSGATE_CHAOS_SEED=%q: %v", s, err)
		}
		return v
	}
	return rand.Uint64() % 1_000_000_000
}

// TestCampaign runs several gateways on Redis (standalone with AOF and
// appendfsync always, or a Sentinel set with WSGATE_RELIABLE_REPLICAS=1),
// reconnecting raw clients (some resume with since, some users have
// several connections on up to three devices, some clients stop reading for a while under a flood
// of large messages), and a publisher mixing classes, reliable and not,
// single and batch publishes, and retries of failed reliable publishes
// with the same idempotency_key. Meanwhile it injects faults drawn at
// random: SIGKILL and restart of a node, drain of a node (API or SIGTERM)
// with a replacement, Redis SIGSTOP/SIGCONT, CLIENT KILL TYPE pubsub and
// normal, a Redis restart (standalone) or a Sentinel failover. After a
// quiet period and a last reliable message to every user, the checker
// asserts the contract's invariants on the raw frames; the summary counts
// are logged (and are what docs/reliability.md quotes).
//
// Everything the run does is drawn from one seed (the publish mix, the
// users and clients, the fault schedule and the deployment; timing jitters):
//
//	WSGATE_CHAOS_SEED=123 WSGATE_CHAOS_DURATION=10m \
//	    go test -race -count=1 -timeout 30m -v -run 'TestCampaign$' ./test/e2e/
//
// The seed is printed at the start and repeated by every failure.
// WSGATE_CHAOS_DURATION defaults to 60s (the run in `make test`);
// WSGATE_CHAOS_REDIS=standalone|sentinel overrides the deployment;
// WSGATE_CHAOS_INJECT=dup|reorder corrupts one recorded frame to show the
// checker catching it.
func TestCampaign(t *testing.T) {
	t.Parallel()
	cp := &campaign{t: t, seed: campaignSeed(t), dur: 60 * time.Second, rec: newRecorder(), faultKind: map[string]int{}, conflicts: map[int]bool{}}
	cp.ledger = newLedger(cp.rec)
	cp.pre = fmt.Sprintf("seed %d: ", cp.seed)
	if s := os.Getenv("WSGATE_CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("WSGATE_CHAOS_DURATION=%q: %v", s, err)
		}
		cp.dur = d
	}
	setup := rand.New(rand.NewPCG(cp.seed, 1))
	cp.mode = []string{"standalone", "sentinel"}[setup.IntN(2)]
	if m := os.Getenv("WSGATE_CHAOS_REDIS"); m != "" {
		cp.mode = m
	}
	t.Logf("campaign seed %d (WSGATE_CHAOS_SEED=%d to repeat), duration %s, Redis %s", cp.seed, cp.seed, cp.dur, cp.mode)

	settings := map[string]string{
		"WSGATE_INBOX_LIMIT": "100000", // the maximum: a gap frame is a failure
		"WSGATE_SEND_QUEUE":  "64",
		"WSGATE_DRAIN_RATE":  "100",
	}
	var url string
	switch cp.mode {
	case "standalone":
		cp.srv = redistest.Standalone(t, redistest.Options{AOF: true, AppendFsync: "always"})
		url = cp.srv.URL()
	case "sentinel":
		cp.set = redistest.Sentinel(t)
		url = cp.set.URL()
		settings["WSGATE_RELIABLE_REPLICAS"] = "1"
	default:
		t.Fatalf("WSGATE_CHAOS_REDIS=%q: want standalone or sentinel", cp.mode)
	}
	// The first campaign room has presence: checked after the faults.
	settings["WSGATE_ROOMS_FILE"] = writeRoomsFile(t, "rooms:\n  - pattern: \""+campaignRooms[0]+"\"\n    presence: true\n")
	cp.c = newCluster(t, url, settings)
	cp.setLive(cp.c.startNodes("n", 3, nil)...)
	cp.nextNode = 4

	// Users and their clients.
	devices := rand.New(rand.NewPCG(cp.seed, 5))
	transports := rand.New(rand.NewPCG(cp.seed, 6))
	for i := range 12 {
		user := fmt.Sprintf("cp-%02d", i)
		cp.users = append(cp.users, user)
		for k := range 1 + setup.IntN(3) {
			// The first connections go round robin over the nodes; the
			// reconnects through the allocator of a live node.
			opt := rawOptions{resume: setup.IntN(2) == 0, pick: allocatorOf(cp.liveNodes), ackEvery: 1 + setup.IntN(20),
				first: cp.liveNodes()[len(cp.clients)%3].WS(), device: campaignDevice(devices), transport: campaignTransport(transports)}
			r := startRawClient(t, cp.rec, fmt.Sprintf("%s/%d", user, k), user, opt)
			cp.clients = append(cp.clients, r)
			if setup.IntN(4) == 0 {
				cp.slowOK = append(cp.slowOK, r)
			}
		}
	}
	waitConnected(t, 30*time.Second, cp.clients)
	t.Logf("%d clients of %d users on %d devices connected (%d may stop reading; by transport %v)", len(cp.clients), len(cp.users), countDevices(cp.clients), len(cp.slowOK), countTransports(cp.clients))
	cp.joinRooms(rand.New(rand.NewPCG(cp.seed, 5)))

	ctx, stop := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); cp.publish(ctx, rand.New(rand.NewPCG(cp.seed, 2))) }()
	go func() { defer bg.Done(); cp.slowConsumers(ctx, rand.New(rand.NewPCG(cp.seed, 3))) }()
	defer func() { stop(); bg.Wait() }()

	cp.injectFaults(rand.New(rand.NewPCG(cp.seed, 4)))
	stop()
	bg.Wait()
	t.Logf("%spublisher stopped after %s; faults: %s", cp.pre, time.Since(cp.rec.start).Round(time.Millisecond), strings.Join(cp.faults, "; "))
	cp.quiet()
	cp.roomQuiet()
	cp.presenceQuiet()
	for _, r := range cp.clients {
		r.stop()
	}
	var conns []*connRec
	for _, r := range cp.clients {
		conns = append(conns, r.records()...)
	}
	var conflicts []int
	for j := range cp.conflicts {
		conflicts = append(conflicts, j)
	}
	slices.Sort(conflicts)
	for i, j := range conflicts {
		if i == 10 {
			t.Errorf("%sand %d more jobs whose retry was answered 409", cp.pre, len(conflicts)-10)
			break
		}
		jr := cp.ledger.get(j)
		t.Errorf("%sjob %d (key cp-%d-%d, to %s): a retry with the same idempotency key and body was answered 409 (contract: 409 only for another body); attempts: %s",
			cp.pre, j, cp.seed, j, jr.user, strings.Join(jr.history, ", "))
	}
	s := assertRecords(t, cp.pre, cp.rec, cp.ledger, conns, checkOpts{})
	t.Logf("%sfaults injected by kind: %v; failed publish attempts (retried when reliable) %d", cp.pre, cp.faultKind, cp.failedAttempts.Load())
	if s.answered == 0 || s.distinctReliable == 0 {
		t.Errorf("%snothing was answered or delivered: %s", cp.pre, s)
	}
	if t.Failed() {
		cp.logWarnings()
	}
}

// campaignDevice draws the device of a client: the default one (a client
// naming none), "phone" or "laptop", from a stream of the seed of its own
// (the rest of the schedule does not move). Several clients of a user may
// share a device; the checker then holds each device to receiving every
// seq (an acknowledgement of another device excuses nothing).
func campaignDevice(rng *rand.Rand) string {
	return []string{"", "phone", "laptop"}[rng.IntN(3)]
}

// campaignTransport draws the transport of a client, from a stream of
// the seed of its own: half WebSocket, a quarter each SSE and HTTP
// streaming (contract 18: the same session, its acks posted).
func campaignTransport(rng *rand.Rand) client.Transport {
	return []client.Transport{client.WebSocket, client.WebSocket, client.SSE, client.Stream}[rng.IntN(4)]
}

// countTransports counts the clients by transport.
func countTransports(clients []*rawClient) map[client.Transport]int {
	n := map[client.Transport]int{}
	for _, r := range clients {
		n[r.opt.transport]++
	}
	return n
}

// countDevices counts the distinct (user, device) pairs of the clients.
func countDevices(clients []*rawClient) int {
	seen := map[[2]string]bool{}
	for _, r := range clients {
		seen[[2]string{r.user, r.opt.device}] = true
	}
	return len(seen)
}

func (cp *campaign) fault(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	cp.mu.Lock()
	cp.faults = append(cp.faults, cp.rec.offset(time.Now())+" "+s)
	cp.mu.Unlock()
	cp.t.Logf("%s%s %s", cp.pre, cp.rec.offset(time.Now()), s)
}

// master is the Redis server that takes the writes now.
func (cp *campaign) master() *redistest.Server {
	if cp.set != nil {
		return cp.set.Master
	}
	return cp.srv
}

// injectFaults runs the fault schedule for the duration, from the test's
// goroutine (a failed restart ends the test).
func (cp *campaign) injectFaults(rng *rand.Rand) {
	t := cp.t
	kinds := []string{"kill", "drain-api", "sigterm", "pause", "kill-pubsub", "kill-normal", "redis"}
	end := cp.rec.start.Add(cp.dur)
	sleep := func(d time.Duration) { time.Sleep(min(d, max(0, time.Until(end)))) } // pacing of the schedule
	sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
	for time.Now().Before(end) {
		kind := kinds[rng.IntN(len(kinds))]
		pick := rng.IntN(1 << 20)
		d := time.Duration(500+rng.IntN(2500)) * time.Millisecond
		cp.faultKind[kind]++
		live := cp.liveNodes()
		victim := live[pick%len(live)]
		switch kind {
		case "kill":
			cp.fault("SIGKILL %s, restart after %s", victim.ID, d)
			cp.replace(victim, nil)
			victim.Kill()
			time.Sleep(d)
			victim.Restart(t)
			cp.replace(nil, victim)
		case "drain-api", "sigterm":
			repl := cp.c.startNode(fmt.Sprintf("n%d", cp.nextNode), nil)
			cp.nextNode++
			cp.replace(victim, repl)
			if kind == "sigterm" {
				cp.fault("SIGTERM %s (replacement %s)", victim.ID, repl.ID)
				victim.current().Signal(syscall.SIGTERM)
			} else {
				via := cp.liveNodes()[0]
				cp.fault("drain %s through the API of %s (replacement %s)", victim.ID, via.ID, repl.ID)
				if st, b, err := via.call(http.MethodPost, "/api/v1/nodes/"+victim.ID+"/drain", nil); err != nil || st != http.StatusAccepted {
					t.Errorf("%sdrain of %s through %s: %d %s %v", cp.pre, victim.ID, via.ID, st, b, err)
				}
			}
			if !victim.WaitExit(30 * time.Second) {
				t.Errorf("%s%s did not exit within 30 s of its drain", cp.pre, victim.ID)
				victim.Kill()
			} else if code := victim.ExitCode(); code != 0 {
				t.Errorf("%sdrained %s exited with %d, want 0", cp.pre, victim.ID, code)
			}
		case "pause":
			srv := cp.master()
			what := "Redis"
			if cp.set != nil {
				// A paused master would be failed over by the sentinel
				// (down-after 1 s): pause the replica, which every
				// reliable publish waits for.
				srv, what = cp.set.Replica, "the Redis replica"
			}
			cp.fault("SIGSTOP %s for %s", what, d)
			srv.Pause()
			time.Sleep(d)
			srv.Resume()
		case "kill-pubsub", "kill-normal":
			typ := strings.TrimPrefix(kind, "kill-")
			n, err := cp.master().KillClients(typ)
			cp.fault("CLIENT KILL TYPE %s: %d closed (%v)", typ, n, err)
		case "redis":
			if cp.set != nil {
				old := cp.set.Master.Port
				cp.set.Failover()
				cp.fault("Sentinel failover: master %d -> %d", old, cp.set.Master.Port)
				cp.set.WaitReplicaSynced()
			} else {
				cp.fault("restart Redis (AOF, appendfsync always), down for %s", d)
				cp.srv.Stop()
				time.Sleep(d)
				cp.srv.Start()
			}
		}
		sleep(time.Duration(1500+rng.IntN(3000)) * time.Millisecond)
	}
}

// slowConsumers makes a client that may stop reading do so now and then,
// while its user gets a flood of large non-reliable messages.
func (cp *campaign) slowConsumers(ctx context.Context, rng *rand.Rand) {
	if len(cp.slowOK) == 0 {
		return
	}
	job := 1_000_000
	// About 4.5 MB a pause: more than the socket buffers of a connection
	// that does not read hold, so the send queue fills.
	pad := strings.Repeat("x", 6000)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(2000+rng.IntN(3000)) * time.Millisecond): // pacing of the schedule
		}
		r := cp.slowOK[rng.IntN(len(cp.slowOK))]
		d := time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		class := []string{"chat", "realtime", "notify"}[rng.IntN(3)]
		r.pause(d)
		for range 5 {
			var batch []cmpMsg
			for range 150 {
				job++
				batch = append(batch, cmpMsg{Target: target{Type: "user", ID: r.user}, Event: "flood", Class: class,
					Data: map[string]any{"job": job, "pad": pad}, job: job})
				cp.ledger.add(&jobRec{job: job, user: r.user, class: class})
			}
			cp.send(batch)
		}
	}
}

// publish generates jobs from rng at 40 a second until ctx ends, and waits
// for the attempts under way.
func (cp *campaign) publish(ctx context.Context, rng *rand.Rand) {
	jobs := make(chan []cmpMsg, 1000)
	wait := runWorkers(8, jobs, cp.send)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	job := 0
	mk := func() cmpMsg {
		job++
		m := cmpMsg{Target: target{Type: "user", ID: cp.users[rng.IntN(len(cp.users))]}, Event: "cp",
			Class: []string{"realtime", "chat", "notify", ""}[rng.IntN(4)], Reliable: rng.IntN(10) < 7,
			Data: map[string]any{"job": job}, job: job}
		if m.Reliable {
			m.IdempotencyKey = fmt.Sprintf("cp-%d-%d", cp.seed, job)
		}
		cp.ledger.add(cp.roomJob(rng, &m))
		return m
	}
	for {
		select {
		case <-ctx.Done():
			close(jobs)
			wait()
			return
		case <-tick.C:
		}
		var b []cmpMsg
		if rng.IntN(4) == 0 {
			for range 2 + rng.IntN(5) {
				b = append(b, mk())
			}
		} else {
			b = append(b, mk())
		}
		select {
		case jobs <- b:
		default:
			cp.t.Errorf("%sthe publisher's queue is full", cp.pre)
		}
	}
}

// send publishes msgs (one: POST /publish; more: a batch) and retries the
// reliable ones that got no definite answer, with the same idempotency
// keys, on the next node, for up to 20 s.
func (cp *campaign) send(msgs []cmpMsg) {
	deadline := time.Now().Add(20 * time.Second)
	for len(msgs) > 0 {
		g := cp.node()
		var retry []cmpMsg
		if g != nil {
			for i, st := range cp.post(g, msgs) {
				if st.status != http.StatusOK {
					cp.failedAttempts.Add(1)
				}
				on := g.ID
				if st.why != "" {
					on += " (" + st.why + ")"
				}
				cp.ledger.attemptOn(msgs[i].job, on, st.status, st.seq)
				if st.status == http.StatusConflict {
					// The contract answers 409 for a key reused with
					// another body only; the retry goes on.
					cp.mu.Lock()
					cp.conflicts[msgs[i].job] = true
					cp.mu.Unlock()
				}
				if msgs[i].Reliable && (st.status == 0 || st.status >= 500 || st.status == http.StatusConflict) {
					retry = append(retry, msgs[i])
				}
			}
		} else {
			retry = msgs
		}
		msgs = retry
		if len(msgs) == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond) // pacing of the retry on the next node
	}
}

type postResult struct {
	status int
	seq    int64
	why    string // the error of a failed attempt
}

// post sends one publish or batch and returns a status per message (0:
// no answer; a batch entry's error code is taken for its status).
func (cp *campaign) post(g *gateway, msgs []cmpMsg) []postResult {
	out := make([]postResult, len(msgs))
	path, body := "/api/v1/publish", any(msgs[0])
	if len(msgs) > 1 {
		path, body = "/api/v1/publish/batch", map[string]any{"messages": msgs}
	}
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.HTTP()+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.c.http.Do(req)
	if err != nil {
		for i := range out {
			out[i].why = err.Error()
		}
		return out
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return out
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		why := string(bytes.TrimSpace(rb))
		if json.Unmarshal(rb, &e) == nil && e.Error.Code != "" {
			why = e.Error.Code + ": " + e.Error.Message
		}
		for i := range out {
			out[i] = postResult{status: resp.StatusCode, why: why}
		}
		return out
	}
	if len(msgs) == 1 {
		var a publishAnswer
		if json.Unmarshal(rb, &a) != nil {
			return out
		}
		out[0] = postResult{status: http.StatusOK, seq: a.Seq}
		return out
	}
	var a struct {
		Results []struct {
			Seq   int64 `json:"seq"`
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"results"`
	}
	if json.Unmarshal(rb, &a) != nil || len(a.Results) != len(msgs) {
		return out
	}
	for i, r := range a.Results {
		if r.Error != nil {
			out[i].why = r.Error.Code + ": " + r.Error.Message
		}
		switch {
		case r.Error == nil:
			out[i] = postResult{status: http.StatusOK, seq: r.Seq}
		case r.Error.Code == "unavailable":
			out[i].status = http.StatusServiceUnavailable
		case r.Error.Code == "conflict":
			out[i].status = http.StatusConflict
		default:
			out[i].status = http.StatusBadRequest
		}
	}
	return out
}

// quiet waits for the cluster to settle (every client connected for a
// second), then publishes one last reliable message to every user and
// waits until every client's connection has it (fence).
func (cp *campaign) quiet() {
	t := cp.t
	for _, g := range cp.liveNodes() {
		g.waitReady(t, 30*time.Second)
	}
	waitConnected(t, 30*time.Second, cp.clients)
	time.Sleep(time.Second) // let reconnects of the last fault settle (no event to wait for: a reconnect may follow)
	fence(t, cp.pre, cp.ledger, cp.users, cp.clients, cp.node, 20*time.Second)
}

// logWarnings logs the gateways' warnings and errors (the cluster's
// cleanup logs the last lines of each).
func (cp *campaign) logWarnings() {
	cp.c.mu.Lock()
	nodes := append([]*gateway(nil), cp.c.nodes...)
	cp.c.mu.Unlock()
	for _, g := range nodes {
		var lines []string
		for _, l := range strings.Split(g.log(), "\n") {
			if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
				lines = append(lines, l)
			}
		}
		if len(lines) > 40 {
			lines = append(lines[:20], append([]string{fmt.Sprintf("... %d more ...", len(lines)-40)}, lines[len(lines)-20:]...)...)
		}
		cp.t.Logf("%swarnings and errors of gateway %s:\n%s", cp.pre, g.ID, strings.Join(lines, "\n"))
	}
}

package e2e

// Issue "Reliable delivery that survives anything": reconnecting clients
// and a steady reliable publisher while nodes are killed, drained and
// replaced and Redis restarts (AOF) or fails over (Sentinel). Then the
// independent checker (checker_test.go) judges the raw frames every
// connection received against every answer of the API.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// chaos is one run: the cluster, the users and their raw clients, and the
// publisher's ledger.
type chaos struct {
	t       *testing.T
	c       *gwCluster
	users   []string
	clients []*rawClient
	rec     *recorder
	ledger  *ledger

	liveSet // nodes the publisher sends through

	attempts, answered, failed, skipped, gaveUp atomic.Int64
}

func newChaos(t *testing.T, c *gwCluster, users int) *chaos {
	ch := &chaos{t: t, c: c, rec: newRecorder()}
	ch.ledger = newLedger(ch.rec)
	for i := range users {
		ch.users = append(ch.users, fmt.Sprintf("cu-%02d", i))
	}
	return ch
}

// startClients starts perUser resuming clients for every user, the first
// connections round robin over nodes, the reconnects through the
// allocator of a live node.
func (ch *chaos) startClients(perUser int, nodes []*gateway) {
	t := ch.t
	for i, u := range ch.users {
		for j := range perUser {
			k := i*perUser + j
			ch.clients = append(ch.clients, startRawClient(t, ch.rec, fmt.Sprintf("%s/%d", u, j), u, rawOptions{
				resume: true, pick: allocatorOf(ch.liveNodes), first: nodes[k%len(nodes)].WS(), ackEvery: 50,
			}))
		}
	}
	waitConnected(t, 30*time.Second, ch.clients)
	per := map[string]int{}
	for _, r := range ch.clients {
		_, node := r.connected()
		per[node]++
	}
	t.Logf("%d clients for %d users connected: %v", len(ch.clients), len(ch.users), per)
}

// publish sends reliable messages at rate per second, round robin over
// users and live nodes, until ctx ends; a failed publish is retried on the
// next node. It returns when every publish under way is answered or given
// up.
func (ch *chaos) publish(ctx context.Context, rate int) {
	jobs := make(chan int, 64)
	wait := runWorkers(12, jobs, ch.publishOne)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for j := 1; ; j++ {
		select {
		case <-ctx.Done():
			close(jobs)
			wait()
			return
		case <-tick.C:
		}
		select {
		case jobs <- j:
		default:
			ch.skipped.Add(1) // every worker is waiting on a retry
		}
	}
}

// publishOne publishes job j (without an idempotency key: a retry after
// a 503 may store it twice, which the checker allows for such jobs).
func (ch *chaos) publishOne(j int) {
	user := ch.users[j%len(ch.users)]
	body := reliable(user, "chaos")
	body.Data = map[string]int{"job": j}
	ch.ledger.add(&jobRec{job: j, user: user, reliable: true})
	deadline := time.Now().Add(20 * time.Second)
	for {
		g := ch.node()
		if g != nil {
			ch.attempts.Add(1)
			a, st, err := g.publish(body)
			if err == nil && a.Seq > 0 {
				ch.answered.Add(1)
				ch.ledger.attemptOn(j, g.ID, st, a.Seq)
				return
			}
			ch.ledger.attemptOn(j, g.ID, st, 0)
			ch.failed.Add(1)
		}
		if time.Now().After(deadline) {
			ch.gaveUp.Add(1)
			return
		}
		time.Sleep(50 * time.Millisecond) // pacing of the retry on the next node
	}
}

// fence waits until every client is connected, publishes one last
// reliable message to every user and waits until every client's current
// connection has it: then each connection has had the time to get
// everything before it. A client that does not get it fails the test
// after d (the checker then says what is missing where).
func fence(t *testing.T, pre string, l *ledger, users []string, clients []*rawClient, via func() *gateway, d time.Duration) {
	t.Helper()
	waitConnected(t, 30*time.Second, clients)
	seqs := map[string]int64{}
	for i, u := range users {
		job := 2_000_000 + i
		l.add(&jobRec{job: job, user: u, reliable: true})
		body := reliable(u, "fence")
		body.Data = map[string]int{"job": job}
		deadline := time.Now().Add(20 * time.Second)
		for {
			g := via()
			a, st, err := g.publish(body)
			l.attemptOn(job, g.ID, st, a.Seq)
			if err == nil {
				seqs[u] = a.Seq
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%sthe last message to %s was not answered: %v", pre, u, err)
			}
			time.Sleep(50 * time.Millisecond) // pacing of the retry
		}
	}
	// A connection has the last message when it received it, or when
	// another client of its device acknowledged it: acknowledgements are
	// per device, so a connection that was catching up from the inbox then
	// legitimately never gets it (the checker's rule too).
	ackedByOther := func(r *rawClient) bool {
		for _, o := range clients {
			if o != r && o.user == r.user && o.opt.device == r.opt.device && o.ackedUpTo() >= seqs[r.user] {
				return true
			}
		}
		return false
	}
	start := time.Now()
	for {
		var behind []string
		for _, r := range clients {
			if got := r.currentSeq(); got < seqs[r.user] && !ackedByOther(r) {
				ok, node := r.connected()
				behind = append(behind, fmt.Sprintf("%s at %d of %d (connected %v to %s)", r.name, got, seqs[r.user], ok, node))
			}
		}
		if len(behind) == 0 {
			t.Logf("%severy connection got the last message %s after it was published", pre, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > d {
			t.Errorf("%s%d clients did not get the last message to their user within %s: %v", pre, len(behind), d, head(behind, 10))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check stops the clients and runs the checker on their records.
func (ch *chaos) check() {
	t := ch.t
	fence(t, "", ch.ledger, ch.users, ch.clients, ch.node, 30*time.Second)
	var conns []*connRec
	for _, r := range ch.clients {
		r.stop()
		conns = append(conns, r.records()...)
	}
	t.Logf("chaos counts: publish attempts %d, answered %d, failed attempts (retried) %d, given up %d, skipped ticks %d",
		ch.attempts.Load(), ch.answered.Load(), ch.failed.Load(), ch.gaveUp.Load(), ch.skipped.Load())
	s := assertRecords(t, "", ch.rec, ch.ledger, conns, checkOpts{})
	if s.answered == 0 {
		t.Error("nothing was answered")
	}
}

// runWorkers starts n goroutines that call do for each job until jobs is
// closed; the function it returns waits for them.
func runWorkers[J any](n int, jobs <-chan J, do func(J)) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				do(j)
			}
		}()
	}
	return wg.Wait
}

func head(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// TestChaos: 3 gateways, Redis with AOF (appendfsync always), 200
// reconnecting clients of 50 users, 150 reliable messages a second. During
// the run: SIGKILL of a node and its restart, drain of another (it exits
// 0) and a replacement, a Redis restart.
func TestChaos(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t, redistest.Options{AOF: true, AppendFsync: "always"})
	c := newCluster(t, srv.URL(), map[string]string{"WSGATE_INBOX_LIMIT": "10000", "WSGATE_DRAIN_RATE": "100"})
	n := c.startNodes("n", 3, nil)
	ch := newChaos(t, c, 50)
	ch.setLive(n...)
	ch.startClients(4, n)

	ctx, stop := context.WithCancel(context.Background())
	published := make(chan struct{})
	go func() {
		defer close(published)
		ch.publish(ctx, 150)
	}()
	defer func() { stop(); <-published }()
	start := time.Now()
	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) } // pacing of the scenario

	at(5 * time.Second)
	t.Log("SIGKILL n2")
	ch.setLive(n[0], n[2])
	n[1].Kill()
	at(8 * time.Second)
	n[1].Restart(t)
	ch.setLive(n...)
	t.Log("n2 restarted")

	at(13 * time.Second)
	// The replacement first, as a scale-in does: the drained node's
	// clients are redirected to the least loaded nodes, n4 among them.
	n4 := c.startNode("n4", nil)
	t.Log("n4 started; drain n3 through the API of n1")
	ch.setLive(n[0], n[1], n4)
	n[0].mustCall(t, http.StatusAccepted, http.MethodPost, "/api/v1/nodes/n3/drain", nil)
	if !n[2].WaitExit(20 * time.Second) {
		t.Fatal("n3 did not exit within 20 s of the drain")
	}
	if code := n[2].ExitCode(); code != 0 {
		t.Errorf("drained n3 exited with %d, want 0", code)
	}
	t.Logf("n3 drained and exited %d", n[2].ExitCode())

	at(24 * time.Second)
	t.Log("restart Redis")
	srv.Stop()
	at(26 * time.Second)
	srv.Start()
	t.Log("Redis back")

	at(40 * time.Second)
	stop()
	<-published
	t.Logf("publisher stopped after %s", time.Since(start).Round(time.Millisecond))
	ch.check()
}

// TestChaosSentinelFailover: 3 gateways on a Sentinel set with
// WSGATE_RELIABLE_REPLICAS=1, 60 clients of 20 users, reliable publishes
// during a failover. A publish the new master may not have is answered
// 503 and retried; no answered message may be lost.
func TestChaosSentinelFailover(t *testing.T) {
	t.Parallel()
	set := redistest.Sentinel(t)
	c := newCluster(t, set.URL(), map[string]string{"WSGATE_INBOX_LIMIT": "10000", "WSGATE_RELIABLE_REPLICAS": "1"})
	n := c.startNodes("n", 3, nil)
	ch := newChaos(t, c, 20)
	ch.setLive(n...)
	ch.startClients(3, n)
	ctx, stop := context.WithCancel(context.Background())
	published := make(chan struct{})
	go func() {
		defer close(published)
		ch.publish(ctx, 100)
	}()
	defer func() { stop(); <-published }()
	start := time.Now()
	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) }

	at(5 * time.Second)
	old := set.Master.Port
	set.Failover()
	t.Logf("failover: master %d -> %d", old, set.Master.Port)
	set.WaitReplicaSynced()
	t.Log("old master in sync as the replica")

	at(20 * time.Second)
	stop()
	<-published
	ch.check()
	// The nodes work on the new master.
	if _, err := n[1].nodes(); err != nil {
		t.Errorf("after the failover: %v", err)
	}
}

// ---- recClient: a reconnecting Go client (client.New) whose
// connections are recorded, for the drain test (the reliability checks
// use rawClient, which sees the frames before any client-side filter). ----

type recConn struct {
	node string
	at   time.Time // welcome
}

type recClient struct {
	user string
	cl   *client.Client
	done chan struct{}

	mu    sync.Mutex
	conns []*recConn
	state client.State
}

// startRecClient runs a client for user with cfg (handlers and token are
// filled here) until the test ends.
func startRecClient(t testing.TB, user string, cfg client.Config) *recClient {
	t.Helper()
	r := &recClient{user: user, done: make(chan struct{})}
	cfg.User = user
	tok := token(t, user, nil)
	cfg.Token = func(context.Context) (string, error) { return tok, nil }
	cfg.Handlers = client.Handlers{
		OnWelcome: func(w client.Welcome) {
			r.mu.Lock()
			r.conns = append(r.conns, &recConn{node: w.Node, at: time.Now()})
			r.mu.Unlock()
		},
		OnState: func(s client.State, err error) {
			r.mu.Lock()
			r.state = s
			r.mu.Unlock()
		},
	}
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.cl = cl
	go func() {
		_ = cl.Run(context.Background())
		close(r.done)
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *recClient) stop() {
	_ = r.cl.Close()
	<-r.done
}

// connected reports whether the client holds a welcomed connection, and
// on which node.
func (r *recClient) connected() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != client.StateConnected || len(r.conns) == 0 {
		return false, ""
	}
	return true, r.conns[len(r.conns)-1].node
}

// waitConnected waits until every client holds a connection.
func waitConnected[C interface{ connected() (bool, string) }](t testing.TB, d time.Duration, clients []C) {
	t.Helper()
	eventually(t, d, "every client connected", func() (bool, string) {
		n := 0
		for _, r := range clients {
			if ok, _ := r.connected(); ok {
				n++
			}
		}
		return n == len(clients), fmt.Sprintf("%d of %d connected", n, len(clients))
	})
}

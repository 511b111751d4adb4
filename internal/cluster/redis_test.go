package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/cluster/clustertest"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

var prefixSeq atomic.Int64

// newRedis returns a backend on url with a key prefix of its own, closed
// at t's cleanup.
func newRedis(t testing.TB, url string, edit ...func(*cluster.RedisOptions)) *cluster.Redis {
	t.Helper()
	opt := cluster.RedisOptions{
		URL:    url,
		Prefix: fmt.Sprintf("t%d", prefixSeq.Add(1)),
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, e := range edit {
		e(&opt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := cluster.NewRedis(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestRedisStandalone(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	clustertest.Run(t, func(t *testing.T) cluster.Backend { return newRedis(t, s.URL()) })
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	clustertest.Run(t, func(t *testing.T) cluster.Backend { return newRedis(t, c.Seeds()) })
}

// The Sentinel run waits for one replica on every append (WAIT 1).
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	s := redistest.Sentinel(t)
	clustertest.Run(t, func(t *testing.T) cluster.Backend {
		return newRedis(t, s.URL(), func(o *cluster.RedisOptions) { o.Replicas = 1 })
	})
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 50 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// busProbe subscribes node and tells when a given payload arrived.
type busProbe struct {
	mu  sync.Mutex
	got map[string]bool
}

func subscribeProbe(t *testing.T, b cluster.Backend, node string) *busProbe {
	t.Helper()
	p := &busProbe{got: map[string]bool{}}
	if err := b.Subscribe(ctxTimeout(t, time.Minute), node, func(m []byte) {
		p.mu.Lock()
		p.got[string(m)] = true
		p.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *busProbe) has(m string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[m]
}

// awaitBus sends fresh markers to node until one arrives (Pub/Sub forgets
// what is sent while the subscription reconnects).
func awaitBus(t *testing.T, b cluster.Backend, p *busProbe, node string) {
	t.Helper()
	var i int
	eventually(t, 20*time.Second, "bus delivers again", func() error {
		i++
		m := fmt.Sprintf("marker-%d", i)
		if err := b.Send(ctxTimeout(t, time.Second), []string{node}, []byte(m)); err != nil {
			return err
		}
		for range 10 {
			if p.has(m) {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return errors.New("marker not received")
	})
}

// A Redis restart without persistence loses every record: the next
// heartbeat says so, and the same backend (and its bus subscription)
// works again.
func TestRedisRestartReportsLost(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	b := newRedis(t, s.URL())
	ctx := ctxTimeout(t, time.Minute)
	n := cluster.NodeInfo{ID: "n1", URL: "ws://n1/ws", Status: cluster.StatusActive, Weight: 100}
	if err := b.RegisterNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if lost, err := b.Heartbeat(ctx, n); err != nil || lost {
		t.Fatalf("heartbeat before the restart: lost=%v err=%v", lost, err)
	}
	probe := subscribeProbe(t, b, "n1")
	awaitBus(t, b, probe, "n1")

	s.Stop()
	s.Start()
	var lost bool
	eventually(t, 10*time.Second, "heartbeat after the restart", func() (err error) {
		lost, err = b.Heartbeat(ctxTimeout(t, time.Second), n)
		if err != nil && !errors.Is(err, cluster.ErrUnavailable) {
			t.Fatalf("heartbeat error is not ErrUnavailable: %v", err)
		}
		return err
	})
	if !lost {
		t.Fatal("first heartbeat after a restart without persistence reports lost=false")
	}
	if lost, err := b.Heartbeat(ctx, n); err != nil || lost {
		t.Fatalf("second heartbeat: lost=%v err=%v", lost, err)
	}
	awaitBus(t, b, probe, "n1")
}

// With AOF the data survives a restart: no "lost", the inbox is intact.
func TestRedisRestartWithAOFKeepsData(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{AOF: true})
	b := newRedis(t, s.URL())
	ctx := ctxTimeout(t, time.Minute)
	n := cluster.NodeInfo{ID: "n1"}
	opt := cluster.InboxOptions{Limit: 10, TTL: time.Hour}
	if err := b.RegisterNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AppendInbox(ctx, "alice", []byte("kept"), opt); err != nil {
		t.Fatal(err)
	}
	s.Stop() // SIGTERM: the AOF is flushed
	s.Start()
	var lost bool
	eventually(t, 10*time.Second, "heartbeat after the restart", func() (err error) {
		lost, err = b.Heartbeat(ctxTimeout(t, time.Second), n)
		return err
	})
	if lost {
		t.Fatal("heartbeat reports lost=true although the data survived")
	}
	r, err := b.ReadInbox(ctx, "alice", 0, opt)
	if err != nil || len(r.Messages) != 1 || string(r.Messages[0].Payload) != "kept" || r.LastSeq != 1 {
		t.Fatalf("inbox after the restart: %+v %v", r, err)
	}
}

// calls lists one invocation of every Backend method.
func calls(b cluster.Backend) map[string]func(ctx context.Context) error {
	opt := cluster.InboxOptions{Limit: 10, TTL: time.Hour}
	route := []cluster.Route{{User: "u", ConnID: "c", Node: "n"}}
	n := cluster.NodeInfo{ID: "n"}
	return map[string]func(ctx context.Context) error{
		"Ping":             func(ctx context.Context) error { return b.Ping(ctx) },
		"RegisterNode":     func(ctx context.Context) error { return b.RegisterNode(ctx, n) },
		"Heartbeat":        func(ctx context.Context) error { _, err := b.Heartbeat(ctx, n); return err },
		"RemoveNode":       func(ctx context.Context) error { return b.RemoveNode(ctx, "n") },
		"Nodes":            func(ctx context.Context) error { _, err := b.Nodes(ctx); return err },
		"AddRoutes":        func(ctx context.Context) error { return b.AddRoutes(ctx, route, time.Minute) },
		"RemoveRoute":      func(ctx context.Context) error { return b.RemoveRoute(ctx, "u", "c") },
		"UserRoutes":       func(ctx context.Context) error { _, err := b.UserRoutes(ctx, "u"); return err },
		"JoinRoom":         func(ctx context.Context) error { _, err := b.JoinRoom(ctx, "r", "u", 0); return err },
		"LeaveRoom":        func(ctx context.Context) error { return b.LeaveRoom(ctx, "r", "u") },
		"RoomMembers":      func(ctx context.Context) error { _, err := b.RoomMembers(ctx, "r"); return err },
		"UserRooms":        func(ctx context.Context) error { _, err := b.UserRooms(ctx, "u"); return err },
		"SetRoomInterest":  func(ctx context.Context) error { return b.SetRoomInterest(ctx, "n", []string{"r"}, time.Minute) },
		"DropRoomInterest": func(ctx context.Context) error { return b.DropRoomInterest(ctx, "n", []string{"r"}) },
		"RoomNodes":        func(ctx context.Context) error { _, err := b.RoomNodes(ctx, "r"); return err },
		"AppendInbox":      func(ctx context.Context) error { _, err := b.AppendInbox(ctx, "u", []byte("x"), opt); return err },
		"ReadInbox":        func(ctx context.Context) error { _, err := b.ReadInbox(ctx, "u", 0, opt); return err },
		"Ack":              func(ctx context.Context) error { return b.Ack(ctx, "u", "", 1, cluster.InboxOptions{}) },
		"LastSeq":          func(ctx context.Context) error { _, err := b.LastSeq(ctx, "u"); return err },
		"Send":             func(ctx context.Context) error { return b.Send(ctx, []string{"n"}, []byte("x")) },
		"Broadcast":        func(ctx context.Context) error { return b.Broadcast(ctx, []byte("x")) },
		"Subscribe":        func(ctx context.Context) error { return b.Subscribe(ctx, "n", func([]byte) {}) },
	}
}

// checkUnavailable runs every method with a deadline and with none (then
// OpTimeout bounds it): each must fail with ErrUnavailable in time.
func checkUnavailable(t *testing.T, b cluster.Backend, deadline, opTimeout time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	for name, call := range calls(b) {
		for _, withDeadline := range []bool{true, false} {
			wg.Go(func() {
				ctx, limit := context.Background(), opTimeout
				if withDeadline {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, deadline)
					defer cancel()
					limit = deadline
				}
				start := time.Now()
				err := call(ctx)
				took := time.Since(start)
				if !errors.Is(err, cluster.ErrUnavailable) {
					t.Errorf("%s (deadline %v): err = %v, want ErrUnavailable", name, withDeadline, err)
				}
				if took > limit+500*time.Millisecond {
					t.Errorf("%s (deadline %v): returned after %s, limit %s", name, withDeadline, took, limit)
				}
			})
		}
	}
	wg.Wait()
}

// Stopped server (connection refused) and hung server (SIGSTOP: connects,
// never answers): every call fails with ErrUnavailable within its deadline,
// and the same backend works again once the server is back.
func TestRedisUnavailable(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	const opTimeout = 1500 * time.Millisecond
	b := newRedis(t, s.URL(), func(o *cluster.RedisOptions) { o.OpTimeout = opTimeout })
	probe := subscribeProbe(t, b, "n1")
	awaitBus(t, b, probe, "n1")

	t.Run("Stopped", func(t *testing.T) {
		s.Stop()
		checkUnavailable(t, b, time.Second, opTimeout)
		s.Start()
		eventually(t, 10*time.Second, "ping after the restart", func() error { return b.Ping(ctxTimeout(t, time.Second)) })
		awaitBus(t, b, probe, "n1")
	})
	t.Run("Hung", func(t *testing.T) {
		s.Pause()
		checkUnavailable(t, b, time.Second, opTimeout)
		s.Resume()
		eventually(t, 10*time.Second, "ping after resume", func() error { return b.Ping(ctxTimeout(t, time.Second)) })
		awaitBus(t, b, probe, "n1")
	})
	if _, err := b.AppendInbox(ctxTimeout(t, 5*time.Second), "alice", []byte("x"), cluster.InboxOptions{Limit: 10, TTL: time.Hour}); err != nil {
		t.Fatalf("append after recovery: %v", err)
	}
}

// An unreachable address at start-up is not an error of NewRedis; calls
// fail with ErrUnavailable.
func TestRedisNewWhileDown(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	url := s.URL()
	s.Stop()
	b := newRedis(t, url)
	if err := b.Ping(ctxTimeout(t, time.Second)); !errors.Is(err, cluster.ErrUnavailable) {
		t.Fatalf("Ping = %v, want ErrUnavailable", err)
	}
}

// Sentinel failover with Replicas=1: every append that was answered
// without error is on the new master. Appends keep running during the
// failover; those that fail were not answered and may be gone.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	set := redistest.Sentinel(t)
	t.Logf("sentinel set up in %s", time.Since(t0))
	b := newRedis(t, set.URL(), func(o *cluster.RedisOptions) { o.Replicas = 1 })
	opt := cluster.InboxOptions{Limit: 10_000, TTL: time.Hour}

	var mu sync.Mutex
	answered := map[int64]string{} // seq -> payload of every append answered OK
	appendOne := func(i int) error {
		p := fmt.Sprintf("msg-%d", i)
		res, err := b.AppendInbox(ctxTimeout(t, 3*time.Second), "alice", []byte(p), opt)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := answered[res.Seq]; dup {
			t.Errorf("seq %d answered twice (%q and %q)", res.Seq, prev, p)
		}
		answered[res.Seq] = p
		return nil
	}
	for i := range 20 {
		if err := appendOne(i); err != nil {
			t.Fatalf("append %d before the failover: %v", i, err)
		}
	}

	stop := make(chan struct{})
	var failed atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1000; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := appendOne(i); err != nil {
				failed.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	t0 = time.Now()
	set.Failover()
	t.Logf("failover took %s", time.Since(t0))
	set.WaitReplicaSynced()
	t.Logf("failover + resync took %s", time.Since(t0)) // the old master follows the new one: WAIT 1 can succeed again
	// Appends must succeed again on the new master.
	eventually(t, 20*time.Second, "append after the failover", func() error { return appendOne(-1) })
	close(stop)
	wg.Wait()

	var r cluster.InboxRead
	eventually(t, 10*time.Second, "read from the new master", func() (err error) {
		r, err = b.ReadInbox(ctxTimeout(t, 2*time.Second), "alice", 0, opt)
		return err
	})
	kept := map[int64]string{}
	for _, m := range r.Messages {
		kept[m.Seq] = string(m.Payload)
	}
	mu.Lock()
	defer mu.Unlock()
	for seq, p := range answered {
		if kept[seq] != p {
			t.Errorf("answered append seq %d (%q) is %q on the new master", seq, p, kept[seq])
		}
	}
	t.Logf("%d appends answered, %d failed during the failover, %d kept on the new master", len(answered), failed.Load(), len(r.Messages))
}

// Close ends every goroutine the backend started, subscriptions included.
// Not parallel: the goroutine snapshot must not see other tests.
func TestRedisNoGoroutineLeak(t *testing.T) {
	s := redistest.Standalone(t, redistest.Options{})
	ignore := goleak.IgnoreCurrent()
	b := newRedis(t, s.URL())
	ctx, cancel := context.WithCancel(context.Background())
	probe := subscribeProbe(t, b, "n1")
	if err := b.Subscribe(ctx, "n2", func([]byte) {}); err != nil {
		t.Fatal(err)
	}
	awaitBus(t, b, probe, "n1")
	cancel() // one subscription ends by its context, the other by Close
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Ping(context.Background()); err == nil {
		t.Fatal("Ping after Close succeeded")
	}
	goleak.VerifyNone(t, ignore)
}

// Replicas > 0 on a deployment without replicas: the append is stored and
// answered with its seq, but the error says it is not replicated. In Redis
// Cluster WAIT runs on the master of the user's slot.
func TestRedisNotReplicated(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	b := newRedis(t, c.Seeds(), func(o *cluster.RedisOptions) { o.Replicas = 1 })
	ctx := ctxTimeout(t, 10*time.Second)
	opt := cluster.InboxOptions{Limit: 10, TTL: time.Hour}
	for _, user := range []string{"alice", "bob", "carol"} { // spread over slots
		start := time.Now()
		res, err := b.AppendInbox(ctx, user, []byte("x"), opt)
		if !errors.Is(err, cluster.ErrNotReplicated) || !errors.Is(err, cluster.ErrUnavailable) {
			t.Fatalf("AppendInbox(%s) err = %v, want ErrNotReplicated", user, err)
		}
		if res.Seq != 1 {
			t.Fatalf("AppendInbox(%s) seq = %d with the error, want 1", user, res.Seq)
		}
		// WAIT gives up after 1 s; once more on a node that did not have the
		// script yet (EVALSHA fails with NOSCRIPT, WAIT still waits).
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("AppendInbox(%s) took %s", user, took)
		}
	}
}

// One message of a batch whose append fails (its inbox key holds the
// wrong type) gets its own error; the messages around it, carried by the
// same script call, are stored.
func TestRedisAppendManyOneFails(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	b := newRedis(t, s.URL(), func(o *cluster.RedisOptions) { o.Prefix = "onefails" })
	ctx := ctxTimeout(t, 30*time.Second)
	if err := s.Client().Set(ctx, "{onefails:u:bad}:inbox", "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	opt := cluster.InboxOptions{Limit: 10, TTL: time.Hour}
	out := b.AppendInboxes(ctx, []cluster.InboxAppend{
		{User: "good", Payload: []byte("m1")},
		{User: "bad", Payload: []byte("x")},
		{User: "good", Payload: []byte("m2")},
	}, opt)
	if out[0].Err != nil || out[0].Seq != 1 || out[2].Err != nil || out[2].Seq != 2 {
		t.Fatalf("good appends: %+v, %+v", out[0], out[2])
	}
	if out[1].Err == nil || !strings.Contains(out[1].Err.Error(), "WRONGTYPE") {
		t.Fatalf("bad append: %+v", out[1])
	}
	r, err := b.ReadInbox(ctx, "good", 0, opt)
	if err != nil || len(r.Messages) != 2 || string(r.Messages[1].Payload) != "m2" {
		t.Fatalf("good's inbox: %+v %v", r, err)
	}
	if _, err := b.AppendInbox(ctx, "bad", []byte("y"), opt); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("single append to bad: %v", err)
	}
}

// With Replicas set, what the inbox is read for (a replay, a catch-up) is
// only handed out once the replicas have it: an append that no replica
// confirmed (answered 503) is on the master, but would be lost in a
// failover and its seq given to another message, so neither ReadInbox nor
// Connect returns it until a replica has it.
func TestRedisReadsOnlyWhatReplicasConfirmed(t *testing.T) {
	t.Parallel()
	set := redistest.Sentinel(t)
	b := newRedis(t, set.URL(), func(o *cluster.RedisOptions) { o.Replicas = 1 })
	opt := cluster.InboxOptions{Limit: 100, TTL: time.Hour}
	if _, err := b.AppendInbox(ctxTimeout(t, 5*time.Second), "rita", []byte("confirmed"), opt); err != nil {
		t.Fatal(err)
	}
	set.Replica.Pause()
	paused := true
	t.Cleanup(func() {
		if paused {
			set.Replica.Resume()
		}
	})
	if _, err := b.AppendInbox(ctxTimeout(t, 5*time.Second), "rita", []byte("unconfirmed"), opt); !errors.Is(err, cluster.ErrNotReplicated) {
		t.Fatalf("append with the replica paused: %v, want ErrNotReplicated", err)
	}
	if rd, err := b.ReadInbox(ctxTimeout(t, 5*time.Second), "rita", 0, opt); !errors.Is(err, cluster.ErrNotReplicated) {
		t.Fatalf("read with the replica paused: %+v, %v; want ErrNotReplicated, not the unconfirmed message", rd, err)
	}
	route := cluster.Route{User: "rita", ConnID: "c1", Node: "n1", ConnectedAt: time.Now().UnixMilli()}
	// Connect succeeds (contract 22: the handshake is accepted) without
	// the replay, which the caller reads again.
	if cr, err := b.Connect(ctxTimeout(t, 5*time.Second), route, time.Minute, 0, opt, cluster.ConnLimit{}); err != nil || !cr.Unconfirmed || len(cr.Inbox.Messages) != 0 || cr.Inbox.LastSeq != 2 {
		t.Fatalf("connect with the replica paused: %+v, %v; want it unconfirmed, no messages, last seq 2", cr, err)
	}
	if seqs, err := b.RoomSeqs(ctxTimeout(t, 5*time.Second), []string{"none"}); err != nil || seqs[0] != 0 {
		t.Fatalf("seq of a room without messages: %v, %v; want 0 and nothing to confirm", seqs, err)
	}
	// Once a round found the replica missing, reads are answered at once
	// while the rounds they schedule look for it: a handshake's three
	// confirmed reads in a row (inbox, room seqs, room history) waiting a
	// round or two each would spend its deadline on the outage. Counted
	// on the master: ten reads, at most the round in flight and the one
	// they joined (each read waited its own round before).
	before := commandStats(t, set.Master.Client())["wait"]
	for range 10 {
		if _, err := b.ReadInbox(ctxTimeout(t, 5*time.Second), "rita", 0, opt); !errors.Is(err, cluster.ErrNotReplicated) {
			t.Fatalf("read with the replica paused: %v, want ErrNotReplicated", err)
		}
	}
	if waits := commandStats(t, set.Master.Client())["wait"] - before; waits > 2 {
		t.Fatalf("%d WAIT for 10 reads while the replica is known missing, want at most 2", waits)
	}
	set.Replica.Resume()
	paused = false
	// The first reads after it came back may still be answered from the
	// last round; the round they schedule finds it.
	var rd cluster.InboxRead
	for {
		var err error
		rd, err = b.ReadInbox(ctxTimeout(t, 10*time.Second), "rita", 0, opt)
		if err == nil {
			break
		}
		if !errors.Is(err, cluster.ErrNotReplicated) {
			t.Fatal(err)
		}
		if t.Context().Err() != nil {
			t.Fatal("never confirmed once the replica was back")
		}
	}
	if len(rd.Messages) != 2 || string(rd.Messages[1].Payload) != "unconfirmed" {
		t.Fatalf("read once the replica is back: %+v, want both messages", rd.Messages)
	}
}

// A reconnect storm with Replicas=1: the confirmations of the replays
// share rounds of WAIT (one in flight per master) instead of one WAIT per
// connect in a row. Counted on the master: before the rounds every one of
// the storm's connects sent its own WAIT.
func TestRedisConfirmationsOfAStormShareRounds(t *testing.T) {
	t.Parallel()
	set := redistest.Sentinel(t)
	b := newRedis(t, set.URL(), func(o *cluster.RedisOptions) { o.Replicas = 1 })
	opt := cluster.InboxOptions{Limit: 100, TTL: time.Hour}
	const users = 200
	for i := range users {
		if _, err := b.AppendInbox(ctxTimeout(t, 5*time.Second), fmt.Sprintf("s%d", i), []byte("m"), opt); err != nil {
			t.Fatal(err)
		}
	}
	before := commandStats(t, set.Master.Client())["wait"]
	var wg sync.WaitGroup
	errs := make(chan error, users)
	for i := range users {
		wg.Go(func() {
			route := cluster.Route{User: fmt.Sprintf("s%d", i), ConnID: fmt.Sprintf("c%d", i), Node: "n1", ConnectedAt: time.Now().UnixMilli()}
			cr, err := b.Connect(ctxTimeout(t, 20*time.Second), route, time.Minute, 0, opt, cluster.ConnLimit{})
			if err == nil && (cr.Unconfirmed || len(cr.Inbox.Messages) != 1) {
				err = fmt.Errorf("connect of %s: %+v, want its message confirmed", route.User, cr)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	waits := commandStats(t, set.Master.Client())["wait"] - before
	if waits >= users/4 {
		t.Fatalf("%d WAIT for %d connects with a replay, want the rounds shared (under %d)", waits, users, users/4)
	}
	t.Logf("%d connects with a replay confirmed by %d WAIT", users, waits)
}

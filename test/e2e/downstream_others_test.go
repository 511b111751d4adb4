package e2e

// Contract section 20 with the JetStream and Kafka sources: two gateway
// processes consume; one is SIGKILLed while records flow (JetStream
// redelivers its messages after ack_wait, the Kafka group rebalances its
// partitions after the session timeout) and the JetStream server is
// restarted; every record reaches its user once, with one seq.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wsgate/wsgate/internal/testutil/natstest"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// dsOtherRun drives one run: url is the source, produce writes one
// chunk of records (value, key = user), restart (may be nil) restarts the
// source's server mid-run; ordered: per-user order is checked too.
func dsOtherRun(t *testing.T, url string, produce func(vals [][]byte, keys []string) error, restart func(), ordered bool) {
	backend := redistest.Standalone(t, redistest.Options{})
	c := newCluster(t, backend.URL(), map[string]string{"WSGATE_DOWNSTREAM_URL": url, "WSGATE_DOWNSTREAM_IN_FLIGHT": "32", "WSGATE_INBOX_LIMIT": "10000"})
	nodes := c.startNodes("o", 2, nil)
	var live liveSet
	live.setLive(nodes...)
	var users []string
	for i := range 20 {
		users = append(users, fmt.Sprintf("os-%02d", i))
	}
	rec := newRecorder()
	var clients []*rawClient
	for i, u := range users {
		clients = append(clients, startRawClient(t, rec, u, u, rawOptions{resume: true, pick: allocatorOf(live.liveNodes), first: nodes[i%2].WS(), ackEvery: 20}))
	}
	waitConnected(t, 30*time.Second, clients)
	const total, chunk = 2000, 20
	jobs := map[string][]int{}
	var jobsMu sync.Mutex
	write := func(from, to int) error {
		var vals [][]byte
		var keys []string
		jobsMu.Lock()
		for j := from; j < to; j++ {
			u := users[j%len(users)]
			v, _ := json.Marshal(map[string]any{"target": map[string]string{"type": "user", "id": u}, "event": "ds", "data": map[string]int{"job": j}, "reliable": true})
			vals, keys = append(vals, v), append(keys, u)
			jobs[u] = append(jobs[u], j)
		}
		jobsMu.Unlock()
		return produce(vals, keys)
	}
	// A steady producer (a chunk every 100 ms, 10 s in all), so that both
	// nodes get records once the group has split the partitions.
	produced := make(chan error, 1)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for from := 0; from < total; from += chunk {
			<-tick.C
			if err := write(from, from+chunk); err != nil {
				produced <- err
				return
			}
		}
		produced <- nil
	}()
	// Both nodes have their share before one dies.
	label := `wsgate_downstream_records_total{result="published",source="` + sourceLabel(url) + `"}`
	eventually(t, 30*time.Second, "both nodes publishing", func() (bool, string) {
		a, _ := nodes[0].metrics()
		b, _ := nodes[1].metrics()
		return a[label] > 0 && b[label] > 0, fmt.Sprintf("published %v and %v", a[label], b[label])
	})
	killedHad := nodes[1].metric(t, label)
	nodes[1].Kill()
	live.setLive(nodes[0])
	if restart != nil {
		restart()
	}
	if err := <-produced; err != nil {
		t.Fatalf("produce: %v", err)
	}
	eventually(t, 120*time.Second, "every record delivered", func() (bool, string) {
		_, n := dsReceived(clients)
		return n == total, fmt.Sprintf("%d of %d received", n, total)
	})
	seqs, _ := dsReceived(clients)
	jobsMu.Lock()
	defer jobsMu.Unlock()
	for _, u := range users {
		type js struct {
			job int
			seq int64
		}
		var order []js
		for _, j := range jobs[u] {
			if len(seqs[u][j]) != 1 {
				t.Errorf("user %s: job %d came with %d distinct seqs, want one", u, j, len(seqs[u][j]))
			}
			for s := range seqs[u][j] {
				order = append(order, js{j, s})
			}
		}
		sort.Slice(order, func(a, b int) bool { return order[a].seq < order[b].seq })
		for i := 1; ordered && i < len(order); i++ {
			if order[i].job < order[i-1].job {
				t.Errorf("user %s: job %d after job %d: partition order broken", u, order[i].job, order[i-1].job)
				break
			}
		}
	}
	t.Logf("%d records for %d users, one node SIGKILLed mid-run (it had published %v): each delivered once; the survivor published %v", total, len(users),
		killedHad, nodes[0].metric(t, label))
}

func sourceLabel(url string) string {
	switch {
	case strings.HasPrefix(url, "nats://"):
		i := strings.Index(url, "subject=") + len("subject=")
		return "nats:" + strings.SplitN(url[i:], "&", 2)[0]
	default:
		i := strings.LastIndex(url, "/")
		return "kafka:" + strings.SplitN(url[i+1:], "?", 2)[0]
	}
}

// JetStream: ack_wait 3 s so that the dead node's messages come back soon;
// the server is restarted (SIGTERM, same store) after the kill.
func TestDownstreamJetStreamNodeKilledServerRestarted(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PUSH", Subjects: []string{"push.user"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	// The producer retries as a real one would: a publish sent while the
	// server restarts may get no acknowledgement (a CI run lost one for
	// 10 s). Its message id (the value's hash) makes JetStream store a
	// retried record once (duplicate window: 2 minutes).
	produce := func(vals [][]byte, _ []string) error {
		for _, v := range vals {
			sum := sha256.Sum256(v)
			id := hex.EncodeToString(sum[:12])
			deadline := time.Now().Add(60 * time.Second)
			for {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := js.Publish(cctx, "push.user", v, jetstream.WithMsgID(id))
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					return err
				}
				time.Sleep(100 * time.Millisecond) // the retry's backoff
			}
		}
		return nil
	}
	restart := func() { srv.Stop(); srv.Restart() }
	dsOtherRun(t, srv.URL()+"?stream=PUSH&subject=push.user&ack_wait=3s", produce, restart, false)
}

// Kafka through kfake in this process (no broker can be installed here):
// the gateways are real processes speaking the Kafka protocol to it.
func TestDownstreamKafkaNodeKilledRebalance(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "push"), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.DefaultProduceTopic("push"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	produce := func(vals [][]byte, keys []string) error {
		recs := make([]*kgo.Record, len(vals))
		for i := range vals {
			recs[i] = &kgo.Record{Key: []byte(keys[i]), Value: vals[i]}
		}
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return prod.ProduceSync(cctx, recs...).FirstErr()
	}
	dsOtherRun(t, "kafka://"+strings.Join(kc.ListenAddrs(), ",")+"/push", produce, nil, true)
}

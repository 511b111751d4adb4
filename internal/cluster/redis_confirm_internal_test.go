package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// A read the old master answered is not confirmed by a round on the new
// one. The old master holds an append its replica never got (answered
// ErrNotReplicated) and a read there returns it; then the replica is
// promoted without it, the old master follows the new one (the append is
// lost), and the confirmation's round runs on the new master, whose
// replica, the old master, acknowledges at once. Confirmed, the read would
// hand out seq 2 for a message the cluster no longer has, and the next
// append takes seq 2 (the campaign saw a client take that one for a
// duplicate of the lost message).
func TestReadBeforeAFailoverIsNotConfirmedAfterIt(t *testing.T) {
	t.Parallel()
	set := redistest.Sentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r, err := NewRedis(ctx, RedisOptions{URL: set.URL(), Prefix: "fo", Replicas: 1,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	opt := InboxOptions{Limit: 100, TTL: time.Hour}
	if _, err := r.AppendInbox(ctx, "rita", []byte("kept"), opt); err != nil {
		t.Fatal(err)
	}
	oldMaster, next := set.Master, set.Replica
	// The replica stops and its link is cut: the next append stays on the
	// old master alone (a paused replica would still find it in its
	// socket's buffer when it resumes).
	next.Pause()
	if n, err := oldMaster.KillClients("replica"); err != nil || n != 1 {
		next.Resume()
		t.Fatalf("CLIENT KILL TYPE replica: %d, %v", n, err)
	}
	if _, err := r.AppendInbox(ctx, "rita", []byte("lost"), opt); !errors.Is(err, ErrNotReplicated) {
		next.Resume()
		t.Fatalf("append with the replica paused: %v, want ErrNotReplicated", err)
	}

	// The read, on the old master: it sees the unconfirmed append.
	mark := r.markRead(ctx, r.k.confirm("rita"))
	if seq, err := r.c.Get(ctx, r.k.seq("rita")).Int64(); err != nil || seq != 2 {
		next.Resume()
		t.Fatalf("the old master's seq: %d, %v; want 2", seq, err)
	}

	// The failover that loses it: the old master stops, the replica (which
	// never got the append, and cannot fetch it from a stopped master) is
	// promoted, and the old master follows it.
	oldMaster.Pause()
	next.Resume()
	waitFor(t, "the sentinel promotes the replica", func(ctx context.Context) (bool, string) {
		addr, err := set.Sentinel.Client().Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", redistest.SentinelMaster).StringSlice()
		return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(next.Port), fmt.Sprint(addr, err)
	})
	oldMaster.Resume()
	waitFor(t, "the old master follows the new one, in sync", func(ctx context.Context) (bool, string) {
		if err := oldMaster.Client().ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(next.Port)).Err(); err != nil {
			return false, err.Error()
		}
		info, err := oldMaster.Client().Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0"), fmt.Sprint(err, info)
	})
	waitFor(t, "the backend's client on the new master", func(ctx context.Context) (bool, string) {
		info, err := r.c.Info(ctx, "server").Result()
		return err == nil && strings.Contains(info, "tcp_port:"+strconv.Itoa(next.Port)+"\r\n"), fmt.Sprint(err)
	})
	if seq, err := next.Client().Get(ctx, r.k.seq("rita")).Int64(); err != nil || seq != 1 {
		t.Fatalf("the new master's seq: %d, %v; want 1 (the failover lost the unconfirmed append)", seq, err)
	}

	if err := r.confirmKey(ctx, r.k.confirm("rita"), mark, "the read before the failover"); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("the read of the old master (seq 2, lost since) confirmed by a round on the new master: %v; want ErrNotReplicated", err)
	}
	// A read made now is confirmed, and shows what the cluster holds; the
	// next append takes seq 2.
	rd, err := r.ReadInbox(ctx, "rita", 0, opt)
	if err != nil || rd.LastSeq != 1 || len(rd.Messages) != 1 || string(rd.Messages[0].Payload) != "kept" {
		t.Fatalf("read after the failover: %+v, %v; want the one kept message", rd, err)
	}
	if res, err := r.AppendInbox(ctx, "rita", []byte("next"), opt); err != nil || res.Seq != 2 {
		t.Fatalf("append after the failover: %+v, %v; want seq 2", res, err)
	}
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok, state := cond(ctx)
		cancel()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 30s; last: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

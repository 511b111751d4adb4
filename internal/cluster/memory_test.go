package cluster_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/cluster/clustertest"
)

func TestMemory(t *testing.T) {
	clustertest.Run(t, func(t *testing.T) cluster.Backend { return cluster.NewMemory() })
}

// Close ends every subscription goroutine, and later calls fail.
func TestMemoryClose(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	m := cluster.NewMemory()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 1)
	if err := m.Subscribe(ctx, "n1", func(p []byte) { got <- string(p) }); err != nil {
		t.Fatal(err)
	}
	if err := m.Subscribe(context.Background(), "n2", func([]byte) {}); err != nil {
		t.Fatal(err)
	}
	if err := m.Send(ctx, []string{"n1"}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if p := <-got; p != "x" {
		t.Fatalf("got %q", p)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if err := m.Ping(ctx); err == nil {
		t.Fatal("Ping after Close succeeded")
	}
	if err := m.Subscribe(ctx, "n3", func([]byte) {}); err == nil {
		t.Fatal("Subscribe after Close succeeded")
	}
	goleak.VerifyNone(t, ignore)
}

// A handler may call back into the backend: delivery never holds its lock.
func TestMemoryHandlerReentry(t *testing.T) {
	m := cluster.NewMemory()
	defer m.Close()
	ctx := context.Background()
	done := make(chan error, 1)
	if err := m.Subscribe(ctx, "n1", func(p []byte) {
		_, err := m.AppendInbox(ctx, "alice", p, cluster.InboxOptions{Limit: 1})
		done <- err
	}); err != nil {
		t.Fatal(err)
	}
	if err := m.Send(ctx, []string{"n1"}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

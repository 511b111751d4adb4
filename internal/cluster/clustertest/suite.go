// Package clustertest is the conformance suite that every cluster.Backend
// implementation must pass: one set of subtests, run against the in-process
// backend and against Redis in each deployment (standalone, Cluster,
// Sentinel), so that they agree to the message.
package clustertest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// Short lifetimes used by the expiry subtests; expiry is always awaited by
// polling with a deadline, never by a bare sleep.
const (
	shortTTL = 300 * time.Millisecond
	longTTL  = time.Hour
	waitFor  = 10 * time.Second
)

// Run runs the whole suite. newBackend is called once per subtest and must
// return a backend whose state no other subtest sees (a fresh Memory, or a
// Redis backend with its own key prefix); Run closes it at the subtest's
// cleanup. Subtests run in parallel.
func Run(t *testing.T, newBackend func(t *testing.T) cluster.Backend) {
	groups := []struct {
		name  string
		tests []subtest
	}{
		{"Routes", routeTests},
		{"Nodes", nodeTests},
		{"Rooms", roomTests},
		{"Inbox", inboxTests},
		{"Devices", deviceTests},
		{"History", historyTests},
		{"Bus", busTests},
		{"Misc", miscTests},
		{"Lifecycle", lifecycleTests},
		{"Presence", presenceTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, st := range g.tests {
				t.Run(st.name, func(t *testing.T) {
					t.Parallel()
					b := newBackend(t)
					t.Cleanup(func() { _ = b.Close() })
					st.run(t, b)
				})
			}
		})
	}
}

type subtest struct {
	name string
	run  func(t *testing.T, b cluster.Backend)
}

var miscTests = []subtest{
	{"Ping", func(t *testing.T, b cluster.Backend) {
		must(t, b.Ping(ctxFor(t)))
	}},
}

// ctxFor returns a context bounded well below the test timeout.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it reports true, failing the test with cond's
// last description after waitFor.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s; last state: %s", what, waitFor, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func equalStrings(got, want []string) bool {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

func checkStrings(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !equalStrings(got, want) {
		t.Fatalf("%s = %q, want %q (any order)", what, got, want)
	}
}

// recorder is a bus handler that never blocks and lets a test wait for what
// it received.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) handle(p []byte) {
	r.mu.Lock()
	r.msgs = append(r.msgs, string(p))
	r.mu.Unlock()
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func (r *recorder) await(t *testing.T, what string, n int) []string {
	t.Helper()
	eventually(t, what, func() (bool, string) {
		got := r.got()
		return len(got) >= n, fmt.Sprintf("%d of %d messages: %q", len(got), n, got)
	})
	return r.got()
}

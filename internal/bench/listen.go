package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"time"
)

// Several bench processes can measure one broadcast together (e.g. a
// million connections over fifty processes, scripts/million.sh): each
// runs `connect --listen --run-id ID`, holds its connections, and counts
// every broadcast whose data carries run ID and stream 0, published by
// someone else while it holds:
//
//	{"i":0,"r":"ID","s":0,"t":<publish time, Unix ns>,"x":""}
//
// Each process reports the receive latencies (now - t) as a full
// histogram (listen.latency.histogram in --json), which the caller merges
// across processes. SIGUSR1 ends the hold early (`kill -USR1`), so the
// caller can close the connections when it has measured; --settle bounds
// the hold.

// ListenReport is what a --listen run received.
type ListenReport struct {
	Received   int64         `json:"received"` // distinct broadcasts x connections
	Duplicated int64         `json:"duplicated"`
	Latency    LatencyReport `json:"latency"` // receive time - the data's t
}

func (c Config) validateListen() error {
	if c.RunID != "" {
		if len(c.RunID) > 32 {
			return fmt.Errorf("--run-id: at most 32 characters, got %d", len(c.RunID))
		}
		for _, ch := range c.RunID {
			if !(ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch == '-' || ch == '_') {
				return fmt.Errorf("--run-id: letters, digits, - and _ only, got %q", c.RunID)
			}
		}
	}
	if c.Listen && c.Scenario != ScenarioConnect {
		return errors.New("--listen is for connect: the other scenarios publish their own messages")
	}
	return nil
}

// listenStream is the stream a --listen connection counts: broadcasts of
// this run, stream 0.
func (r *runner) listenStream() *stream {
	return &stream{id: 0, target: []byte(`{"type":"broadcast"}`)}
}

// compact hands the dial phase's memory back before a long hold: the
// heap's garbage, and the stacks the slots' goroutines grew while dialling
// (a goroutine parked on a grown stack keeps it until a GC finds it
// mostly unused; each GC halves it).
func compact() {
	for range 3 {
		debug.FreeOSMemory()
	}
}

// hold waits --settle, or until cfg.EndHold closes (SIGUSR1), or ctx ends.
// SIGUSR2 (cfg.EndRamp) stops opening connections: the ones not started
// yet are not attempted, and the hold begins once the started ones are
// open or failed.
func (r *runner) hold(ctx context.Context) {
	t := time.NewTimer(r.cfg.Settle)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.cfg.EndHold:
	case <-ctx.Done():
	}
}

func (r *runner) listenReport() *ListenReport {
	st := &r.soakState
	return &ListenReport{
		Received: st.brecv.Load(), Duplicated: st.bdups.Load(),
		Latency: latencyReport(st.blat.Snapshot(), true),
	}
}

func (rep *Report) writeListen(tw io.Writer) {
	l := rep.Listen
	if l == nil {
		return
	}
	lat := l.Latency
	fmt.Fprintf(tw, "listened\treceived %d\tduplicated %d\tlatency p50 %s\tp99 %s\tmax %s\n",
		l.Received, l.Duplicated, fmtMS(lat.P50MS), fmtMS(lat.P99MS), fmtMS(lat.MaxMS))
}

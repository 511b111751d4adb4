package bench

import (
	"context"
	"sync/atomic"
	"time"
)

// scenario runs the phases common to every scenario around its own load
// phase:
//
//	baseline  scrape the nodes before anything is opened
//	connect   open --conns at --ramp (room: members join first, via the API)
//	ready     scrape
//	load      connect: wait --settle; broadcast, push, room: publish for
//	          --duration, then wait (at most --settle) for every expected
//	          message; send: send frames for --duration, then wait (at
//	          most --settle) for every reply; churn: cycle connections;
//	          storm: drop all, wait
//	end       scrape (churn, storm: once the nodes hold the bench's count)
//	close     ack, close 1000, wait for every goroutine
//	final     poll until the nodes are back to the baseline (at most
//	          max(--settle, 5s))
func (r *runner) scenario(ctx context.Context) error {
	if r.cfg.Scenario == ScenarioDownstream {
		if err := r.openSource(ctx); err != nil {
			return err
		}
		defer r.ds.Close()
	}
	r.setPhase("baseline")
	base := sumSamples(r.sample(ctx, "baseline"))
	if r.cfg.Scenario == ScenarioRoom || r.cfg.Scenario == ScenarioTicker {
		r.setPhase("joining rooms")
		if err := r.membership(ctx, "PUT"); err != nil {
			return err
		}
	}
	if err := r.openAll(ctx); err != nil {
		return err
	}
	r.readyAt = time.Now()
	r.sample(ctx, "ready")
	r.selfReady = r.markSelf()

	switch r.cfg.Scenario {
	case ScenarioConnect:
		r.setPhase("settle")
		compact()
		r.hold(ctx)
		r.openAtEnd = r.open.Load()
		r.sample(ctx, "end")
	case ScenarioBroadcast, ScenarioPush, ScenarioRoom, ScenarioDownstream:
		r.publish(ctx)
		r.drain(ctx)
		r.openAtEnd = r.open.Load()
		r.sample(ctx, "end")
	case ScenarioTicker:
		r.tickerStart()
		r.publish(ctx)
		r.tickerDrain(ctx)
		r.openAtEnd = r.open.Load()
		r.sample(ctx, "end")
	case ScenarioSend:
		r.sendLoad(ctx)
		r.openAtEnd = r.open.Load()
		r.sample(ctx, "end")
	case ScenarioSoak:
		r.soak(ctx)
		r.setPhase("settle")
		r.waitChurn(ctx)
		r.drain(ctx)
		r.openAtEnd = r.open.Load()
		r.sample(ctx, "end")
	case ScenarioChurn:
		r.churnAt(ctx, r.cfg.Rate, r.cfg.Duration)
		r.setPhase("settle")
		r.waitChurn(ctx)
		r.openAtEnd = r.open.Load()
		r.waitNodeConns(ctx, "end", base.Connections+float64(r.openAtEnd))
	case ScenarioStorm:
		r.storm(ctx)
		r.setPhase("settle")
		r.openAtEnd = r.open.Load()
		r.waitNodeConns(ctx, "end", base.Connections+float64(r.openAtEnd))
	}
	r.endAt = time.Now()
	r.selfEnd = r.markSelf()
	r.closeAll()
	r.apiHTTP.CloseIdleConnections()
	if r.cfg.Scenario == ScenarioRoom || r.cfg.Scenario == ScenarioTicker {
		r.setPhase("leaving rooms")
		if err := r.membership(ctx, "DELETE"); err != nil {
			r.cleanupErr = err.Error()
		}
		r.apiHTTP.CloseIdleConnections()
	}
	r.waitBaseline(ctx, "final")
	return ctx.Err()
}

// expected returns the distinct deliveries the recipients must get: for
// every slot that connected, the messages of its stream whose publish was
// accepted (send: the replies to the frames written).
func (r *runner) expected() int64 {
	if r.cfg.Scenario == ScenarioSend {
		return r.sent.Load() // the frames written: one reply each
	}
	var n int64
	for _, s := range r.slots {
		if s.stream != nil && s.connected.Load() {
			n += int64(s.stream.next.Load()) - int64(s.stream.failedCount())
		}
	}
	return n
}

func (st *stream) failedCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.failed)
}

// drain waits until every expected message has arrived, at most --settle.
func (r *runner) drain(ctx context.Context) {
	r.setPhase("draining")
	r.setTarget(r.expected())
	t := time.NewTimer(r.cfg.Settle)
	defer t.Stop()
	select {
	case <-r.targetDone:
	case <-t.C:
	case <-ctx.Done():
	}
	r.drainedAt = time.Now()
}

// churnAt closes and reopens rate connections per second for dur,
// alternately with a close frame (1000) and by dropping the socket, so
// that both cleanup paths of the gateway run.
func (r *runner) churnAt(ctx context.Context, rate float64, dur time.Duration) {
	if r.cfg.Scenario == ScenarioChurn {
		r.setPhase("churn")
	}
	if rate <= 0 {
		return
	}
	total := int64(rate * dur.Seconds())
	tick := time.NewTicker(pubTick(rate))
	defer tick.Stop()
	start := time.Now()
	var done int64
	k := 0
	for done < total {
		el := time.Since(start)
		if el >= dur {
			break
		}
		due := min(total, int64(rate*el.Seconds())+1)
		for ; done < due; done++ {
			s := r.slots[k]
			k = (k + 1) % len(r.slots)
			c := s.conn.Load()
			if c == nil || s.cycle.Load() {
				r.churnSkipped.Add(1)
				continue
			}
			s.cycle.Store(true)
			r.churnPending.Add(1)
			r.churnCycles.Add(1)
			if done%2 == 0 {
				r.churnPolite.Add(1)
				c.WriteClose(1000, "churn")
			} else {
				r.churnAbrupt.Add(1)
				c.Close()
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// waitChurn waits until every cycled connection is open again, at most
// pollBound.
func (r *runner) waitChurn(ctx context.Context) {
	deadline := time.Now().Add(r.pollBound())
	for r.churnPending.Load() > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		sleepCtx(ctx, 10*time.Millisecond)
	}
}

// storm drops every open connection at once (the sockets are closed
// without a close frame, as in a network blip or a load balancer
// restart); each slot reconnects with the client's backoff (full jitter,
// 1 s doubling to 30 s). It returns when all are back, or after --duration.
func (r *runner) storm(ctx context.Context) {
	r.setPhase("storm")
	var victims []*slot
	for _, s := range r.slots {
		if s.conn.Load() != nil {
			victims = append(victims, s)
		}
	}
	r.stormVictims.Store(int64(len(victims)))
	r.stormLeft.Store(int64(len(victims)))
	r.stormDials0, r.stormFails0 = r.dials.Load(), r.dialFails.Load()
	r.stormPerSec = make([]atomic.Int64, int(r.cfg.Duration/time.Second)+2)
	r.stormStart = time.Now()
	if len(victims) == 0 {
		return
	}
	for _, s := range victims {
		s.victim.Store(true)
	}
	r.stormOn.Store(true)
	for _, s := range victims {
		if c := s.conn.Load(); c != nil {
			c.Close()
		}
	}
	t := time.NewTimer(r.cfg.Duration)
	defer t.Stop()
	select {
	case <-r.stormDone:
	case <-t.C:
	case <-ctx.Done():
	}
	r.stormOn.Store(false)
	r.stormDials1, r.stormFails1 = r.dials.Load(), r.dialFails.Load()
}

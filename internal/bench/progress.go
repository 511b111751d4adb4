package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Point is one second of the run, for the timeline of the reports.
type Point struct {
	T          float64 `json:"t_s"` // seconds since the start
	Phase      string  `json:"phase"`
	Open       int64   `json:"open"`          // connections open at the end of the second
	Connects   int64   `json:"connects"`      // successful dials in the second
	DialFails  int64   `json:"dial_failures"` // failed dials in the second
	Sent       int64   `json:"sent"`          // messages accepted by the API (send: frames written) in the second
	Received   int64   `json:"received"`      // distinct messages (send: replies) received in the second
	Samples    uint64  `json:"latency_samples"`
	P50MS      float64 `json:"p50_ms"`
	P95MS      float64 `json:"p95_ms"`
	P99MS      float64 `json:"p99_ms"`
	MaxMS      float64 `json:"max_ms"`
	ConnectP50 float64 `json:"connect_p50_ms"`
}

// progress samples the counters once a second into the timeline and
// writes the live line.
type progress struct {
	r        *runner
	out      io.Writer // nil = no line
	tty      bool
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	points   []Point
	prevLat  *Snapshot
	prevConn *Snapshot
	prev     struct{ connects, fails, sent, received int64 }
	lastLen  int
}

func (r *runner) startProgress() {
	p := &progress{r: r, stop: make(chan struct{}), done: make(chan struct{})}
	if !r.cfg.NoProgress {
		p.out, p.tty = r.cfg.Progress, r.cfg.ProgressTTY
	}
	r.prog = p
	go p.loop()
}

func (p *progress) loop() {
	defer close(p.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.tick()
		case <-p.stop:
			p.tick()
			if p.out != nil && p.tty {
				fmt.Fprintln(p.out)
			}
			return
		}
	}
}

// finish stops the sampling and returns the timeline.
func (p *progress) finish() []Point {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.points
}

func (p *progress) tick() {
	r := p.r
	lat := r.lat.Snapshot()
	win := lat.Sub(p.prevLat)
	win.Max = int64(r.lat.TakeWindowMax())
	p.prevLat = lat
	cs := r.connLat.Snapshot()
	cwin := cs.Sub(p.prevConn)
	p.prevConn = cs

	connects, fails := r.connects.Load(), r.dialFails.Load()
	sent, received := r.sent.Load(), r.received.Load()
	pt := Point{
		T:          time.Since(r.start).Seconds(),
		Phase:      r.getPhase(),
		Open:       r.open.Load(),
		Connects:   connects - p.prev.connects,
		DialFails:  fails - p.prev.fails,
		Sent:       sent - p.prev.sent,
		Received:   received - p.prev.received,
		Samples:    win.N,
		P50MS:      ms(win.Quantile(0.50)),
		P95MS:      ms(win.Quantile(0.95)),
		P99MS:      ms(win.Quantile(0.99)),
		MaxMS:      ms(time.Duration(win.Max)),
		ConnectP50: ms(cwin.Quantile(0.50)),
	}
	if win.N == 0 {
		pt.MaxMS = 0
	}
	p.prev.connects, p.prev.fails, p.prev.sent, p.prev.received = connects, fails, sent, received
	p.mu.Lock()
	p.points = append(p.points, pt)
	p.mu.Unlock()
	if p.out != nil {
		p.write(pt, lat)
	}
}

// write prints the progress line: overwritten in place on a terminal,
// one line per second otherwise.
func (p *progress) write(pt Point, total *Snapshot) {
	r := p.r
	var b strings.Builder
	fmt.Fprintf(&b, "[%4.0fs] %-12s conns %d/%d open %d", pt.T, pt.Phase, r.succeeded.Load(), r.cfg.Conns, pt.Open)
	if f := r.dialFails.Load(); f > 0 {
		fmt.Fprintf(&b, " fail %d", f)
	}
	if n := r.reconnects.Load(); n > 0 {
		fmt.Fprintf(&b, " reconn %d", n)
	}
	switch r.cfg.Scenario {
	case ScenarioBroadcast, ScenarioPush, ScenarioRoom, ScenarioSoak, ScenarioDownstream:
		fmt.Fprintf(&b, " | sent %d (+%d/s) recv %d (+%d/s) dup %d", r.sent.Load(), pt.Sent, r.received.Load(), pt.Received, r.dups.Load())
		if r.cfg.Scenario == ScenarioSoak {
			fmt.Fprintf(&b, " | cycles %d bcast %d", r.churnCycles.Load(), r.soakState.bsent.Load())
		}
		if e := r.pubErrors.Load(); e > 0 {
			fmt.Fprintf(&b, " puberr %d", e)
		}
		if pt.Samples > 0 {
			fmt.Fprintf(&b, " | p50 %s p99 %s max %s", fmtMS(pt.P50MS), fmtMS(pt.P99MS), fmtMS(pt.MaxMS))
		} else if total.N > 0 {
			fmt.Fprintf(&b, " | p50 %s p99 %s (all)", fmtDur(total.Quantile(0.5)), fmtDur(total.Quantile(0.99)))
		}
	case ScenarioSend:
		st := &r.sends
		fmt.Fprintf(&b, " | sends %d (+%d/s) replies %d (+%d/s): ok %d unavailable %d refused %d",
			r.sent.Load(), pt.Sent, r.received.Load(), pt.Received, st.ok.Load(), st.unavailable.Load(), st.refused.Load())
	case ScenarioChurn:
		fmt.Fprintf(&b, " | cycles %d reopened %d", r.churnCycles.Load(), r.churnDone.Load())
	case ScenarioStorm:
		if r.stormVictimsLoad() > 0 {
			fmt.Fprintf(&b, " | back %d/%d", r.stormVictimsLoad()-r.stormLeft.Load(), r.stormVictimsLoad())
		}
	}
	if pt.Connects > 0 {
		fmt.Fprintf(&b, " | +%d conn/s (p50 %s)", pt.Connects, fmtMS(pt.ConnectP50))
	}
	line := b.String()
	if p.tty {
		pad := ""
		if n := p.lastLen - len(line); n > 0 {
			pad = strings.Repeat(" ", n)
		}
		p.lastLen = len(line)
		fmt.Fprintf(p.out, "\r%s%s", line, pad)
		return
	}
	fmt.Fprintln(p.out, line)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

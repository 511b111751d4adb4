package bench

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// The send scenario (upstream throughput): the connections write `send`
// frames (contract §13) at --rate in all, round-robin, for --duration; the
// gateway answers each with a reply once its sink (WSGATE_UPSTREAM_URL)
// accepted the record, or unavailable. The bench counts the replies by
// answer and records the time from writing a frame to reading its reply
// (r.lat). Frame ids are <run id>-<index in the run>: a reply finds its
// send time in sendState.at without a lock, and no id repeats one of an
// earlier run (the gateway answers an id it accepted in the last 10
// minutes ok without forwarding it again).

// sendEvent is the event of the bench's send frames.
const sendEvent = "bench.send"

// sendState is the send scenario's part of a runner.
type sendState struct {
	at          []atomic.Int64 // Unix ns each send was written; 0 = not written or answered
	writeErrors atomic.Int64   // frames the connection refused (closed)
	skipped     atomic.Int64   // sends due on a slot with no open connection
	ok          atomic.Int64
	unavailable atomic.Int64
	refused     atomic.Int64 // replies with another error (forbidden, bad_request...)
	foreign     atomic.Int64 // replies to ids the run did not write, or answered twice
	lastReply   atomic.Int64 // Unix ns
	start       time.Time
	end         time.Time // the last frame written

	refusedCode atomic.Value // string: the first other error code

	mu             sync.Mutex
	unavailableWhy map[string]int64 // the error messages of unavailable replies
}

// sendLoad writes --rate send frames per second for --duration, then
// waits (at most --settle) for every reply.
func (r *runner) sendLoad(ctx context.Context) {
	r.setPhase("sending")
	st := &r.sends
	rate, dur := r.cfg.Rate, r.cfg.Duration
	total := int64(len(st.at))
	data := sendData(r.cfg.Size)
	tick := time.NewTicker(pubTick(rate))
	defer tick.Stop()
	st.start = time.Now()
	var k int64
	n := 0 // slot round-robin
	for k < total && ctx.Err() == nil {
		el := time.Since(st.start)
		due := min(total, int64(rate*el.Seconds())+1)
		if el >= dur {
			// As publish: the rest when on schedule, else stop short.
			if float64(total-k) > max(1, rate/10) {
				break
			}
			due = total
		}
		storeMax(&r.pubLag, int64(el)-int64(float64(k)/rate*1e9))
		for ; k < due; k++ {
			s := r.slots[n]
			n = (n + 1) % len(r.slots)
			c := s.conn.Load()
			if c == nil {
				st.skipped.Add(1)
				continue
			}
			st.at[k].Store(time.Now().UnixNano())
			f := &protocol.ClientFrame{Type: protocol.TypeSend, ID: r.runID + "-" + strconv.FormatInt(k, 10), Event: sendEvent, Data: data}
			if c.WriteFrame(f) != nil {
				st.at[k].Store(0)
				st.writeErrors.Add(1)
				continue
			}
			r.sent.Add(1) // frames written (the timeline's sent)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	st.end = time.Now()
	r.drain(ctx) // the target is the frames written: every one gets a reply
}

// sendSlots sizes the send times of a send run (before any reader
// starts: the readers index them without a lock).
func (st *sendState) sendSlots(cfg Config) {
	if cfg.Scenario == ScenarioSend {
		st.at = make([]atomic.Int64, int64(cfg.Rate*cfg.Duration.Seconds()))
	}
}

// sendData is the data of every send: a JSON string of size bytes in all.
func sendData(size int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("x", max(0, size-2)) + `"`)
}

// onReply accounts a reply to a send: its latency, once per id, and its
// answer. code is the error code of a refused send.
func (s *slot) onReply(id string, ok bool, code, msg string) {
	r := s.r
	st := &r.sends
	now := time.Now().UnixNano()
	idx, mine := strings.CutPrefix(id, r.runID+"-")
	k, err := strconv.ParseInt(idx, 10, 64)
	if !mine || err != nil || k < 0 || k >= int64(len(st.at)) {
		st.foreign.Add(1)
		return
	}
	at := st.at[k].Swap(0)
	if at == 0 {
		st.foreign.Add(1)
		return
	}
	r.lat.Record(time.Duration(now - at))
	storeMax(&st.lastReply, now)
	switch {
	case ok:
		st.ok.Add(1)
	case code == protocol.ErrUnavailable:
		st.unavailable.Add(1)
		st.mu.Lock()
		if st.unavailableWhy == nil {
			st.unavailableWhy = map[string]int64{}
		}
		st.unavailableWhy[trim(msg, 80)]++
		st.mu.Unlock()
	default:
		st.refused.Add(1)
		st.refusedCode.CompareAndSwap(nil, code)
	}
	r.gotOne()
}

// SendsReport counts the send frames of the send scenario and their
// replies: written = ok + unavailable + refused + unanswered.
type SendsReport struct {
	TargetRate  float64 `json:"target_rate"`
	Written     int64   `json:"written"`
	WriteErrors int64   `json:"write_errors"`
	Skipped     int64   `json:"skipped"` // due on a slot with no open connection
	OK          int64   `json:"ok"`
	Unavailable int64   `json:"unavailable"`
	// UnavailableWhy counts the unavailable replies by error message.
	UnavailableWhy map[string]int64 `json:"unavailable_reasons,omitempty"`
	Refused        int64            `json:"refused"` // another error code
	RefusedCode    string           `json:"refused_code,omitempty"`
	Unanswered     int64            `json:"unanswered"`
	Foreign        int64            `json:"foreign_replies"` // unknown id or a second reply
	WriteRate      float64          `json:"write_rate"`      // frames written per second of the send phase
	OKRate         float64          `json:"ok_rate"`         // ok replies per second, first write to last reply
	CPUPerOKS      float64          `json:"cpu_per_ok_s"`    // the nodes' CPU in the load phase per ok reply
	PublishLagMS   float64          `json:"lag_max_ms"`      // how far the writer fell behind its schedule
}

func (r *runner) sendsReport() *SendsReport {
	st := &r.sends
	s := &SendsReport{
		TargetRate: r.cfg.Rate, Written: r.sent.Load(), WriteErrors: st.writeErrors.Load(),
		Skipped: st.skipped.Load(), OK: st.ok.Load(), Unavailable: st.unavailable.Load(),
		Refused: st.refused.Load(), Foreign: st.foreign.Load(), PublishLagMS: nsToMS(r.pubLag.Load()),
	}
	if v, ok := st.refusedCode.Load().(string); ok {
		s.RefusedCode = v
	}
	st.mu.Lock()
	s.UnavailableWhy = maps.Clone(st.unavailableWhy)
	st.mu.Unlock()
	s.Unanswered = s.Written - s.OK - s.Unavailable - s.Refused
	if d := st.end.Sub(st.start).Seconds(); d > 0 {
		s.WriteRate = float64(s.Written) / d
	}
	if last := st.lastReply.Load(); last > 0 {
		if d := time.Unix(0, last).Sub(st.start).Seconds(); d > 0 {
			s.OKRate = float64(s.OK) / d
		}
	}
	return s
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// maxBatch is the contract's limit of /api/v1/publish/batch.
const maxBatch = 1000

// pubMsg is one message to publish: its stream and index in it.
type pubMsg struct {
	st  *stream
	idx uint64
}

// publish sends messages at --rate for --duration, --inflight requests at
// a time: one /api/v1/publish per message (broadcast, room), or what is due
// at each tick in one /api/v1/publish/batch (push). The publish timestamp
// is taken when a request is built; when the API cannot keep up, the rate
// achieved falls below --rate and pubLag records how far behind the
// schedule the publisher fell.
func (r *runner) publish(ctx context.Context) {
	r.setPhase("publishing")
	batch := r.cfg.Scenario == ScenarioPush || r.cfg.Scenario == ScenarioSoak || r.cfg.Scenario == ScenarioDownstream
	jobs := make(chan []pubMsg, r.cfg.Inflight)
	var wg sync.WaitGroup
	var rr atomic.Uint64
	for range r.cfg.Inflight {
		wg.Go(func() {
			for job := range jobs {
				if r.ds != nil {
					r.writeRecords(ctx, job) // downstream.go
					continue
				}
				api := r.cfg.API[(rr.Add(1)-1)%uint64(len(r.cfg.API))]
				r.send(ctx, api, job, batch)
			}
		})
	}

	rate, dur := r.cfg.Rate, r.cfg.Duration
	total := int64(rate * dur.Seconds())
	var produced int64
	next := 0 // stream round-robin
	tick := time.NewTicker(pubTick(rate))
	defer tick.Stop()
	start := time.Now()
	r.pubStart = start
loop:
	for produced < total {
		el := time.Since(start)
		due := min(total, int64(rate*el.Seconds())+1) - produced
		if el >= dur {
			// The tick after the end: send the rest when the publisher is on
			// schedule (within 100 ms of messages), else stop short and let
			// the achieved rate tell.
			if due = total - produced; float64(due) > max(1, rate/10) {
				break
			}
		}
		storeMax(&r.pubLag, int64(el)-int64(float64(produced)/rate*1e9))
		for due > 0 {
			if time.Since(start) >= dur && float64(total-produced) > max(1, rate/10) {
				break loop // behind schedule at the end: stop short, no catch-up burst
			}
			n := int64(1)
			if batch {
				n = min(due, maxBatch)
			}
			job := make([]pubMsg, n)
			for i := range job {
				st := r.streams[next]
				next = (next + 1) % len(r.streams)
				job[i] = pubMsg{st: st, idx: st.next.Add(1) - 1}
			}
			select {
			case jobs <- job:
			case <-ctx.Done():
				break loop
			}
			produced += n
			due -= n
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	r.pubEnd = time.Now()
	r.produced = produced
}

// pubTick is the pacer's period: 5 ms, or one message period when slower.
func pubTick(rate float64) time.Duration {
	d := 5 * time.Millisecond
	if rate > 0 && time.Duration(float64(time.Second)/rate) > d {
		d = time.Duration(float64(time.Second) / rate)
	}
	return d
}

// send publishes one job and accounts the answer: messages accepted are
// sent, refused ones are marked failed in their stream.
func (r *runner) send(ctx context.Context, api string, job []pubMsg, batch bool) {
	r.pubRequests.Add(1)
	now := time.Now().UnixNano()
	body := make([]byte, 0, len(job)*(r.cfg.Size+160)+16)
	path := "/api/v1/publish"
	if batch {
		path += "/batch"
		body = append(body, `{"messages":[`...)
	}
	for i, m := range job {
		if i > 0 {
			body = append(body, ',')
		}
		body = r.appendPublish(body, m, now)
	}
	if batch {
		body = append(body, "]}"...)
	}
	fail := func(reason string) {
		for _, m := range job {
			m.st.fail(m.idx)
		}
		r.countPubError(reason, int64(len(job)))
	}
	t0 := time.Now()
	resp, err := r.apiDo(ctx, http.MethodPost, api+path, body)
	r.apiLat.Record(time.Since(t0))
	if err != nil {
		fail(failureReason(err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		fail(fmt.Sprintf("HTTP %d", resp.StatusCode))
		return
	}
	if !batch {
		io.Copy(io.Discard, resp.Body)
		r.sent.Add(1)
		return
	}
	var ans struct {
		Results []json.RawMessage `json:"results"`
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil || json.Unmarshal(raw, &ans) != nil || len(ans.Results) != len(job) {
		fail("bad batch answer")
		return
	}
	var ok int64
	for i, res := range ans.Results {
		if e := resultError(res); e != nil {
			job[i].st.fail(job[i].idx)
			r.countPubError(e.Code, 1)
			continue
		}
		ok++
	}
	r.sent.Add(ok)
}

// resultError returns the error of one result of a batch answer, or nil
// when the message was accepted. The gateway's answers are compact, with
// "id" or "error" first: those are told apart without decoding.
func resultError(res json.RawMessage) *protocol.ErrorBody {
	if bytes.HasPrefix(res, []byte(`{"id":`)) {
		return nil
	}
	var v struct {
		Error *protocol.ErrorBody `json:"error"`
	}
	if json.Unmarshal(res, &v) != nil {
		return &protocol.ErrorBody{Code: "bad batch answer"}
	}
	return v.Error
}

// appendPublish appends the publish object of one message (contract §5).
func (r *runner) appendPublish(dst []byte, m pubMsg, now int64) []byte {
	dst = append(dst, `{"target":`...)
	dst = append(dst, m.st.target...)
	dst = append(dst, `,"event":"bench","class":"`...)
	dst = append(dst, r.cfg.Class...)
	dst = append(dst, '"')
	if m.st.reliable {
		dst = append(dst, `,"reliable":true`...)
	}
	if r.cfg.Scenario == ScenarioTicker {
		dst = r.appendKey(dst, m.idx)
	}
	dst = append(dst, `,"data":`...)
	start := len(dst)
	dst = appendData(dst, r.runID, m.st.id, m.idx, now, r.cfg.Size)
	if r.cfg.Fill == FillText {
		fillText(dst[start:], m.idx)
	}
	return append(dst, '}')
}

// apiDo sends one server API request with the API key.
func (r *runner) apiDo(ctx context.Context, method, u string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
	}
	return r.apiHTTP.Do(req)
}

// membership joins (PUT) or leaves (DELETE) every user to its room
// through the API, 16 requests at a time.
func (r *runner) membership(ctx context.Context, method string) error {
	type pair struct{ room, user string }
	work := make(chan pair)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	var rr atomic.Uint64
	for range 16 {
		wg.Go(func() {
			for p := range work {
				api := r.cfg.API[(rr.Add(1)-1)%uint64(len(r.cfg.API))]
				u := api + "/api/v1/rooms/" + url.PathEscape(p.room) + "/members/" + url.PathEscape(p.user)
				resp, err := r.apiDo(ctx, method, u, nil)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s %s: HTTP %d", method, u, resp.StatusCode)
					}
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for u := range r.cfg.Users {
		select {
		case work <- pair{r.roomName(u % r.cfg.Rooms), r.user(u)}:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

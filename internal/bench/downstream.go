package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/downstream"
)

// The downstream scenario (contract §20): the connections are users, as in
// push; instead of the API, the bench writes each reliable user message as
// one record (a publish body) into the source the nodes consume
// (--source, WSGATE_DOWNSTREAM_URL's syntax): XADD, a JetStream publish or
// a Kafka produce keyed by the user. The publisher's pacing, the payload
// (index, run, stream and the time the record was built, just before its
// write) and the exact count per recipient are push's; a record counts as
// sent once the source holds it, so latency is from the write to the
// receipt, across the nodes' consumption. The report adds the records
// written per second and the records delivered per second from the first
// write to the last receipt (the drain included): what the nodes sustain
// when --rate is above it.

// ScenarioDownstream is the downstream scenario.
const ScenarioDownstream = "downstream"

func init() {
	defaultRate[ScenarioDownstream] = 1000 // records per second
}

// DownstreamReport is the downstream scenario's part of the report.
type DownstreamReport struct {
	Source      string  `json:"source"` // the source's metric label ("redis:orders")
	Written     int64   `json:"written"`
	WriteErrors int64   `json:"write_errors"`
	WriteRate   float64 `json:"write_rate"` // records written per second of the write phase
	// DeliveredRate is the records received per second from the first
	// write to the last expected receipt (or the end of --settle).
	DeliveredRate float64 `json:"delivered_rate"`
}

// validateSource checks --source: required by downstream, for it only,
// and one source URL the nodes could consume.
func (c Config) validateSource() error {
	switch {
	case c.Scenario == ScenarioDownstream && c.Source == "":
		return errors.New("--source is required for downstream: the source URL the nodes consume (WSGATE_DOWNSTREAM_URL's syntax)")
	case c.Scenario != ScenarioDownstream && c.Source != "":
		return errors.New("--source is only for downstream")
	case c.Source != "":
		if err := downstream.CheckProducer(c.Source); err != nil {
			return fmt.Errorf("--source: %s", strings.TrimPrefix(err.Error(), "source: "))
		}
	}
	return nil
}

// openSource connects the producer before anything is opened, so that an
// unreachable source ends the run at once.
func (r *runner) openSource(ctx context.Context) error {
	r.setPhase("opening the source")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := downstream.OpenProducer(ctx, r.cfg.Source)
	if err != nil {
		return fmt.Errorf("--source: %s", strings.TrimPrefix(err.Error(), "source "))
	}
	r.ds = p
	return nil
}

// writeRecords writes one job of the publisher as records, one per
// message, and accounts them as send does an API batch: written records
// are sent, the others failed in their stream.
func (r *runner) writeRecords(ctx context.Context, job []pubMsg) {
	r.pubRequests.Add(1)
	now := time.Now().UnixNano()
	recs := make([]downstream.ProducerRecord, len(job))
	for i, m := range job {
		recs[i] = downstream.ProducerRecord{Key: r.user(int(m.st.id)), Value: r.appendPublish(make([]byte, 0, r.cfg.Size+160), m, now)}
	}
	t0 := time.Now()
	errs := r.ds.Write(ctx, recs)
	r.apiLat.Record(time.Since(t0))
	var ok int64
	for i, err := range errs {
		if err != nil {
			job[i].st.fail(job[i].idx)
			r.countPubError(writeFailure(err), 1)
			continue
		}
		ok++
	}
	r.sent.Add(ok)
}

// writeFailure is the reason of a failed write, for the report's counts.
func writeFailure(err error) string {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "write " + err.Error()
	}
	return trim("write failed: "+err.Error(), 80)
}

// downstreamReport fills the downstream part from the message counts,
// with a warning when records were written and none arrived.
func (r *runner) downstreamReport(rep *Report) *DownstreamReport {
	m := rep.Messages
	if m.Sent > 0 && m.Received == 0 {
		rep.Warnings = append(rep.Warnings, "no record written to the source reached a connection: "+
			"do the nodes consume it (WSGATE_DOWNSTREAM_URL, the same stream, subject or topic)?")
	}
	d := &DownstreamReport{Written: m.Sent, WriteErrors: m.PublishErrors, WriteRate: m.AchievedRate}
	if r.ds != nil {
		d.Source = r.ds.Name()
	}
	if !r.pubStart.IsZero() && !r.drainedAt.IsZero() {
		if s := r.drainedAt.Sub(r.pubStart).Seconds(); s > 0 {
			d.DeliveredRate = float64(m.Received) / s
		}
	}
	return d
}

// writeDownstream writes the downstream line of the summary.
func (rep *Report) writeDownstream(tw io.Writer) {
	d := rep.Downstream
	if d == nil {
		return
	}
	fmt.Fprintf(tw, "source\t%s\twritten %d (%.0f/s)\twrite errors %d\tdelivered %.0f/s (first write to last receipt)\n",
		d.Source, d.Written, d.WriteRate, d.WriteErrors, d.DeliveredRate)
}

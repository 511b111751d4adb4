package downstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A JetStream source (contract section 20):
//
//	nats://host:port?stream=STREAM&subject=SUBJ&durable=NAME[&ack_wait=30s]
//
// Every node pulls from one durable consumer NAME (default "wsgate") of
// STREAM, filtered on SUBJ, with explicit acks; a message's body is the
// record's value and its stream sequence its identity. A message is acked
// (and the ack confirmed by the server) once handled; a refused one is
// first published to SUBJ.dead (message id "dead-<seq>", so JetStream's
// duplicate window drops a second write). A message a node holds longer
// than ack_wait/3 is marked in progress, so that JetStream redelivers only
// the messages of a node that died (after ack_wait, 30 s). A node that
// stops naks what it could not finish, for an immediate redelivery.
// STREAM is created (file storage, subject SUBJ) if it is missing.
//
// Order: per target within a node. JetStream spreads one consumer's
// messages over the nodes pulling from it and tells nothing of the other
// pullers' unacknowledged messages, so two messages for one target may be
// published out of order by two nodes; see docs/downstream.md.

type natsOpts struct {
	serverURL string
	stream    string
	subject   string
	durable   string
	ackWait   time.Duration
}

// DefaultDurable is the consumer of a nats source without durable=.
const DefaultDurable = "wsgate"

func natsTarget(u *url.URL) (natsOpts, error) {
	o := natsOpts{durable: DefaultDurable, ackWait: 30 * time.Second}
	q := u.Query()
	for k, v := range q {
		val := v[len(v)-1]
		switch k {
		case "stream":
			o.stream = val
		case "subject":
			o.subject = val
		case "durable":
			o.durable = val
		case "ack_wait":
			d, err := time.ParseDuration(val)
			if err != nil || d < 100*time.Millisecond {
				return o, fmt.Errorf("source: ack_wait %q must be a duration of at least 100ms", val)
			}
			o.ackWait = d
		default:
			return o, fmt.Errorf("source: unknown nats option %q (want stream, subject, durable, ack_wait)", k)
		}
	}
	if o.stream == "" || o.subject == "" || o.durable == "" {
		return o, errors.New("source: a nats source needs ?stream=STREAM&subject=SUBJ (and a non-empty durable)")
	}
	c := *u
	c.RawQuery = ""
	o.serverURL = c.String()
	return o, nil
}

type natsSource struct {
	*core
	opts   natsOpts
	nc     *nats.Conn
	js     jetstream.JetStream
	keySrc string

	mu   sync.Mutex
	held map[uint64]heldMsg
}

type heldMsg struct {
	m     jetstream.Msg
	since time.Time
}

func openNATS(u *url.URL, opt Options) (Source, error) {
	o, err := natsTarget(u)
	if err != nil {
		return nil, err
	}
	s := &natsSource{core: newCore("nats:"+o.subject, opt), opts: o, keySrc: "nats/" + u.Host + "/" + o.stream, held: map[uint64]heldMsg{}}
	nc, err := nats.Connect(o.serverURL, nats.Name("wsgate-downstream"), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("source nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("source nats: %w", err)
	}
	s.nc, s.js = nc, js
	return s, nil
}

func (s *natsSource) Name() string { return s.name }
func (s *natsSource) Close() error { s.nc.Close(); return nil }

// consumer creates (or updates) the stream if missing and the durable.
func (s *natsSource) consumer(ctx context.Context) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.js.Stream(ctx, s.opts.stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.opts.stream, Subjects: []string{s.opts.subject}, Storage: jetstream.FileStorage})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	return s.js.CreateOrUpdateConsumer(ctx, s.opts.stream, jetstream.ConsumerConfig{
		Durable: s.opts.durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: s.opts.ackWait,
		FilterSubject: s.opts.subject, DeliverPolicy: jetstream.DeliverAllPolicy, MaxAckPending: 65536,
	})
}

// Run implements Source.
func (s *natsSource) Run(ctx context.Context) {
	hctx, stop := s.handleCtx(ctx)
	defer stop()
	s.startLanes()
	var cons jetstream.Consumer
	for try := 0; ; try++ {
		var err error
		if cons, err = s.consumer(ctx); err == nil {
			break
		}
		if try == 0 || try%20 == 0 {
			s.log.Warn("cannot create the JetStream consumer; retrying", "stream", s.opts.stream, "durable", s.opts.durable, "err", err)
		}
		if !sleep(ctx, backoff(try)) {
			s.stopLanes()
			return
		}
	}
	s.log.Info("consuming", "stream", s.opts.stream, "subject", s.opts.subject, "durable", s.opts.durable, "in_flight", s.opt.InFlight)
	var bg sync.WaitGroup
	bg.Go(func() { s.progressLoop(ctx) })
	bg.Go(func() { s.lagLoop(ctx, cons) })
	s.readLoop(ctx, hctx, cons)
	s.stopLanes()
	bg.Wait()
}

func (s *natsSource) readLoop(ctx, hctx context.Context, cons jetstream.Consumer) {
	for try := 0; ctx.Err() == nil; {
		if !s.acquire(ctx) {
			return
		}
		n := min(1+s.free(), 100)
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			s.release()
			if try == 0 || try%20 == 0 {
				s.log.Warn("JetStream fetch failed; retrying", "err", err)
			}
			sleep(ctx, backoff(try))
			try++
			continue
		}
		try = 0
		first := true
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			seq := md.Sequence.Stream
			s.mu.Lock()
			_, dup := s.held[seq]
			if !dup {
				s.held[seq] = heldMsg{m: m, since: time.Now()}
			}
			s.mu.Unlock()
			if dup {
				continue // redelivered while this node still handles it
			}
			if hctx.Err() != nil {
				s.mu.Lock()
				delete(s.held, seq)
				s.mu.Unlock()
				_ = m.Nak() // stopping: for another node
				continue
			}
			if !first {
				s.take() // free() said there was room
			}
			first = false
			s.dispatch(targetsOf(m.Data()), func() {
				defer s.release()
				s.process(hctx, seq, m)
			})
		}
		if first {
			s.release() // nothing came
		}
	}
}

func (s *natsSource) process(ctx context.Context, seq uint64, m jetstream.Msg) {
	done := false
	defer func() {
		s.mu.Lock()
		delete(s.held, seq)
		s.mu.Unlock()
		if !done {
			_ = m.Nak() // for another node, at once
		}
	}()
	id := strconv.FormatUint(seq, 10)
	r := Record{ID: id, Key: recordKey(s.keySrc, id), Value: m.Data()}
	o, ok := s.handle(ctx, r)
	if !ok {
		return
	}
	if len(o.Dead) > 0 {
		if !s.retryUntil(ctx, "dead-letter publish", func(ctx context.Context) error { return s.writeDead(ctx, id, deadJSON(o)) }) {
			return
		}
	}
	if !s.retryUntil(ctx, "ack", func(ctx context.Context) error { return m.DoubleAck(ctx) }) {
		return
	}
	done = true
	s.count(r, o)
}

// writeDead publishes the dead letters to SUBJ.dead; when no stream
// holds that subject, a stream STREAM_DEAD is created for it.
func (s *natsSource) writeDead(ctx context.Context, id string, entries [][]byte) error {
	subj := s.opts.subject + ".dead"
	for i, b := range entries {
		msgID := "dead-" + id + "-" + strconv.Itoa(i)
		_, err := s.js.Publish(ctx, subj, b, jetstream.WithMsgID(msgID))
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			_, cerr := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.opts.stream + "_DEAD", Subjects: []string{subj}, Storage: jetstream.FileStorage})
			if cerr != nil && !errors.Is(cerr, jetstream.ErrStreamNameAlreadyInUse) {
				return cerr
			}
			_, err = s.js.Publish(ctx, subj, b, jetstream.WithMsgID(msgID))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// progressLoop marks the messages held for ack_wait/3 in progress.
func (s *natsSource) progressLoop(ctx context.Context) {
	every := s.opts.ackWait / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ms []jetstream.Msg
		s.mu.Lock()
		for _, h := range s.held {
			if time.Since(h.since) >= every {
				ms = append(ms, h.m)
			}
		}
		s.mu.Unlock()
		for _, m := range ms {
			_ = m.InProgress()
		}
	}
}

// lagLoop sets the lag to the consumer's pending plus unacknowledged.
func (s *natsSource) lagLoop(ctx context.Context, cons jetstream.Consumer) {
	t := time.NewTicker(lagEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if info, err := cons.Info(cctx); err == nil {
			s.lag.Set(float64(info.NumPending) + float64(info.NumAckPending))
		}
		cancel()
	}
}

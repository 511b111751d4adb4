package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of a nats:// sink (contract section 13).
const (
	DefaultNATSSubject = "wsgate.upstream"
	DefaultNATSStream  = "WSGATE_UPSTREAM"
)

// natsSink publishes each record to a JetStream subject and waits for the
// stream's acks. The record id is the JetStream message id, so a record
// written again within the stream's duplicate window (2 minutes by
// default) is stored once.
type natsSink struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	stream  string

	mu      sync.Mutex
	ensured bool // the stream exists
}

// natsTarget returns the server URL (without the sink's query options)
// and the subject and stream names.
func natsTarget(u *url.URL) (serverURL string, names [2]string, err error) {
	c := *u
	q := c.Query()
	names = [2]string{DefaultNATSSubject, DefaultNATSStream}
	for k, v := range q {
		switch k {
		case "subject":
			names[0] = v[len(v)-1]
		case "stream":
			names[1] = v[len(v)-1]
		default:
			return "", names, fmt.Errorf("upstream url: unknown nats option %q (want subject, stream)", k)
		}
	}
	if names[0] == "" || names[1] == "" {
		return "", names, errors.New("upstream url: empty nats subject or stream")
	}
	c.RawQuery = ""
	return c.String(), names, nil
}

func openNATS(_ context.Context, u *url.URL, opt Options) (Sink, error) {
	serverURL, names, err := natsTarget(u)
	if err != nil {
		return nil, err
	}
	log := opt.Logger.With("component", "upstream.nats")
	nc, err := nats.Connect(serverURL,
		nats.Name("wsgate"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.Timeout(2*time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("upstream nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("upstream nats: %w", err)
	}
	return &natsSink{nc: nc, js: js, subject: names[0], stream: names[1]}, nil
}

// ensureStream creates the stream when it is missing (once per sink; a
// failure is retried on the next Write).
func (s *natsSink) ensureStream(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ensured {
		return nil
	}
	_, err := s.js.Stream(ctx, s.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:     s.stream,
			Subjects: []string{s.subject},
			Storage:  jetstream.FileStorage,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // another node created it first
		}
	}
	if err != nil {
		return err
	}
	s.ensured = true
	return nil
}

// Write publishes the records asynchronously (one connection keeps them in
// order) and returns once JetStream acked all of them.
func (s *natsSink) Write(ctx context.Context, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	if err := s.ensureStream(ctx); err != nil {
		return fmt.Errorf("upstream nats: stream %s: %w", s.stream, err)
	}
	futures := make([]jetstream.PubAckFuture, 0, len(recs))
	for i := range recs {
		b, err := json.Marshal(&recs[i])
		if err != nil {
			return err
		}
		f, err := s.js.PublishAsync(s.subject, b, jetstream.WithMsgID(recs[i].ID), jetstream.WithExpectStream(s.stream))
		if err != nil {
			return fmt.Errorf("upstream nats: %w", err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("upstream nats: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("upstream nats: %w", ctx.Err())
		}
	}
	return nil
}

func (s *natsSink) Close() error {
	s.nc.Close()
	return nil
}

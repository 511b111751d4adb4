package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/wsgate/wsgate/internal/testutil/natstest"
)

func TestNATSSink(t *testing.T) {
	runSinkSuite(t, func(t *testing.T) *sinkHarness {
		srv := natstest.Start(t)
		return &sinkHarness{
			url:      srv.URL() + "?subject=test.up&stream=TESTUP",
			received: natsConsumerReader(srv.URL(), "TESTUP"),
			down:     srv.Stop, up: srv.Restart,
			hang: srv.Pause, release: srv.Resume, dedups: true,
		}
	})
}

func TestNATSSinkDefaults(t *testing.T) {
	srv := natstest.Start(t)
	s := openSink(t, &sinkHarness{url: srv.URL()})
	writeOK(t, s, testRecords("d", 1, 2))
	got := natsConsumerReader(srv.URL(), DefaultNATSStream)(t)
	if len(got) != 2 {
		t.Fatalf("stream %s holds %d records, want 2", DefaultNATSStream, len(got))
	}
}

// natsConsumerReader reads the stream through a durable pull consumer,
// acknowledging each message, as a business consumer does.
func natsConsumerReader(url, stream string) func(t *testing.T) []Record {
	var got []Record
	return func(t *testing.T) []Record {
		t.Helper()
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatalf("nats connect: %v", err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "consumers", AckPolicy: jetstream.AckExplicitPolicy})
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return got
		}
		if err != nil {
			t.Fatalf("consumer: %v", err)
		}
		for {
			batch, err := c.FetchNoWait(1000)
			if err != nil {
				t.Fatalf("fetch: %v", err)
			}
			n := 0
			for m := range batch.Messages() {
				var r Record
				if err := json.Unmarshal(m.Data(), &r); err != nil {
					t.Fatalf("message: %v", err)
				}
				got = append(got, r)
				if err := m.DoubleAck(ctx); err != nil {
					t.Fatalf("ack: %v", err)
				}
				n++
			}
			if n == 0 {
				return got
			}
		}
	}
}

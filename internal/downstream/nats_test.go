package downstream

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

// natsHarness is a stream on a real nats-server, redelivered after 1 s
// without an ack (the default is 30 s).
func natsHarness(t *testing.T, srv *natstest.Server) *sourceHarness {
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	stream, subject := randName("DS"), randName("ds.")
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		t.Fatal(err)
	}
	return &sourceHarness{
		url:       srv.URL() + "?stream=" + stream + "&subject=" + subject + "&ack_wait=1s",
		weakOrder: true,
		produce: func(t *testing.T, values ...[]byte) {
			t.Helper()
			for _, v := range values {
				if _, err := js.Publish(ctx, subject, v); err != nil {
					t.Fatalf("publish: %v", err)
				}
			}
		},
		dead: func(t *testing.T) []DeadLetter {
			t.Helper()
			st, err := js.Stream(ctx, stream+"_DEAD")
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var out []DeadLetter
			for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
				m, err := st.GetMsg(ctx, seq)
				if err != nil {
					continue
				}
				var d DeadLetter
				if err := json.Unmarshal(m.Data, &d); err != nil {
					t.Fatalf("dead letter %d: %v", seq, err)
				}
				out = append(out, d)
			}
			return out
		},
		pending: func(t *testing.T) int {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			c, err := js.Consumer(cctx, stream, DefaultDurable)
			if err != nil {
				return -2
			}
			info, err := c.Info(cctx)
			if err != nil {
				return -2
			}
			return info.NumAckPending
		},
	}
}

func TestNATSSource(t *testing.T) {
	srv := natstest.Start(t)
	runSourceSuite(t, func(t *testing.T) *sourceHarness { return natsHarness(t, srv) })
}

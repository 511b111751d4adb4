package downstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A Kafka source (contract section 20):
//
//	kafka://broker1:9092,broker2:9092/TOPIC?group=GROUP
//
// The nodes are the members of consumer group GROUP (default "wsgate"); a
// new group starts at the earliest offset. Each partition's records are
// handled one after the other (a lane per partition), and a record's
// offset is marked for commit once it was handled; marked offsets are
// committed every second and before a partition is revoked, after the
// records in hand are done. A record's identity is TOPIC/PARTITION/OFFSET.
// Refused records are produced to TOPIC.dead (keyed by that identity);
// a record whose commit was lost may be dead-lettered twice (the entries
// carry the identity: consumers of TOPIC.dead drop repeats by it).
// A member that dies is replaced at the group's session timeout (10 s)
// and its partitions resume from their committed offsets.

type kafkaOpts struct {
	brokers []string
	topic   string
	group   string
}

func kafkaTarget(u *url.URL) (kafkaOpts, error) {
	o := kafkaOpts{group: DefaultGroup}
	o.topic = strings.Trim(u.Path, "/")
	if o.topic == "" || strings.Contains(o.topic, "/") {
		return o, errors.New("source: a kafka URL needs exactly one topic as its path")
	}
	for k, v := range u.Query() {
		if k != "group" || v[len(v)-1] == "" {
			return o, fmt.Errorf("source: kafka option %q (want group=GROUP)", k)
		}
		o.group = v[len(v)-1]
	}
	for _, b := range strings.Split(u.Host, ",") {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return o, fmt.Errorf("source: kafka broker %q is not host:port", b)
		}
		o.brokers = append(o.brokers, b)
	}
	return o, nil
}

type kafkaSource struct {
	*core
	opts   kafkaOpts
	cl     *kgo.Client
	keySrc string

	// The lag of the partitions this node holds: each node reports only
	// its own, so that the nodes' gauges add up to the group's lag (a
	// revoked partition's lag goes with it to its new owner).
	lagMu sync.Mutex
	owned map[int32]bool  // partitions assigned to this node
	lags  map[int32]int64 // owned partition -> records after the last one polled
	next  map[int32]int64 // owned partition -> the offset after the last one polled
}

// kafkaSessionTimeout is how long a silent member keeps its partitions.
const kafkaSessionTimeout = 10 * time.Second

func openKafka(u *url.URL, opt Options) (Source, error) {
	o, err := kafkaTarget(u)
	if err != nil {
		return nil, err
	}
	s := &kafkaSource{core: newCore("kafka:"+o.topic, opt), opts: o, keySrc: "kafka/" + o.brokers[0] + "/" + o.group,
		owned: map[int32]bool{}, lags: map[int32]int64{}, next: map[int32]int64{}}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(o.brokers...),
		kgo.ClientID("wsgate-"+opt.NodeID),
		kgo.ConsumerGroup(o.group),
		kgo.ConsumeTopics(o.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.SessionTimeout(kafkaSessionTimeout),
		kgo.HeartbeatInterval(time.Second),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.revoked),
		kgo.AllowAutoTopicCreation(), // TOPIC.dead, where the brokers allow it
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	if err != nil {
		return nil, fmt.Errorf("source kafka: %w", err)
	}
	s.cl = cl
	return s, nil
}

func (s *kafkaSource) Name() string { return s.name }
func (s *kafkaSource) Close() error { s.cl.Close(); return nil }

// revoked runs before partitions move to another member: the records in
// hand finish (for Grace at most), then the marked offsets are committed,
// so that the next owner starts after them.
func (s *kafkaSource) revoked(ctx context.Context, cl *kgo.Client, gone map[string][]int32) {
	defer s.disown(gone[s.opts.topic])
	deadline := time.Now().Add(s.opt.Grace)
	for s.free() < cap(s.slots) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := cl.CommitMarkedOffsets(cctx); err != nil {
		s.log.Warn("commit before a rebalance failed; the next owner handles those records again (once: their keys)", "err", err)
	}
}

// assigned records the partitions this node now holds.
func (s *kafkaSource) assigned(_ context.Context, _ *kgo.Client, got map[string][]int32) {
	s.lagMu.Lock()
	for _, p := range got[s.opts.topic] {
		s.owned[p] = true
	}
	s.lagMu.Unlock()
}

// disown forgets the partitions this node no longer holds, and their lag.
func (s *kafkaSource) disown(ps []int32) {
	s.lagMu.Lock()
	for _, p := range ps {
		delete(s.owned, p)
		delete(s.lags, p)
		delete(s.next, p)
	}
	s.setLagLocked()
	s.lagMu.Unlock()
}

// setLagLocked sets the gauge to the sum of the owned partitions' lags.
func (s *kafkaSource) setLagLocked() {
	var sum int64
	for _, l := range s.lags {
		sum += l
	}
	s.lag.Set(float64(sum))
}

// Run implements Source.
func (s *kafkaSource) Run(ctx context.Context) {
	hctx, stop := s.handleCtx(ctx)
	defer stop()
	s.startLanes()
	s.log.Info("consuming", "topic", s.opts.topic, "group", s.opts.group, "in_flight", s.opt.InFlight)
	var bg sync.WaitGroup
	bg.Go(func() { s.lagLoop(ctx) })
	s.readLoop(ctx, hctx)
	s.stopLanes()
	bg.Wait()
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := s.cl.CommitMarkedOffsets(cctx); err != nil {
		s.log.Warn("last commit failed; those records come again (once: their keys)", "err", err)
	}
	cancel()
	s.cl.LeaveGroup()
}

func (s *kafkaSource) readLoop(ctx, hctx context.Context) {
	for ctx.Err() == nil {
		// Wait for room, without holding it while polling: a revoke
		// waits for the records in hand, and an idle poll is not one.
		if !s.acquire(ctx) {
			return
		}
		s.release()
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := s.cl.PollRecords(pctx, s.free())
		cancel()
		var recs []*kgo.Record
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			last := p.Records[len(p.Records)-1]
			s.lagMu.Lock()
			if s.owned[p.Partition] { // not a fetch buffered before a revoke
				s.lags[p.Partition] = max(p.HighWatermark-last.Offset-1, 0)
				s.next[p.Partition] = last.Offset + 1
				s.setLagLocked()
			}
			s.lagMu.Unlock()
			recs = append(recs, p.Records...)
		})
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				s.log.Warn("kafka fetch failed", "topic", t, "partition", p, "err", err)
			}
		})
		for _, r := range recs {
			s.take() // PollRecords returned at most free(), and only this loop takes
			s.dispatch([]string{"partition\x00" + strconv.Itoa(int(r.Partition))}, func() {
				defer s.release()
				s.process(hctx, r)
			})
		}
	}
}

func (s *kafkaSource) process(ctx context.Context, kr *kgo.Record) {
	id := kr.Topic + "/" + strconv.Itoa(int(kr.Partition)) + "/" + strconv.FormatInt(kr.Offset, 10)
	r := Record{ID: id, Key: recordKey(s.keySrc, id), Value: kr.Value}
	o, ok := s.handle(ctx, r)
	if !ok {
		return
	}
	if len(o.Dead) > 0 {
		if !s.retryUntil(ctx, "dead-letter produce", func(ctx context.Context) error {
			for _, b := range deadJSON(o) {
				if err := s.cl.ProduceSync(ctx, &kgo.Record{Topic: kr.Topic + ".dead", Key: []byte(id), Value: b}).FirstErr(); err != nil {
					return err
				}
			}
			return nil
		}) {
			return
		}
	}
	s.cl.MarkCommitRecords(kr)
	s.count(r, o)
}

// lagLoop refreshes the lag of the owned partitions every lagEvery from
// their end offsets, so that it also grows while the node polls nothing
// (every record in hand is being retried): end offset minus the offset
// after the last one polled, or, for a partition not polled yet, minus
// the group's committed offset (the earliest offset without one).
func (s *kafkaSource) lagLoop(ctx context.Context) {
	t := time.NewTicker(lagEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.lagMu.Lock()
		owned := make([]int32, 0, len(s.owned))
		for p := range s.owned {
			owned = append(owned, p)
		}
		s.lagMu.Unlock()
		if len(owned) == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		end, err1 := s.listOffsets(cctx, owned, -1)
		start, err2 := s.listOffsets(cctx, owned, -2)
		cancel()
		if err := errors.Join(err1, err2); err != nil {
			s.log.Debug("kafka lag: listing offsets failed", "err", err)
			continue
		}
		committed := s.cl.CommittedOffsets()[s.opts.topic]
		s.lagMu.Lock()
		for _, p := range owned {
			e, ok := end[p]
			if !ok || !s.owned[p] {
				continue
			}
			from, polled := s.next[p]
			if !polled {
				from = start[p]
				if c, ok := committed[p]; ok && c.Offset >= 0 {
					from = c.Offset
				}
			}
			s.lags[p] = max(e-from, 0)
		}
		s.setLagLocked()
		s.lagMu.Unlock()
	}
}

// listOffsets returns the latest (ts -1) or earliest (ts -2) offset of
// each partition of the topic.
func (s *kafkaSource) listOffsets(ctx context.Context, ps []int32, ts int64) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	t := kmsg.NewListOffsetsRequestTopic()
	t.Topic = s.opts.topic
	for _, p := range ps {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, ts
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return nil, fmt.Errorf("partition %d: %w", rp.Partition, err)
			}
			out[rp.Partition] = rp.Offset
		}
	}
	return out, nil
}

package cluster

import (
	"context"
	"slices"
	"sync"
)

// memSub is one Subscribe call of a Memory backend: a FIFO queue drained by
// its own goroutine, so that Send never runs a handler on the caller's
// goroutine (the same asynchrony as the Redis bus, and no deadlock when a
// handler calls back into the backend).
type memSub struct {
	handle func([]byte)
	wake   chan struct{} // capacity 1: "the queue is not empty"

	mu    sync.Mutex
	queue [][]byte
}

func (s *memSub) push(payload []byte) {
	s.mu.Lock()
	s.queue = append(s.queue, payload)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *memSub) take() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue = nil
	return q
}

// Send implements Backend. Each named node's subscriptions get their own
// copy of payload; a node named twice gets it once.
func (m *Memory) Send(ctx context.Context, nodes []string, payload []byte) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	for i, node := range nodes {
		if slices.Contains(nodes[:i], node) {
			continue
		}
		for s := range m.subs[node] {
			s.push(slices.Clone(payload))
		}
	}
	return nil
}

// Broadcast implements Backend.
func (m *Memory) Broadcast(ctx context.Context, payload []byte) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	for _, subs := range m.subs {
		for s := range subs {
			s.push(slices.Clone(payload))
		}
	}
	return nil
}

// Subscribe implements Backend: handle runs on a goroutine owned by the
// subscription, one message at a time in send order, until ctx ends or the
// backend is closed. Messages sent after ctx ended are never handled.
func (m *Memory) Subscribe(ctx context.Context, node string, handle func(payload []byte)) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	s := &memSub{handle: handle, wake: make(chan struct{}, 1)}
	subs := m.subs[node]
	if subs == nil {
		subs = map[*memSub]struct{}{}
		m.subs[node] = subs
	}
	subs[s] = struct{}{}
	m.wg.Add(1)
	go m.deliver(ctx, node, s)
	return nil
}

func (m *Memory) deliver(ctx context.Context, node string, s *memSub) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		if subs := m.subs[node]; subs != nil {
			delete(subs, s)
			if len(subs) == 0 {
				delete(m.subs, node)
			}
		}
		m.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.done:
			return
		case <-s.wake:
		}
		for _, payload := range s.take() {
			if ctx.Err() != nil {
				return
			}
			s.handle(payload)
		}
	}
}

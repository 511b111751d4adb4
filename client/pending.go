package client

import "encoding/json"

// Requests and pings waiting for their answer on one session.

// answer is what a pending request gets: the reply's result (JSON; nil
// for replies without one) or the error.
type answer struct {
	result json.RawMessage
	err    error
}

// register adds a pending request; false once the session is ending.
func (s *session) register(id string) (chan answer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.closing.Load() {
		return nil, false
	}
	ch := make(chan answer, 1)
	s.pending[id] = ch
	return ch, true
}

func (s *session) forget(id string) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
}

func (s *session) answer(id string, result json.RawMessage, err error) bool {
	s.mu.Lock()
	ch, ok := s.pending[id]
	delete(s.pending, id)
	s.mu.Unlock()
	if ok {
		ch <- answer{result, err}
	}
	return ok
}

func (s *session) answerSingle(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) != 1 {
		return false
	}
	for id, ch := range s.pending {
		delete(s.pending, id)
		ch <- answer{err: err}
	}
	return true
}

// registerPing adds a pending ping under a fresh ts (Unix ms, unique on
// the connection), which the pong echoes.
func (s *session) registerPing() (float64, chan error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.closing.Load() {
		return 0, nil, false
	}
	ts := float64(s.c.now().UnixMicro()) / 1000
	if ts <= s.lastTS {
		ts = s.lastTS + 0.001
	}
	s.lastTS = ts
	ch := make(chan error, 1)
	s.pings[ts] = ch
	return ts, ch, true
}

func (s *session) forgetPing(ts float64) {
	s.mu.Lock()
	delete(s.pings, ts)
	s.mu.Unlock()
}

func (s *session) pong(ts float64) {
	s.mu.Lock()
	ch, ok := s.pings[ts]
	if !ok && len(s.pings) == 1 { // a server that does not echo ts
		for t, only := range s.pings {
			ts, ch, ok = t, only, true
		}
	}
	delete(s.pings, ts)
	s.mu.Unlock()
	if ok {
		ch <- nil
	}
}

// failPending ends the session for requests: every waiter gets
// ErrConnectionLost and no new one registers.
func (s *session) failPending() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	for id, ch := range s.pending {
		delete(s.pending, id)
		ch <- answer{err: ErrConnectionLost}
	}
	for ts, ch := range s.pings {
		delete(s.pings, ts)
		ch <- ErrConnectionLost
	}
}

package cluster

import (
	"context"
	"time"
)

type memKey struct {
	answer  []byte // nil while pending
	expires time.Time
}

// ClaimKey implements Backend.
func (m *Memory) ClaimKey(ctx context.Context, key string, ttl time.Duration) (bool, []byte, error) {
	if err := m.lock(ctx); err != nil {
		return false, nil, err
	}
	defer m.mu.Unlock()
	now := m.now()
	if m.keys == nil {
		m.keys = map[string]memKey{}
	}
	if k, ok := m.keys[key]; ok && now.Before(k.expires) {
		return false, k.answer, nil
	}
	m.sweepKeysLocked(now)
	m.keys[key] = memKey{expires: now.Add(ttl)}
	return true, nil, nil
}

// StoreKey implements Backend.
func (m *Memory) StoreKey(ctx context.Context, key string, answer []byte, ttl time.Duration) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if m.keys == nil {
		m.keys = map[string]memKey{}
	}
	m.keys[key] = memKey{answer: append([]byte(nil), answer...), expires: m.now().Add(ttl)}
	return nil
}

// ReleaseKey implements Backend.
func (m *Memory) ReleaseKey(ctx context.Context, key string) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if k, ok := m.keys[key]; ok && k.answer == nil {
		delete(m.keys, key)
	}
	return nil
}

// sweepKeysLocked drops expired keys now and then (every 1024 claims).
func (m *Memory) sweepKeysLocked(now time.Time) {
	m.keyClaims++
	if m.keyClaims%1024 != 0 {
		return
	}
	for k, v := range m.keys {
		if !now.Before(v.expires) {
			delete(m.keys, k)
		}
	}
}

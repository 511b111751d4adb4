package cluster

import (
	"context"
	"time"
)

type memKey struct {
	fp, id  string
	failed  bool      // the claiming call failed: the next claim with fp takes it
	answer  []byte    // nil while pending or failed
	claimed time.Time // when the pending claim was made (see ClaimLease)
	expires time.Time
}

// ClaimKey implements Backend.
func (m *Memory) ClaimKey(ctx context.Context, key, fp, id string, ttl time.Duration) (KeyClaim, error) {
	if err := m.lock(ctx); err != nil {
		return KeyClaim{}, err
	}
	defer m.mu.Unlock()
	now := m.now()
	if m.keys == nil {
		m.keys = map[string]memKey{}
	}
	if k, ok := m.keys[key]; ok && now.Before(k.expires) {
		switch {
		case k.fp != fp:
			return KeyClaim{Conflict: true}, nil
		case k.failed, k.answer == nil && now.Sub(k.claimed) > ClaimLease:
			k.failed, k.claimed = false, now
			m.keys[key] = k
			return KeyClaim{Claimed: true, ID: k.id}, nil
		}
		return KeyClaim{ID: k.id, Answer: k.answer}, nil
	}
	m.sweepKeysLocked(now)
	m.keys[key] = memKey{fp: fp, id: id, claimed: now, expires: now.Add(ttl)}
	return KeyClaim{Claimed: true, ID: id}, nil
}

// StoreKey implements Backend.
func (m *Memory) StoreKey(ctx context.Context, key string, answer []byte, ttl time.Duration) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if k, ok := m.keys[key]; ok {
		k.failed, k.answer, k.expires = false, append([]byte(nil), answer...), m.now().Add(ttl)
		m.keys[key] = k
	}
	return nil
}

// ReleaseKey implements Backend.
func (m *Memory) ReleaseKey(ctx context.Context, key string) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if k, ok := m.keys[key]; ok && k.answer == nil {
		k.failed = true
		m.keys[key] = k
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

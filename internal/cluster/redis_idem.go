package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptClaimKey: KEYS claim hash; ARGV fp, id, ttlMs, deadlineMs,
// leaseMs. The hash holds s (state: p pending, f failed, a answered), f
// (fingerprint), i (message id), t (when the pending claim was made, Redis
// time in ms; a pending claim older than the lease is taken over like a
// failed one) and a (answer). Returns {1, id} claimed, {0, id[,
// answer]} not claimed (in progress, or answered), {2} conflict, {3} the
// caller's deadline passed before the script ran (nothing done: a claim
// that ran late would hold the key pending for its whole lifetime).
var scriptClaimKey = redis.NewScript(luaPastDeadline + `
if pastDeadline(ARGV[4]) then return {3} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], 's', 'f', 'i', 'a', 't')
if not v[1] then
  redis.call('HSET', KEYS[1], 's', 'p', 'f', ARGV[1], 'i', ARGV[2], 't', now)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, ARGV[2]}
end
if v[2] ~= ARGV[1] then return {2} end
if v[1] == 'f' or (v[1] == 'p' and now - tonumber(v[5] or 0) > tonumber(ARGV[5])) then
  redis.call('HSET', KEYS[1], 's', 'p', 't', now)
  return {1, v[3]}
end
if v[1] == 'a' then return {0, v[3], v[4]} end
return {0, v[3]}
`)

// scriptStoreKey: KEYS claim hash; ARGV answer, ttlMs. Only a claim that
// exists gets its answer.
var scriptStoreKey = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 's', 'a', 'a', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// scriptReleaseKey marks a pending claim failed (see Backend.ReleaseKey).
var scriptReleaseKey = redis.NewScript(`
if redis.call('HGET', KEYS[1], 's') == 'p' then redis.call('HSET', KEYS[1], 's', 'f') end
return 0
`)

// ClaimKey implements Backend with one script (scriptClaimKey).
func (r *Redis) ClaimKey(ctx context.Context, key, fp, id string, ttl time.Duration) (KeyClaim, error) {
	var kc KeyClaim
	// Not idempotent: a repeat after a lost reply would find its own claim
	// pending.
	err := r.do(ctx, "claim key", false, func(ctx context.Context) error {
		reply, err := scriptClaimKey.Run(ctx, r.c, []string{r.k.idem(key)}, fp, id, max(ttl.Milliseconds(), 1), sendDeadline(ctx, time.Now()), ClaimLease.Milliseconds()).Slice()
		if err != nil {
			return err
		}
		state, _ := reply[0].(int64)
		if state == 3 {
			return errPastDeadline
		}
		kc = KeyClaim{Claimed: state == 1, Conflict: state == 2}
		if len(reply) > 1 {
			kc.ID, _ = reply[1].(string)
		}
		if len(reply) > 2 {
			a, _ := reply[2].(string)
			kc.Answer = []byte(a)
		}
		if state < 0 || state > 2 || (state != 2 && kc.ID == "") {
			return fmt.Errorf("cluster: redis claim key: unexpected reply %v", reply)
		}
		return nil
	})
	return kc, err
}

// StoreKey implements Backend.
func (r *Redis) StoreKey(ctx context.Context, key string, answer []byte, ttl time.Duration) error {
	return r.do(ctx, "store key", true, func(ctx context.Context) error {
		return scriptStoreKey.Run(ctx, r.c, []string{r.k.idem(key)}, answer, max(ttl.Milliseconds(), 1)).Err()
	})
}

// ReleaseKey implements Backend.
func (r *Redis) ReleaseKey(ctx context.Context, key string) error {
	return r.do(ctx, "release key", true, func(ctx context.Context) error {
		return scriptReleaseKey.Run(ctx, r.c, []string{r.k.idem(key)}).Err()
	})
}

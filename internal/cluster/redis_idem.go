package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseKeyScript deletes a claim only while it is still pending.
var releaseKeyScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == '' then return redis.call('DEL', KEYS[1]) end return 0`)

// ClaimKey implements Backend: SET NX with an empty value marks the claim.
func (r *Redis) ClaimKey(ctx context.Context, key string, ttl time.Duration) (bool, []byte, error) {
	var claimed bool
	var answer []byte
	err := r.do(ctx, "claim key", false, func(ctx context.Context) error {
		ok, err := r.c.SetNX(ctx, r.k.idem(key), "", ttl).Result()
		if err != nil {
			return err
		}
		if ok {
			claimed = true
			return nil
		}
		v, err := r.c.Get(ctx, r.k.idem(key)).Bytes()
		if errors.Is(err, redis.Nil) {
			// Expired between the two commands: claim again next time.
			return nil
		}
		if err != nil {
			return err
		}
		if len(v) > 0 {
			answer = v
		}
		return nil
	})
	return claimed, answer, err
}

// StoreKey implements Backend.
func (r *Redis) StoreKey(ctx context.Context, key string, answer []byte, ttl time.Duration) error {
	return r.do(ctx, "store key", true, func(ctx context.Context) error {
		return r.c.Set(ctx, r.k.idem(key), answer, ttl).Err()
	})
}

// ReleaseKey implements Backend.
func (r *Redis) ReleaseKey(ctx context.Context, key string) error {
	return r.do(ctx, "release key", true, func(ctx context.Context) error {
		return releaseKeyScript.Run(ctx, r.c, []string{r.k.idem(key)}).Err()
	})
}

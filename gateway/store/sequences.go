package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// A sequence's route (upstream.SequenceStore): which engine a Triton
// sequence's START went to, shared by the replicas so that any of them
// sends its later requests there.
//
//	sg:seq:{key}   string: the target's address; expires unless renewed

func sequenceKey(key string) string { return "sg:seq:{" + key + "}" }

// PutSequence notes that sequence key runs on target addr, for ttl.
func (r *Redis) PutSequence(ctx context.Context, key, addr string, ttl time.Duration) error {
	return unavailable(r.c.Set(ctx, sequenceKey(key), addr, max(ttl, time.Millisecond)).Err())
}

// SequenceTarget is the target noted for sequence key; "" when there is
// none (never started, ended long ago, or expired).
func (r *Redis) SequenceTarget(ctx context.Context, key string) (string, error) {
	addr, err := r.c.Get(ctx, sequenceKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return addr, unavailable(err)
}

package store

import (
	"context"
	"time"
)

// DriveSlots makes r's scripts read now instead of Redis's clock, and
// returns what r's renewer does at each tick, for tests that move the
// clock through slot leases without waiting for them.
func DriveSlots(r *Redis, now func() time.Time) (renew func(context.Context) error) {
	r.redisLimits.now = now
	return r.redisLimits.renew
}

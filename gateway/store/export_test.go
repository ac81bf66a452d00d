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

// WatchKeys sends the events of r's key listener ("subscribed",
// "changed") to the returned channel, which must be read.
func WatchKeys(r *Redis) <-chan string {
	ch := make(chan string, 64)
	r.redisKeys.notify = func(e string) {
		select {
		case ch <- e:
		default: // a test that stopped reading
		}
	}
	return ch
}

// KeyCached reports whether r's cache holds the key of hash.
func KeyCached(r *Redis, hash string) bool {
	_, ok := r.redisKeys.cached(hash)
	return ok
}

// DriveLocalLog makes r's log of local admissions read now.
func DriveLocalLog(r *Redis, now func() time.Time) { r.redisLimits.localLog.now = now }

// Replicas is the number of replicas r last counted sharing its limits.
func Replicas(r *Redis) int { return r.redisKeys.replicaCount() }

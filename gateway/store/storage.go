package store

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Storage accounts the bytes an owner keeps in the store (stored
// responses), shared by replicas, so that one API key cannot fill it. An
// account is the set of the owner's records, each with its size and
// expiry: a record counts until it expires or is released, exactly.
type Storage interface {
	// ChargeStorage sets record id's size in owner's account to size, to
	// expire ttl from now (a record charged again counts its new size
	// only). With limit > 0 it charges nothing and returns false when
	// the account would then hold more than limit bytes.
	ChargeStorage(ctx context.Context, owner, id string, size int64, ttl time.Duration, limit int64) (bool, error)
	// ReleaseStorage removes record id from owner's account.
	ReleaseStorage(ctx context.Context, owner, id string) error
}

// GlobalOwner is the account of every owner's records together, for a
// store-wide cap (no API key's id can be "*").
const GlobalOwner = "*"

// storageKeys are the Redis keys of owner's account, under one hash tag
// (one Cluster slot): the records by expiry, their sizes, the total.
func storageKeys(owner string) []string {
	p := "sg:{storage:" + owner + "}:"
	return []string{p + "expiry", p + "size", p + "total"}
}

// chargeScript is ChargeStorage: KEYS expiry, size, total; ARGV id, size,
// ttl (ms), limit. Expired records leave the account first.
var chargeScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
local total = tonumber(redis.call('GET', KEYS[3]) or '0')
for _, id in ipairs(gone) do
  total = total - tonumber(redis.call('HGET', KEYS[2], id) or '0')
  redis.call('HDEL', KEYS[2], id)
end
if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end
local size, ttl, limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local old = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local ok = 1
if limit > 0 and total - old + size > limit then
  ok = 0
else
  total = total - old + size
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], size)
end
if total <= 0 and redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return ok
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local ms = math.max(tonumber(last[2]) - now, 1)
redis.call('SET', KEYS[3], total, 'PX', ms)
redis.call('PEXPIRE', KEYS[1], ms)
redis.call('PEXPIRE', KEYS[2], ms)
return ok`)

// releaseScript is ReleaseStorage: KEYS expiry, size, total; ARGV id.
var releaseScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[2], ARGV[1])
if not old then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
else
  redis.call('DECRBY', KEYS[3], old)
end
return 1`)

type redisStorage struct{ c redis.UniversalClient }

func (s *redisStorage) init(c redis.UniversalClient) { s.c = c }

func (s *redisStorage) ChargeStorage(ctx context.Context, owner, id string, size int64, ttl time.Duration, limit int64) (bool, error) {
	ok, err := chargeScript.Run(ctx, s.c, storageKeys(owner), id, size, max(ttl.Milliseconds(), 1), limit).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return ok == 1, nil
}

func (s *redisStorage) ReleaseStorage(ctx context.Context, owner, id string) error {
	return unavailable(releaseScript.Run(ctx, s.c, storageKeys(owner), id).Err())
}

// memStorage keeps the accounts in this process.
type memStorage struct {
	mu       sync.Mutex
	accounts map[string]map[string]memRecord
}

type memRecord struct {
	size    int64
	expires time.Time
}

func (s *memStorage) init() { s.accounts = map[string]map[string]memRecord{} }

func (s *memStorage) ChargeStorage(_ context.Context, owner, id string, size int64, ttl time.Duration, limit int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	acc := s.accounts[owner]
	if acc == nil {
		acc = map[string]memRecord{}
		s.accounts[owner] = acc
	}
	total := int64(0)
	for k, r := range acc {
		switch {
		case !now.Before(r.expires):
			delete(acc, k)
		case k != id:
			total += r.size
		}
	}
	if limit > 0 && total+size > limit {
		return false, nil
	}
	acc[id] = memRecord{size: size, expires: now.Add(ttl)}
	return true, nil
}

func (s *memStorage) ReleaseStorage(_ context.Context, owner, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.accounts[owner], id)
	return nil
}

package store

import "github.com/redis/go-redis/v9"

// Limits is the part of Store for limits. TODO(limits): filled in by its work.
type Limits interface{}

type redisLimits struct{ c redis.UniversalClient }

func (s *redisLimits) init(c redis.UniversalClient) { s.c = c }

type memLimits struct{}

func (s *memLimits) init() {}

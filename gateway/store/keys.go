package store

import "github.com/redis/go-redis/v9"

// Keys is the part of Store for keys. TODO(keys): filled in by its work.
type Keys interface{}

type redisKeys struct{ c redis.UniversalClient }

func (s *redisKeys) init(c redis.UniversalClient) { s.c = c }

type memKeys struct{}

func (s *memKeys) init() {}

package store

import "github.com/redis/go-redis/v9"

// Streams is the part of Store for streams. TODO(streams): filled in by its work.
type Streams interface{}

type redisStreams struct{ c redis.UniversalClient }

func (s *redisStreams) init(c redis.UniversalClient) { s.c = c }

type memStreams struct{}

func (s *memStreams) init() {}

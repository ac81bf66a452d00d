package store

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Responses is the part of Store for stored responses (OpenAI's Responses
// API): one record per response id, written by the replica running it
// and read, by its owner only, from any replica until it expires.
type Responses interface {
	// PutResponse writes response id's record, replacing any earlier one,
	// to live ttl from now.
	PutResponse(ctx context.Context, id string, r StoredResponse, ttl time.Duration) error
	// UpdateResponse is PutResponse for a record that exists only:
	// ErrNoResponse, and nothing written, when there is none (it was
	// deleted, or has expired).
	UpdateResponse(ctx context.Context, id string, r StoredResponse, ttl time.Duration) error
	// GetResponse reads response id's record; ErrNoResponse when there is
	// none (never stored, expired or deleted).
	GetResponse(ctx context.Context, id string) (StoredResponse, error)
	// DeleteResponse removes response id's record; ErrNoResponse when
	// there is none.
	DeleteResponse(ctx context.Context, id string) error
}

// ErrNoResponse: no stored response of that id.
var ErrNoResponse = errors.New("no such response")

// StoredResponse is one stored response.
type StoredResponse struct {
	// Owner is the id of the API key that created the response; "" on
	// an open gateway.
	Owner string `json:"owner"`
	// Object is the Response object's JSON as last written.
	Object json.RawMessage `json:"object"`
	// Data is the rest of what the gateway keeps of the response (its
	// input, the conversation it continues, its stream), opaque to the
	// store.
	Data json.RawMessage `json:"data,omitempty"`
}

// responseKey is the Redis key of response id's record.
func responseKey(id string) string { return "sg:{" + id + "}:response" }

type redisResponses struct{ c redis.UniversalClient }

func (s *redisResponses) init(c redis.UniversalClient) { s.c = c }

func (s *redisResponses) PutResponse(ctx context.Context, id string, r StoredResponse, ttl time.Duration) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return unavailable(s.c.Set(ctx, responseKey(id), b, ttl).Err())
}

func (s *redisResponses) UpdateResponse(ctx context.Context, id string, r StoredResponse, ttl time.Duration) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	ok, err := s.c.SetXX(ctx, responseKey(id), b, ttl).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return unavailable(err)
	}
	if !ok {
		return ErrNoResponse
	}
	return nil
}

func (s *redisResponses) GetResponse(ctx context.Context, id string) (StoredResponse, error) {
	var r StoredResponse
	b, err := s.c.Get(ctx, responseKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return r, ErrNoResponse
	}
	if err != nil {
		return r, unavailable(err)
	}
	err = json.Unmarshal(b, &r)
	return r, err
}

func (s *redisResponses) DeleteResponse(ctx context.Context, id string) error {
	n, err := s.c.Del(ctx, responseKey(id)).Result()
	if err != nil {
		return unavailable(err)
	}
	if n == 0 {
		return ErrNoResponse
	}
	return nil
}

type memResponses struct {
	mu    sync.Mutex
	m     map[string]memResponse
	swept time.Time // the last sweep of expired records
}

type memResponse struct {
	r       StoredResponse
	expires time.Time
}

func (s *memResponses) init() { s.m = map[string]memResponse{} }

func (s *memResponses) PutResponse(_ context.Context, id string, r StoredResponse, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(id, r, ttl)
	return nil
}

func (s *memResponses) UpdateResponse(_ context.Context, id string, r StoredResponse, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.m[id]; !ok || !time.Now().Before(v.expires) {
		return ErrNoResponse
	}
	s.put(id, r, ttl)
	return nil
}

// put writes a record; s.mu is held.
func (s *memResponses) put(id string, r StoredResponse, ttl time.Duration) {
	now := time.Now()
	if now.Sub(s.swept) >= time.Second { // expired records go as new ones come, a sweep a second at most
		s.swept = now
		for k, v := range s.m {
			if !now.Before(v.expires) {
				delete(s.m, k)
			}
		}
	}
	r.Object = append(json.RawMessage(nil), r.Object...)
	r.Data = append(json.RawMessage(nil), r.Data...)
	s.m[id] = memResponse{r: r, expires: now.Add(ttl)}
}

func (s *memResponses) GetResponse(_ context.Context, id string) (StoredResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if !ok || !time.Now().Before(v.expires) {
		return StoredResponse{}, ErrNoResponse
	}
	return v.r, nil
}

func (s *memResponses) DeleteResponse(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	delete(s.m, id)
	if !ok || !time.Now().Before(v.expires) {
		return ErrNoResponse
	}
	return nil
}

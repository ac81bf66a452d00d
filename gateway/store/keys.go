package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Key is one API key as stored: never the secret, only its SHA-256.
type Key struct {
	// ID is the key's stable, non-secret name in the gateway: what its
	// requests count against and what owns what they create.
	ID string `json:"id"`
	// Name is the operator's name for it, unique among live keys.
	Name string `json:"name"`
	// Hash is the hex SHA-256 of the secret.
	Hash string `json:"hash"`
	// Limits are the key's per-minute and concurrency limits (zero: none).
	Limit
	// Storage is the bytes of stored responses the key may keep; 0: the
	// gateway's default (gateway.Options.KeyStorage).
	Storage int64 `json:"storage,omitempty"`
	// Models are the models the key may use; empty: all.
	Models  []string  `json:"models,omitempty"`
	Created time.Time `json:"created"`
	// Expires is when the key stops working; zero: never.
	Expires time.Time `json:"expires,omitzero"`
}

// Expired reports whether k no longer works at now.
func (k *Key) Expired(now time.Time) bool {
	return !k.Expires.IsZero() && !now.Before(k.Expires)
}

// Allows reports whether k may use model.
func (k *Key) Allows(model string) bool {
	return len(k.Models) == 0 || slices.Contains(k.Models, model)
}

// Keys is the part of Store for API keys. Lookups compare hashes in
// constant time.
type Keys interface {
	// CreateKey stores k; ErrExists when a key named k.Name exists.
	CreateKey(ctx context.Context, k Key) error
	// LookupKey finds the key whose secret hashes to hash (HashSecret);
	// ErrNotFound when none does.
	LookupKey(ctx context.Context, hash string) (Key, error)
	// ListKeys lists the keys by name.
	ListKeys(ctx context.Context) ([]Key, error)
	// RevokeKey deletes the key named name; ErrNotFound when none is.
	RevokeKey(ctx context.Context, name string) error
}

var (
	// ErrNotFound: no such key (or stream, for Streams).
	ErrNotFound = errors.New("not found")
	// ErrExists: a key of that name exists.
	ErrExists = errors.New("already exists")
)

// SecretPrefix starts every secret NewKey makes.
const SecretPrefix = "sg-"

// NewKey makes a key named name and its secret: SecretPrefix and 43
// base64url characters (256 random bits), a valid HTTP token, so that it
// also fits a WebSocket subprotocol.
func NewKey(name string, now time.Time) (Key, string, error) {
	if err := ValidName(name); err != nil {
		return Key{}, "", err
	}
	var b [32]byte
	rand.Read(b[:])
	secret := SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	var id [8]byte
	rand.Read(id[:])
	return Key{ID: "key_" + hex.EncodeToString(id[:]), Name: name, Hash: HashSecret(secret), Created: now.UTC()}, secret, nil
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidName checks a key's name: 1 to 64 letters, digits, '.', '_' or
// '-', starting with a letter or digit.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("key name %q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// HashSecret is the hex SHA-256 of a secret, as keys are stored.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// sameHash compares two hex hashes in constant time.
func sameHash(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

func sortKeys(keys []Key) []Key {
	sort.Slice(keys, func(i, j int) bool { return keys[i].Name < keys[j].Name })
	return keys
}

// In Redis the keys live in two hashes of one Cluster slot ({keys}):
// by secret hash the key's JSON, and by name the secret hash.
const (
	keysByHash = "sg:{keys}:by-hash"
	keysByName = "sg:{keys}:by-name"
)

type redisKeys struct{ c redis.UniversalClient }

func (s *redisKeys) init(c redis.UniversalClient) { s.c = c }

var createKeyScript = redis.NewScript(`
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
return 1`)

func (s *redisKeys) CreateKey(ctx context.Context, k Key) error {
	b, err := json.Marshal(k)
	if err != nil {
		return err
	}
	n, err := createKeyScript.Run(ctx, s.c, []string{keysByHash, keysByName}, k.Name, k.Hash, b).Int()
	if err != nil {
		return unavailable(err)
	}
	if n == 0 {
		return fmt.Errorf("key %q: %w", k.Name, ErrExists)
	}
	return nil
}

func (s *redisKeys) LookupKey(ctx context.Context, hash string) (Key, error) {
	b, err := s.c.HGet(ctx, keysByHash, hash).Bytes()
	if errors.Is(err, redis.Nil) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, unavailable(err)
	}
	var k Key
	if err := json.Unmarshal(b, &k); err != nil {
		return Key{}, fmt.Errorf("stored key: %w", err)
	}
	if !sameHash(k.Hash, hash) {
		return Key{}, ErrNotFound
	}
	return k, nil
}

func (s *redisKeys) ListKeys(ctx context.Context) ([]Key, error) {
	all, err := s.c.HVals(ctx, keysByHash).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	keys := make([]Key, 0, len(all))
	for _, b := range all {
		var k Key
		if err := json.Unmarshal([]byte(b), &k); err != nil {
			return nil, fmt.Errorf("stored key: %w", err)
		}
		keys = append(keys, k)
	}
	return sortKeys(keys), nil
}

var revokeKeyScript = redis.NewScript(`
local h = redis.call('HGET', KEYS[2], ARGV[1])
if not h then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], h)
return 1`)

func (s *redisKeys) RevokeKey(ctx context.Context, name string) error {
	n, err := revokeKeyScript.Run(ctx, s.c, []string{keysByHash, keysByName}, name).Int()
	if err != nil {
		return unavailable(err)
	}
	if n == 0 {
		return fmt.Errorf("key %q: %w", name, ErrNotFound)
	}
	return nil
}

// memKeys holds keys in this process.
type memKeys struct {
	mu     sync.Mutex
	byHash map[string]Key
}

func (s *memKeys) init() { s.byHash = map[string]Key{} }

func (s *memKeys) CreateKey(_ context.Context, k Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.byHash {
		if o.Name == k.Name {
			return fmt.Errorf("key %q: %w", k.Name, ErrExists)
		}
	}
	k.Models = slices.Clone(k.Models)
	s.byHash[k.Hash] = k
	return nil
}

func (s *memKeys) LookupKey(_ context.Context, hash string) (Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.byHash[hash]
	if !ok || !sameHash(k.Hash, hash) {
		return Key{}, ErrNotFound
	}
	k.Models = slices.Clone(k.Models)
	return k, nil
}

func (s *memKeys) ListKeys(context.Context) ([]Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]Key, 0, len(s.byHash))
	for _, k := range s.byHash {
		k.Models = slices.Clone(k.Models)
		keys = append(keys, k)
	}
	return sortKeys(keys), nil
}

func (s *memKeys) RevokeKey(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, k := range s.byHash {
		if k.Name == name {
			delete(s.byHash, h)
			return nil
		}
	}
	return fmt.Errorf("key %q: %w", name, ErrNotFound)
}

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

// keysChanged is the pub/sub channel on which a key's change or
// revocation is announced, with the key's hash: every replica drops it
// from its cache.
const keysChanged = "sg:{keys}:changed"

// redisKeys keeps keys in Redis, and validated keys in a cache of this
// replica for cacheTTL, which the keysChanged subscription keeps honest.
type redisKeys struct {
	c        redis.UniversalClient
	cacheTTL time.Duration // 0: no cache

	mu       sync.Mutex
	cache    map[string]cachedKey // by hash
	gen      uint64               // bumped by every invalidation
	live     bool                 // subscribed: invalidations reach the cache
	replicas int                  // subscribers of keysChanged when last asked
	ps       *redis.PubSub        // the listener's subscription; nil: none started
	stop     chan struct{}        // closed to stop the listener
	stopped  chan struct{}
	closed   bool
	// notify, when set (tests), hears "subscribed" and "changed" after
	// the listener applied them.
	notify func(event string)
}

type cachedKey struct {
	k       Key
	expires time.Time
}

func (s *redisKeys) init(c redis.UniversalClient) {
	s.c, s.cacheTTL = c, DefaultKeyCacheTTL
	s.cache = map[string]cachedKey{}
}

// DefaultKeyCacheTTL is how long a replica trusts a key it validated
// (serve's --key-cache-ttl).
const DefaultKeyCacheTTL = time.Minute

// SetKeyCacheTTL sets how long this replica keeps a validated key
// (0: it asks Redis every time). While Redis is up, a revoked key stops
// working on every replica within about a second (pub/sub); while it is
// down, a cached key works until its entry expires. Call it before use.
func (r *Redis) SetKeyCacheTTL(ttl time.Duration) { r.redisKeys.cacheTTL = ttl }

// cached is the fresh cache entry for hash.
func (s *redisKeys) cached(hash string) (Key, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.cache[hash]
	if !ok || !time.Now().Before(e.expires) {
		delete(s.cache, hash)
		return Key{}, false
	}
	k := e.k
	k.Models = slices.Clone(k.Models)
	return k, true
}

// listen starts the subscription to keysChanged, once, and returns the
// generation of invalidations and whether they reach the cache now.
func (s *redisKeys) listen() (gen uint64, live bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ps == nil && !s.closed {
		s.ps = s.c.Subscribe(context.Background(), keysChanged)
		s.stop, s.stopped = make(chan struct{}), make(chan struct{})
		go s.listenLoop(s.ps, s.stop, s.stopped)
	}
	return s.gen, s.live
}

// keep caches k, unless an invalidation came since gen was read (k may
// be what was revoked) or none can come now.
func (s *redisKeys) keep(hash string, k Key, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live && s.gen == gen {
		k.Models = slices.Clone(k.Models)
		s.cache[hash] = cachedKey{k: k, expires: time.Now().Add(s.cacheTTL)}
	}
}

// invalidate drops hash ("": every key) from the cache.
func (s *redisKeys) invalidate(hash string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	if hash == "" {
		clear(s.cache)
	} else {
		delete(s.cache, hash)
	}
}

func (s *redisKeys) setLive(live bool) {
	s.mu.Lock()
	s.live = live
	s.mu.Unlock()
}

// listenQuiet is how long the listener waits for a message before it
// counts the replicas again.
const listenQuiet = 5 * time.Second

// listenLoop applies keysChanged's messages to the cache until stop is
// closed. Each (re)subscription empties the cache, since messages sent
// while it was away are lost; go-redis reconnects and resubscribes after
// a failure.
func (s *redisKeys) listenLoop(ps *redis.PubSub, stop, stopped chan struct{}) {
	defer close(stopped)
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), listenQuiet)
		select {
		case <-stop:
			return
		default:
		}
		var ne interface{ Timeout() bool }
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			s.countReplicas()
			continue
		case err != nil:
			s.setLive(false)
			t := time.NewTimer(backoff)
			select {
			case <-stop:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				s.invalidate("")
				s.setLive(true)
				s.countReplicas()
				s.tell("subscribed")
			}
		case *redis.Message:
			s.invalidate(m.Payload)
			s.tell("changed")
		}
	}
}

func (s *redisKeys) tell(event string) {
	if s.notify != nil {
		s.notify(event)
	}
}

// countReplicas asks Redis how many replicas listen to keysChanged.
func (s *redisKeys) countReplicas() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := s.c.PubSubNumSub(ctx, keysChanged).Result()
	if err != nil || n[keysChanged] < 1 {
		return
	}
	s.mu.Lock()
	s.replicas = int(n[keysChanged])
	s.mu.Unlock()
}

// replicaCount is the replicas last seen listening (at least 1).
func (s *redisKeys) replicaCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.replicas, 1)
}

// close stops the listener.
func (s *redisKeys) close() {
	s.mu.Lock()
	s.closed = true
	ps, stop, stopped := s.ps, s.stop, s.stopped
	s.mu.Unlock()
	if ps != nil {
		close(stop)
		ps.Close()
		<-stopped
	}
}

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

// LookupKey answers from this replica's cache when it can.
func (s *redisKeys) LookupKey(ctx context.Context, hash string) (Key, error) {
	if s.cacheTTL <= 0 {
		return s.lookup(ctx, hash)
	}
	if k, ok := s.cached(hash); ok {
		return k, nil
	}
	gen, _ := s.listen()
	k, err := s.lookup(ctx, hash)
	if err == nil {
		s.keep(hash, k, gen)
	}
	return k, err
}

func (s *redisKeys) lookup(ctx context.Context, hash string) (Key, error) {
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
redis.call('PUBLISH', ARGV[2], h)
return h`)

// RevokeKey deletes the key and announces it on keysChanged; this
// replica's cache forgets it at once, the others' when they hear it.
func (s *redisKeys) RevokeKey(ctx context.Context, name string) error {
	v, err := revokeKeyScript.Run(ctx, s.c, []string{keysByHash, keysByName}, name, keysChanged).Result()
	if err != nil {
		return unavailable(err)
	}
	hash, ok := v.(string)
	if !ok {
		return fmt.Errorf("key %q: %w", name, ErrNotFound)
	}
	s.invalidate(hash)
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

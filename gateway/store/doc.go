// Package store holds the state that gateway replicas share: resumable
// stream logs, API keys and per-key limits, stored responses, and (Redis
// only: Redis.PutSequence, an upstream.SequenceStore) the engine each open
// Triton sequence runs on.
//
// A Store has two implementations that pass one test suite: Redis (Open
// with a redis:// URL; one node, Sentinel or Cluster through go-redis's
// UniversalClient) and Memory, the in-process default for one replica.
// Every check-and-update is one atomic operation (a Lua script or a
// MULTI in Redis, one lock in Memory): there is no read-then-write race
// between replicas.
//
// Keys are prefixed "sg:" and hash-tagged by what they belong to (a
// stream's keys share the tag {sid}, a stored response's key is tagged
// {id}), so that one stream's keys live in one Cluster slot.
package store

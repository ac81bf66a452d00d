package upstream

import (
	"context"
	"sync"
	"testing"
	"time"
)

// mapSequences is a SequenceStore in this process's memory, shared by the
// clients of a test as Redis is by gateway replicas.
type mapSequences struct {
	mu sync.Mutex
	m  map[string]string
}

func (s *mapSequences) PutSequence(_ context.Context, key, addr string, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = addr
	return nil
}

func (s *mapSequences) SequenceTarget(_ context.Context, key string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key], nil
}

func targetDown(c *Client, addr string) bool {
	for _, t := range c.targetList() {
		if t.addr == addr {
			return t.down.Load()
		}
	}
	return false
}

// TestSequenceSharedAcrossClients: two clients (gateway replicas) share
// their sequence routes through a SequenceStore. Sequences whose requests
// alternate between the clients, START included on either, run every
// request on one engine (the accumulator's sum proves it); a sequence
// whose engine is gone is lost on the client that never saw it.
func TestSequenceSharedAcrossClients(t *testing.T) {
	a, b := startEngineWith(t, "", accSequence(t)), startEngineWith(t, "", accSequence(t))
	st := &mapSequences{m: map[string]string{}}
	opts := &Options{Sequences: st, HealthInterval: -1} // no check times out on a busy machine
	cs := []*Client{newTestClient(t, []string{a.addr, b.addr}, opts), newTestClient(t, []string{b.addr, a.addr}, opts)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const seqs, chunks = 8, 5
	perTarget := map[string]int{}
	for i := range seqs {
		id := int64(7000 + i)
		var first string
		var sum int64
		for j := range chunks {
			v := int32(10*i + j)
			sum += int64(v)
			if j == chunks-1 {
				sum += id
			}
			got, target, err := one(ctx, t, cs[(i+j)%2], seqChunk("acc_seq", id, j == 0, j == chunks-1, v))
			if err != nil {
				t.Fatalf("sequence %d request %d: %v", id, j, err)
			}
			if j == 0 {
				first = target
				perTarget[target]++
			}
			if target != first || got != sum {
				t.Fatalf("sequence %d request %d on client %d: target %s (START on %s), sum %d want %d", id, j, (i+j)%2, target, first, got, sum)
			}
		}
	}
	if perTarget[a.addr]+perTarget[b.addr] != seqs {
		t.Fatalf("sequences per target %v", perTarget)
	}

	// Started through client 0; its engine stops; a third client, which
	// checks its targets' health and has no route of its own, finds the
	// sequence lost.
	cs = append(cs, newTestClient(t, []string{a.addr, b.addr}, &Options{Sequences: st, HealthInterval: 50 * time.Millisecond}))
	_, target, err := one(ctx, t, cs[0], seqChunk("acc_seq", 9000, true, false, 1))
	if err != nil {
		t.Fatal(err)
	}
	dead, live := a, b
	if target == b.addr {
		dead, live = b, a
	}
	before := inferenceCount(t, live, "acc_seq")
	dead.stop()
	waitFor(t, "client 2 to see the engine down", func() bool { return targetDown(cs[2], dead.addr) })
	_, _, err = one(ctx, t, cs[2], seqChunk("acc_seq", 9000, false, false, 2))
	wantKind(t, err, KindSequenceLost)
	if inferenceCount(t, live, "acc_seq") != before {
		t.Fatal("a request of the lost sequence reached the other engine")
	}
}

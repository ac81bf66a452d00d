package kernels

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
)

// TestPoolWaitsForSlowHelper runs loops in which a helper's chunk does not
// end until the caller of Run has stopped spinning and blocked: Run must
// still return only after every chunk, with each chunk run once, loop
// after loop (a stale wake-up of an earlier loop must not end a later
// one early).
func TestPoolWaitsForSlowHelper(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	for round := range 50 {
		var started, ended atomic.Int32
		hits := make([]atomic.Int32, 2)
		release := make(chan struct{})
		watcher := make(chan struct{})
		go func() {
			defer close(watcher)
			for !p.waiting.Load() {
				runtime.Gosched()
			}
			close(release)
		}()
		p.Run(2, func(chunk, worker int) {
			hits[chunk].Add(1)
			started.Add(1)
			if worker == 0 {
				// Hold the caller until a helper has claimed the other
				// chunk, so that the caller has to wait for it.
				for started.Load() < 2 {
					runtime.Gosched()
				}
			} else {
				<-release
			}
			ended.Add(1)
		})
		<-watcher
		if ended.Load() != 2 || hits[0].Load() != 1 || hits[1].Load() != 1 {
			t.Fatalf("round %d: Run returned after %d of 2 chunks ended (runs per chunk %d, %d)", round, ended.Load(), hits[0].Load(), hits[1].Load())
		}
	}
}

// TestPoolRunAllocatesNothing: a parallel loop on a pool with helpers
// allocates nothing.
func TestPoolRunAllocatesNothing(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	var sum atomic.Int64
	fn := func(chunk, _ int) { sum.Add(int64(chunk)) }
	allocs := testing.AllocsPerRun(200, func() { p.Run(4, fn) })
	if allocs != 0 {
		t.Fatalf("Run allocates %v times per loop", allocs)
	}
	if want := int64(201 * 6); sum.Load() != want {
		t.Fatalf("chunk sum %d, want %d", sum.Load(), want)
	}
}

// TestSwiGLUSplit: a SwiGLU call long enough to be split across workers
// gives the serial result bit for bit, and every element is computed.
func TestSwiGLUSplit(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, workers := range []int{1, 2, 3} {
		pool := NewPool(workers)
		k := NewCPU(pool)
		for _, n := range []int{minSwiGLU - 1, 2*minSwiGLU + 3, 64*896 + 7} {
			h, g := randVec(r, n), randVec(r, n)
			want := slices.Clone(h)
			swiglu(want, g)
			k.SwiGLU(h, g)
			for i := range h {
				if math.Float32bits(h[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d workers, %d elements: [%d] = %v, serial %v", workers, n, i, h[i], want[i])
				}
			}
		}
		pool.Close()
	}
}

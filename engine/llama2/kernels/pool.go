package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of worker goroutines that run the chunks of one
// parallel loop at a time. The goroutine calling Run takes part in the work,
// so a Pool of n workers starts n-1 goroutines.
//
// Workers spin briefly after each loop so that the next one, which in a
// forward pass follows within microseconds, starts without a wake-up; then
// they park. The caller of Run, once no chunk is left to claim, spins
// briefly for the chunks still running elsewhere and then blocks until the
// last one ends, so a helper that the OS has descheduled on a busy machine
// does not cost a core of spinning. Run allocates nothing, must not be
// called concurrently, and Close stops the workers and waits for them.
type Pool struct {
	helpers []*helper
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool
	spin    time.Duration

	// The current loop. claim packs its generation, its chunk count and
	// the next unclaimed chunk (see pack), so that a helper claims a chunk
	// only of the loop it read, in one compare-and-swap. fn is written
	// before the loop is published in claim and read only by a worker
	// that has claimed one of its chunks.
	claim    atomic.Uint64
	fn       func(chunk, worker int)
	done     atomic.Int64 // chunks of the current loop that have returned
	waiting  atomic.Bool  // the caller is blocked on finished
	finished chan struct{}
}

type helper struct {
	parked atomic.Bool
	wake   chan struct{}
}

// A claim word holds a loop's generation (high 16 bits), its number of
// chunks (24 bits) and the next chunk to claim (low 24 bits). A generation
// that wraps around is harmless: a worker claims a chunk only by a
// compare-and-swap on the word of the loop now running.
const (
	chunkBits = 24
	chunkMask = 1<<chunkBits - 1
	maxChunks = chunkMask
)

func pack(gen uint16, n, next int) uint64 {
	return uint64(gen)<<(2*chunkBits) | uint64(n)<<chunkBits | uint64(next)
}

func unpack(v uint64) (gen uint16, n, next int) {
	return uint16(v >> (2 * chunkBits)), int(v>>chunkBits) & chunkMask, int(v) & chunkMask
}

// NewPool starts a pool of workers goroutines in all (workers-1 helpers).
// workers <= 0 means runtime.GOMAXPROCS(0).
func NewPool(workers int) *Pool {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p := &Pool{stop: make(chan struct{}), spin: 50 * time.Microsecond, finished: make(chan struct{}, 1)}
	for i := 1; i < workers; i++ {
		h := &helper{wake: make(chan struct{}, 1)}
		p.helpers = append(p.helpers, h)
		p.wg.Add(1)
		go p.work(h, i)
	}
	return p
}

// Workers returns the number of goroutines that run chunks, the caller of
// Run included.
func (p *Pool) Workers() int { return len(p.helpers) + 1 }

// Run calls fn(chunk, worker) for every chunk in [0, n) and returns when all
// calls have returned. worker is in [0, Workers()) and no two concurrent
// calls share it, so fn may use per-worker scratch space.
func (p *Pool) Run(n int, fn func(chunk, worker int)) {
	if n <= 0 {
		return
	}
	if n == 1 || n > maxChunks || len(p.helpers) == 0 || p.closed.Load() {
		for c := 0; c < n; c++ {
			fn(c, 0)
		}
		return
	}
	gen, _, _ := unpack(p.claim.Load())
	p.fn = fn
	p.done.Store(0)
	p.claim.Store(pack(gen+1, n, 0)) // publishes the loop
	for i, h := range p.helpers {
		if i+1 >= n {
			break
		}
		if h.parked.Load() {
			select {
			case h.wake <- struct{}{}:
			default:
			}
		}
	}
	p.runChunks(gen+1, 0)
	p.wait(int64(n))
	p.fn = nil
}

// wait returns once n chunks of the current loop have returned: it spins
// for up to the pool's spin time, then blocks until the worker ending the
// last chunk signals.
func (p *Pool) wait(n int64) {
	var deadline time.Time
	for spins := 0; p.done.Load() < n; spins++ {
		if spins&63 != 63 {
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(p.spin)
		} else if time.Now().After(deadline) {
			p.block(n)
			return
		}
		runtime.Gosched()
	}
}

// block sleeps until n chunks have returned.
func (p *Pool) block(n int64) {
	p.waiting.Store(true)
	for p.done.Load() < n {
		<-p.finished // a stale signal of an earlier loop only costs a re-check
	}
	p.waiting.Store(false)
}

// runChunks claims and runs chunks of loop gen until none are left, and
// reports whether it ran any.
func (p *Pool) runChunks(gen uint16, worker int) bool {
	ran := false
	for {
		v := p.claim.Load()
		g, n, next := unpack(v)
		if g != gen || next >= n {
			return ran
		}
		if !p.claim.CompareAndSwap(v, v+1) {
			continue
		}
		ran = true
		p.fn(next, worker)
		if p.done.Add(1) == int64(n) && p.waiting.Load() {
			select {
			case p.finished <- struct{}{}:
			default:
			}
		}
	}
}

func (p *Pool) work(h *helper, worker int) {
	defer p.wg.Done()
	var last uint16 // the generation before the first loop, which Run may publish before this goroutine starts
	for {
		// Spin for new work, then park.
		deadline := time.Now().Add(p.spin)
		for spins := 0; ; spins++ {
			if g, _, _ := unpack(p.claim.Load()); g != last {
				last = g
				p.runChunks(g, worker)
				deadline = time.Now().Add(p.spin)
				continue
			}
			if spins&63 == 63 {
				if time.Now().After(deadline) {
					break
				}
				runtime.Gosched()
			}
		}
		h.parked.Store(true)
		// Re-check after announcing that we park, so a loop published in
		// between is not missed.
		if g, _, _ := unpack(p.claim.Load()); g != last {
			h.parked.Store(false)
			continue
		}
		select {
		case <-h.wake:
			h.parked.Store(false)
		case <-p.stop:
			return
		}
	}
}

// Close stops the helpers and waits for them to exit. Run still works
// afterwards, on the calling goroutine only.
func (p *Pool) Close() {
	if p.closed.Swap(true) {
		return
	}
	close(p.stop)
	p.wg.Wait()
}

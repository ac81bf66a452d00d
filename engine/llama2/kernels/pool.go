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
// they park. Run must not be called concurrently. Close stops the workers
// and waits for them.
type Pool struct {
	helpers []*helper
	job     atomic.Pointer[job]
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool
	spin    time.Duration
}

type helper struct {
	parked atomic.Bool
	wake   chan struct{}
}

// job is one parallel loop. A helper that arrives late finds next >= n and
// returns, so the caller only waits for chunks that were claimed.
type job struct {
	fn   func(chunk, worker int)
	n    int64
	next atomic.Int64
	done atomic.Int64
}

// NewPool starts a pool of workers goroutines in all (workers-1 helpers).
// workers <= 0 means runtime.GOMAXPROCS(0).
func NewPool(workers int) *Pool {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p := &Pool{stop: make(chan struct{}), spin: 50 * time.Microsecond}
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
	if n == 1 || len(p.helpers) == 0 || p.closed.Load() {
		for c := 0; c < n; c++ {
			fn(c, 0)
		}
		return
	}
	j := &job{fn: fn, n: int64(n)}
	p.job.Store(j)
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
	j.run(0)
	for spins := 0; j.done.Load() < j.n; spins++ {
		if spins > 64 {
			runtime.Gosched()
		}
	}
	p.job.CompareAndSwap(j, nil)
}

// run claims and runs chunks until none are left.
func (j *job) run(worker int) {
	for {
		c := j.next.Add(1) - 1
		if c >= j.n {
			return
		}
		j.fn(int(c), worker)
		j.done.Add(1)
	}
}

func (p *Pool) work(h *helper, worker int) {
	defer p.wg.Done()
	var last *job
	for {
		// Spin for new work, then park.
		deadline := time.Now().Add(p.spin)
		for spins := 0; ; spins++ {
			if j := p.job.Load(); j != nil && j != last {
				last = j
				j.run(worker)
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
		// Re-check after announcing that we park, so a job published in
		// between is not missed.
		if j := p.job.Load(); j != nil && j != last {
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

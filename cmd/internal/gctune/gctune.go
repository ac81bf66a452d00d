// Package gctune keeps a server's garbage collector from running too
// often while its live heap is small.
//
// Go's collector starts a cycle when the heap has grown by GOGC percent
// (100 by default) over what the last cycle left live. A gateway relaying
// at full speed keeps little alive (tens of MB) while it allocates
// steadily (gRPC's receive path), so it collected dozens of times a
// second and spent about a fifth of its CPU marking. MinHeap gives the
// collector a floor instead: while the live heap is small, the heap may
// grow to the floor before a cycle starts; once the live heap passes half
// the floor, GOGC applies unchanged. The cost is at most the floor in
// memory that a collection would have returned sooner.
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultMinHeap is the floor a server uses unless told otherwise: enough
// that a relay at full speed collects a few times a second, not dozens.
const DefaultMinHeap = 64 << 20

// runtimeMinHeap is the runtime's own floor at GOGC=100: it scales
// with GOGC, so the heap goal is never under runtimeMinHeap*GOGC/100.
const runtimeMinHeap = 4 << 20

// Percent is the GOGC value that lets a heap with live bytes left by the
// last cycle, scanned stacks and globals roots, grow to minHeap
// before the next cycle, and never less than base. The runtime's goal is
// live + (live + roots) * GOGC/100, and at least its own floor, which
// grows with GOGC: Percent stays where that floor is at most minHeap
// (before the first collection nothing is live, and an unbounded GOGC
// would let the heap grow to gigabytes).
func Percent(live, roots, minHeap uint64, base int) int {
	if base <= 0 || live >= minHeap {
		return base
	}
	p := uint64(minHeap * 100 / runtimeMinHeap)
	if live+roots > 0 {
		p = min(p, (minHeap-live)*100/(live+roots))
	}
	return max(int(p), base)
}

// Tuner re-sets GOGC after every collection (Start).
type Tuner struct {
	minHeap uint64
	base    int

	mu      sync.Mutex
	stopped bool
	last    int
	samples []metrics.Sample
}

// Start keeps the heap goal at minHeap or above from the next collection
// on, with GOGC as base (the GOGC the process started with: its
// environment variable, else 100). A base of off (GOGC=off) or a minHeap
// of 0 leaves the collector alone. Stop restores base.
func Start(minHeap uint64) *Tuner {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	t := &Tuner{minHeap: minHeap, base: base, last: base, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}}
	if minHeap == 0 || base < 0 {
		t.stopped = true
		return t
	}
	t.tune()
	t.arm()
	return t
}

// arm makes tune run after the next collection: a cleanup runs once the
// collector has found its object unreachable.
func (t *Tuner) arm() {
	sentinel := new([16]byte) // not tiny-allocated: tiny objects share blocks
	runtime.AddCleanup(sentinel, func(t *Tuner) {
		if t.tune() {
			t.arm()
		}
	}, t)
}

// tune sets GOGC for the live heap the last collection left; false once
// stopped.
func (t *Tuner) tune() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.samples)
	live, stack, globals := t.samples[0].Value.Uint64(), t.samples[1].Value.Uint64(), t.samples[2].Value.Uint64()
	p := Percent(live, stack+globals, t.minHeap, t.base)
	// A change of under a tenth is not worth the runtime's recomputing.
	if d := p - t.last; d > t.last/10 || -d > t.last/10 {
		debug.SetGCPercent(p)
		t.last = p
	}
	return true
}

// Stop restores the GOGC the process started with.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		debug.SetGCPercent(t.base)
	}
}

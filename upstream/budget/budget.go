// Package budget is a byte budget that many queues draw on at once: the
// gateway's memory for responses waiting for slow clients (upstream's
// per-request queues and the WebSocket sessions' send queues share one).
//
// Start with New; queues call Take before they grow and Give when they
// shrink. A nil *Budget is unlimited.
//
// Budget is a leaf: it imports the standard library only, so any package
// may draw on it. It lives under upstream because upstream is the lowest
// layer that draws on it (its per-request queues) and the layers above
// already import upstream: gateway/ws and gateway/resume take from the
// budget that cmd (stack) or gateway.New creates and hands to
// upstream.Options.Memory. Under gateway it would make upstream import
// the gateway; engine and proto do not know about clients; cmd/internal
// cannot be imported by either. TestLeaf keeps it a leaf.
package budget

import (
	"fmt"
	"sync/atomic"
)

// Budget counts bytes in use against a limit. Its methods are safe for
// concurrent use and never block.
type Budget struct {
	limit int64
	used  atomic.Int64
	peak  atomic.Int64
}

// New returns a budget of limit bytes (at least 1).
func New(limit int64) *Budget {
	return &Budget{limit: max(limit, 1)}
}

// Take reserves n bytes; false, reserving nothing, when that would exceed
// the limit.
func (b *Budget) Take(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			if u+n > b.peak.Load() {
				b.notePeak(u + n)
			}
			return true
		}
	}
}

func (b *Budget) notePeak(v int64) {
	for {
		p := b.peak.Load()
		if v <= p || b.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

// Give returns n bytes taken earlier.
func (b *Budget) Give(n int64) {
	if b == nil || n <= 0 {
		return
	}
	if b.used.Add(-n) < 0 {
		panic(fmt.Sprintf("budget: gave back more than was taken (%d)", n))
	}
}

// Used is how many bytes are reserved now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Peak is the most bytes ever reserved at once.
func (b *Budget) Peak() int64 {
	if b == nil {
		return 0
	}
	return b.peak.Load()
}

// Limit is the budget's size; 0 for a nil (unlimited) budget.
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

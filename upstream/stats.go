package upstream

import "sync/atomic"

// counters are the Client's monotonic counters.
type counters struct {
	started      atomic.Uint64
	retries      atomic.Uint64
	breaks       atomic.Uint64
	cancelInband atomic.Uint64
	cancelStream atomic.Uint64
	cancelNone   atomic.Uint64
	behind       atomic.Uint64
	stalled      atomic.Uint64
	overBudget   atomic.Uint64
	dropped      atomic.Uint64
	idleTimeouts atomic.Uint64
}

// Stats is a snapshot of a Client for metrics: gauges (in flight, streams)
// and counters since New.
type Stats struct {
	Targets []TargetStats
	// InFlight is the number of requests placed on streams, all targets.
	InFlight int
	// StreamsOpen counts pooled and dedicated streams, all targets.
	StreamsOpen int

	Started        uint64 // requests placed by Start
	Retries        uint64 // requests re-sent after their stream broke
	StreamBreaks   uint64 // streams that ended with an error
	CancelsInband  uint64 // requests cancelled with an in-band message
	CancelsStream  uint64 // requests cancelled by cancelling their stream
	CancelsNone    uint64 // requests dropped without telling the target
	QueueOverflows uint64 // requests failed for their consumer: Stalled + OverBudget
	Behind         uint64 // requests whose queue borrowed from Options.Memory (their client fell QueueBytes behind)
	Stalled        uint64 // requests failed with KindTooSlow
	OverBudget     uint64 // requests failed with KindBudget
	Dropped        uint64 // responses for requests no longer waited for
	IdleTimeouts   uint64 // requests ended with KindIdleTimeout
	// MemoryUsed is what queues borrow from Options.Memory now (with
	// whatever else shares it), MemoryPeak the most ever, MemoryLimit its
	// size.
	MemoryUsed, MemoryPeak, MemoryLimit int64
}

// TargetStats describes one target.
type TargetStats struct {
	Addr    string
	Healthy bool
	// Checked: a health check has run (answered or not); until then a
	// target ranks below those checked healthy.
	Checked bool
	// Down: its health checks get no answer; requests are refused at once.
	Down bool
	// InbandCancel: the target advertised streamgate_cancel (as cached).
	InbandCancel bool
	InFlight     int
	Streams      []StreamStats
}

// StreamStats describes one stream.
type StreamStats struct {
	ID        uint64
	Dedicated bool
	InFlight  int
}

// Stats returns a snapshot. It is cheap enough for a metrics scrape.
func (c *Client) Stats() Stats {
	s := Stats{
		Started:       c.ctr.started.Load(),
		Retries:       c.ctr.retries.Load(),
		StreamBreaks:  c.ctr.breaks.Load(),
		CancelsInband: c.ctr.cancelInband.Load(),
		CancelsStream: c.ctr.cancelStream.Load(),
		CancelsNone:   c.ctr.cancelNone.Load(),
		Behind:        c.ctr.behind.Load(),
		Stalled:       c.ctr.stalled.Load(),
		OverBudget:    c.ctr.overBudget.Load(),
		Dropped:       c.ctr.dropped.Load(),
		IdleTimeouts:  c.ctr.idleTimeouts.Load(),
		MemoryUsed:    c.lim.bud.Used(),
		MemoryPeak:    c.lim.bud.Peak(),
		MemoryLimit:   c.lim.bud.Limit(),
	}
	s.QueueOverflows = s.Stalled + s.OverBudget
	for _, t := range c.targetList() {
		ts := TargetStats{
			Addr:         t.addr,
			Healthy:      t.healthy.Load(),
			Checked:      t.checked.Load(),
			Down:         t.down.Load(),
			InbandCancel: t.cancelModeCached() == CancelInband,
			InFlight:     int(t.outstanding.Load()),
		}
		t.mu.Lock()
		for _, st := range t.streams {
			ts.Streams = append(ts.Streams, StreamStats{ID: st.id, InFlight: int(st.load.Load())})
		}
		for st := range t.dedicated {
			ts.Streams = append(ts.Streams, StreamStats{ID: st.id, Dedicated: true, InFlight: int(st.load.Load())})
		}
		t.mu.Unlock()
		s.InFlight += ts.InFlight
		s.StreamsOpen += len(ts.Streams)
		s.Targets = append(s.Targets, ts)
	}
	return s
}

package bench

import (
	"math"
	"runtime/metrics"
	"slices"
)

// GCStats is what the server's garbage collector did in a run's window:
// from the spawned server's gctrace lines (--spawn), or from this
// process's runtime/metrics (--embedded: server and load generator
// together).
type GCStats struct {
	Source string `json:"source"` // "gctrace" or "runtime/metrics"
	Cycles int    `json:"cycles"`
	// Pauses are the stop-the-world pauses (two per cycle), in ms.
	Pauses Dist `json:"pauses"`
	// CPUSeconds is the CPU the collector used marking (assists and
	// background workers; idle-time marking and the pauses excluded), and
	// CPUShare that as a fraction of the server's CPU in the window. Both
	// are the runtime's own account, which measures its workers by wall
	// time: on a machine busy with other work, where they wait for a CPU,
	// it overstates them (the share can pass 100%); a CPU profile is the
	// figure to trust there.
	CPUSeconds float64 `json:"cpu_s"`
	CPUShare   float64 `json:"cpu_share"`
	// LiveMB and StacksMB are what the window's last collection found in
	// use (gctrace only, in whole MB): the heap it marked live and the
	// goroutine stacks it scanned. Unlike RSS they leave out the garbage
	// the heap holds until the next collection, which the GC's pacing
	// (GOGC, --gc-min-heap) sizes: their growth per stream is what a
	// stream itself keeps.
	LiveMB   float64 `json:"live_mb,omitempty"`
	StacksMB float64 `json:"stacks_mb,omitempty"`

	pauses []int64 // gctrace: the samples, to merge processes
}

// livePerStreamKB is the live heap and stacks of the window's last
// collection over n streams; 0 without one (or without gctrace).
func (g *GCStats) livePerStreamKB(n int64) float64 {
	if g == nil || n <= 0 {
		return 0
	}
	return (g.LiveMB + g.StacksMB) * 1024 / float64(n)
}

func (g *GCStats) setPauses(d Dist) { g.Pauses = d }

// merge adds o (another process's figures) to g; live heap and stacks
// are the sum of each process's last collection.
func (g *GCStats) merge(o *GCStats) {
	g.Cycles += o.Cycles
	g.CPUSeconds += o.CPUSeconds
	g.LiveMB += o.LiveMB
	g.StacksMB += o.StacksMB
	g.pauses = append(g.pauses, o.pauses...)
	g.setPauses(summarize(slices.Clone(g.pauses)))
}

// gcMetrics samples this process's runtime/metrics for --embedded runs.
type gcMetrics struct {
	samples []metrics.Sample
}

const (
	mCycles = "/gc/cycles/total:gc-cycles"
	mPauses = "/sched/pauses/total/gc:seconds"
	mAssist = "/cpu/classes/gc/mark/assist:cpu-seconds"
	mMark   = "/cpu/classes/gc/mark/dedicated:cpu-seconds"
)

func readGCMetrics() *gcMetrics {
	s := []metrics.Sample{{Name: mCycles}, {Name: mPauses}, {Name: mAssist}, {Name: mMark}}
	metrics.Read(s)
	return &gcMetrics{samples: s}
}

// since returns the GC figures between m0 and m (m read later).
func (m *gcMetrics) since(m0 *gcMetrics) *GCStats {
	st := &GCStats{Source: "runtime/metrics"}
	val := func(g *gcMetrics, i int) metrics.Value { return g.samples[i].Value }
	if val(m, 0).Kind() == metrics.KindUint64 {
		st.Cycles = int(val(m, 0).Uint64() - val(m0, 0).Uint64())
	}
	if val(m, 2).Kind() == metrics.KindFloat64 && val(m, 3).Kind() == metrics.KindFloat64 {
		st.CPUSeconds = (val(m, 2).Float64() - val(m0, 2).Float64()) + (val(m, 3).Float64() - val(m0, 3).Float64())
	}
	if val(m, 1).Kind() == metrics.KindFloat64Histogram {
		st.setPauses(histDelta(val(m0, 1).Float64Histogram(), val(m, 1).Float64Histogram()))
	}
	return st
}

// histDelta summarises the samples added to a runtime/metrics histogram
// between h0 and h: each sample is taken as its bucket's upper bound (the
// lower for the last, unbounded bucket).
func histDelta(h0, h *metrics.Float64Histogram) Dist {
	var ns []int64
	for i, c := range h.Counts {
		n := c - h0.Counts[i]
		v := h.Buckets[i+1]
		if math.IsInf(v, 1) {
			v = h.Buckets[i]
		}
		for range min(n, 1<<20) {
			ns = append(ns, int64(v*1e9))
		}
	}
	return summarize(ns)
}

package bench

import (
	"math"
	"slices"
	"time"
)

// Dist summarises a set of latency samples. Percentiles are exact (the
// samples are sorted; nearest-rank definition), in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// summarize sorts ns (nanoseconds) in place and returns its Dist. An empty
// set gives the zero Dist.
func summarize(ns []int64) Dist {
	if len(ns) == 0 {
		return Dist{}
	}
	slices.Sort(ns)
	var sum float64
	for _, v := range ns {
		sum += float64(v)
	}
	return Dist{
		N:    len(ns),
		P50:  ms(percentile(ns, 50)),
		P90:  ms(percentile(ns, 90)),
		P99:  ms(percentile(ns, 99)),
		Max:  ms(ns[len(ns)-1]),
		Mean: sum / float64(len(ns)) / 1e6,
	}
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest sample such that at least p% of the samples are at
// most it. An empty slice gives 0.
func percentile(sorted []int64, p float64) int64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

func ms(ns int64) float64 { return float64(ns) / float64(time.Millisecond) }

// Ratios compare one transport's run with the direct gRPC baseline of the
// same model and request mix.
type Ratios struct {
	// Baseline names the run compared against.
	Baseline string `json:"baseline"`
	// Throughput is responses/s of this run divided by the baseline's.
	Throughput float64 `json:"throughput_ratio"`
	// AddedTTFT* and AddedInter* are this run's percentile minus the
	// baseline's, in milliseconds (negative: faster than the baseline);
	// absent when either run has no samples.
	AddedTTFTP50  *float64 `json:"added_ttft_p50_ms,omitempty"`
	AddedTTFTP99  *float64 `json:"added_ttft_p99_ms,omitempty"`
	AddedInterP50 *float64 `json:"added_inter_p50_ms,omitempty"`
	AddedInterP99 *float64 `json:"added_inter_p99_ms,omitempty"`
	// CPUPerResponse is server CPU (process CPU in --embedded mode) per
	// response, in microseconds, for this run and the baseline; Added is
	// the difference: what relaying one response costs. Absent when no
	// CPU figure is known.
	CPUPerResponse         *float64 `json:"cpu_us_per_response,omitempty"`
	BaselineCPUPerResponse *float64 `json:"baseline_cpu_us_per_response,omitempty"`
	AddedCPUPerResponse    *float64 `json:"added_cpu_us_per_response,omitempty"`
}

// compare computes r's ratios against base.
func compare(r, base *Result) *Ratios {
	diff := func(a, b Dist, pa, pb float64) *float64 {
		if a.N == 0 || b.N == 0 {
			return nil
		}
		d := pa - pb
		return &d
	}
	rt := &Ratios{
		Baseline:      base.Transport + "/" + base.Model,
		AddedTTFTP50:  diff(r.TTFT, base.TTFT, r.TTFT.P50, base.TTFT.P50),
		AddedTTFTP99:  diff(r.TTFT, base.TTFT, r.TTFT.P99, base.TTFT.P99),
		AddedInterP50: diff(r.Inter, base.Inter, r.Inter.P50, base.Inter.P50),
		AddedInterP99: diff(r.Inter, base.Inter, r.Inter.P99, base.Inter.P99),
	}
	if base.RespPerSec > 0 {
		rt.Throughput = r.RespPerSec / base.RespPerSec
	}
	a, b := r.cpuPerResponse(), base.cpuPerResponse()
	rt.CPUPerResponse, rt.BaselineCPUPerResponse = a, b
	if a != nil && b != nil {
		d := *a - *b
		rt.AddedCPUPerResponse = &d
	}
	return rt
}

// cpuPerResponse is the server's CPU per response in microseconds: the
// server process's CPU, or the whole process's in embedded mode (server and
// load generator together). Nil when unknown or nothing was received.
func (r *Result) cpuPerResponse() *float64 {
	if r.Responses == 0 {
		return nil
	}
	var cpu float64
	switch {
	case r.ServerCPU != nil:
		cpu = *r.ServerCPU
	case r.Embedded:
		cpu = r.ClientCPU
	default:
		return nil
	}
	v := cpu / float64(r.Responses) * 1e6
	return &v
}

package bench

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		sorted []int64
		p      float64
		want   int64
	}{
		{nil, 50, 0},
		{[]int64{7}, 50, 7},
		{[]int64{7}, 99, 7},
		{[]int64{1, 2}, 50, 1},
		{[]int64{1, 2}, 51, 2},
		{[]int64{1, 2, 3, 4}, 50, 2},
		{[]int64{1, 2, 3, 4}, 75, 3},
		{[]int64{1, 2, 3, 4}, 100, 4},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.1, 1},
	}
	for _, tt := range tests {
		if got := percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("percentile(%v, %v) = %d, want %d", tt.sorted, tt.p, got, tt.want)
		}
	}
	// 1..1000: p99 is the 990th value.
	s := make([]int64, 1000)
	for i := range s {
		s[i] = int64(i + 1)
	}
	if got := percentile(s, 99); got != 990 {
		t.Errorf("p99 of 1..1000 = %d, want 990", got)
	}
}

func TestSummarize(t *testing.T) {
	ms := int64(time.Millisecond)
	d := summarize([]int64{5 * ms, 1 * ms, 3 * ms, 2 * ms, 4 * ms})
	want := Dist{N: 5, P50: 3, P90: 5, P99: 5, Max: 5, Mean: 3}
	if d != want {
		t.Errorf("summarize = %+v, want %+v", d, want)
	}
	if (summarize(nil) != Dist{}) {
		t.Error("summarize(nil) is not the zero Dist")
	}
}

func ptr(v float64) *float64 { return &v }

func TestCompare(t *testing.T) {
	base := &Result{Transport: "direct", Model: "repeat_int32", RespPerSec: 1000, Responses: 10000,
		TTFT: Dist{N: 10, P50: 1, P99: 2}, Inter: Dist{N: 10, P50: 50, P99: 51}, ServerCPU: ptr(0.5)}
	r := &Result{Transport: "sse", Model: "repeat_int32", RespPerSec: 900, Responses: 9000,
		TTFT: Dist{N: 9, P50: 1.25, P99: 3}, Inter: Dist{N: 9, P50: 50.1, P99: 51.5}, ServerCPU: ptr(0.9)}
	rt := compare(r, base)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("throughput", rt.Throughput, 0.9)
	near("added ttft p50", *rt.AddedTTFTP50, 0.25)
	near("added ttft p99", *rt.AddedTTFTP99, 1)
	near("added inter p50", *rt.AddedInterP50, 0.1)
	near("added inter p99", *rt.AddedInterP99, 0.5)
	near("cpu/resp", *rt.CPUPerResponse, 100)                 // 0.9 s / 9000
	near("baseline cpu/resp", *rt.BaselineCPUPerResponse, 50) // 0.5 s / 10000
	near("added cpu/resp", *rt.AddedCPUPerResponse, 50)
	if rt.Baseline != "direct/repeat_int32" {
		t.Errorf("baseline = %q", rt.Baseline)
	}

	// No server CPU known (remote target): no CPU figures; embedded: the
	// process CPU stands in.
	r.ServerCPU, base.ServerCPU = nil, nil
	if rt := compare(r, base); rt.CPUPerResponse != nil || rt.AddedCPUPerResponse != nil {
		t.Error("CPU figures without a server CPU")
	}
	r.Embedded, base.Embedded = true, true
	r.ClientCPU, base.ClientCPU = 1.8, 1
	rt = compare(r, base)
	near("embedded added cpu/resp", *rt.AddedCPUPerResponse, 100)
	// A baseline that received nothing gives no ratios.
	base.RespPerSec, base.Responses, base.TTFT, base.Inter = 0, 0, Dist{}, Dist{}
	if rt := compare(r, base); rt.Throughput != 0 || rt.BaselineCPUPerResponse != nil || rt.AddedTTFTP99 != nil || rt.AddedInterP50 != nil {
		t.Errorf("ratios against an empty baseline: %+v", rt)
	}
}

func TestStreamWindow(t *testing.T) {
	now := time.Now()
	rec := newRecorder(window{from: now.Add(-time.Hour), to: now.Add(time.Hour)})
	s := stream{rec: rec, cancelAt: 3}
	s.begin()
	for i := range 3 {
		leave := s.response()
		if leave != (i == 2) {
			t.Fatalf("response %d: leave = %v", i, leave)
		}
	}
	if rec.responses != 3 || len(rec.ttft) != 1 || len(rec.gaps) != 2 || s.left.IsZero() {
		t.Errorf("recorded %d responses, %d ttft, %d gaps, left %v", rec.responses, len(rec.ttft), len(rec.gaps), s.left)
	}
	// Before the window: nothing counts.
	late := newRecorder(window{from: now.Add(time.Hour), to: now.Add(2 * time.Hour)})
	s = stream{rec: late}
	s.begin()
	s.response()
	s.response()
	if late.responses != 0 || len(late.ttft) != 0 || len(late.gaps) != 0 {
		t.Errorf("warmup counted: %+v", late)
	}
}

func TestKindOf(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{errKindf("http_503", "busy"), "http_503"},
		{errKind("connect", errClientCancel), "connect"},
		{errClientCancel, "other"},
	}
	for _, tt := range tests {
		if got := kindOf(tt.err); got != tt.want {
			t.Errorf("kindOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// Memory's growth per added stream between runs at two stream counts:
// what each process holds whatever its streams drops out.
func TestMemSlopes(t *testing.T) {
	gc := func(live, stacks float64) *GCStats { return &GCStats{LiveMB: live, StacksMB: stacks} }
	rs := []*Result{
		{Transport: "sse", Workload: "w", Concurrency: 1000, StreamsAtFull: 1000, RSSAtFullMB: 190, GC: gc(16, 2),
			GatewayRSSAtFullMB: 97, GatewayGC: gc(11, 1)},
		{Transport: "ws", Workload: "w", Concurrency: 1000, StreamsAtFull: 1000, RSSAtFullMB: 180},
		{Transport: "sse", Workload: "w", Concurrency: 4000, StreamsAtFull: 4000, RSSAtFullMB: 262.5, GC: gc(60, 11),
			GatewayRSSAtFullMB: 157, GatewayGC: gc(44, 5)},
		{Transport: "sse", Workload: "other", Concurrency: 4000, StreamsAtFull: 4000, RSSAtFullMB: 1000},
	}
	memSlopes(rs, 1000, 4000)
	m := rs[0].MemSlope
	if m == nil {
		t.Fatal("no slope for sse")
	}
	want := MemSlope{From: 1000, To: 4000, RSSKB: 72.5 * 1024 / 3000, LiveKB: 53 * 1024 / 3000.0,
		GatewayRSSKB: 60 * 1024 / 3000.0, GatewayLiveKB: 37 * 1024 / 3000.0}
	if math.Abs(m.RSSKB-want.RSSKB) > 1e-9 || math.Abs(m.LiveKB-want.LiveKB) > 1e-9 ||
		math.Abs(m.GatewayRSSKB-want.GatewayRSSKB) > 1e-9 || math.Abs(m.GatewayLiveKB-want.GatewayLiveKB) > 1e-9 ||
		m.From != want.From || m.To != want.To {
		t.Errorf("slope %+v, want %+v", *m, want)
	}
	// No twin at the second count (ws), or the run at it: no slope.
	for _, r := range rs[1:] {
		if r.MemSlope != nil {
			t.Errorf("%s/%s at %d: slope %+v", r.Transport, r.Workload, r.Concurrency, *r.MemSlope)
		}
	}
}

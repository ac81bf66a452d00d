package bench

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/streamgate/streamgate/cmd/internal/procstat"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Result is the figures of one transport's run over its measurement
// window.
type Result struct {
	Transport   string  `json:"transport"`
	Model       string  `json:"model"`
	Workload    string  `json:"workload"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"`
	Seconds     float64 `json:"seconds"`
	// Requests completed, requests the bench left on purpose (cancel), and
	// responses received in the window.
	Requests   int64   `json:"requests"`
	Cancelled  int64   `json:"cancelled,omitempty"`
	Responses  int64   `json:"responses"`
	RespPerSec float64 `json:"responses_per_s"`
	ReqPerSec  float64 `json:"requests_per_s"`
	// TTFT is request sent → first response; Inter the gaps between
	// consecutive responses of one request.
	TTFT  Dist `json:"ttft"`
	Inter Dist `json:"inter_response"`
	// CancelStop is client left → engine stopped executing the request
	// (cancel preset, --embedded).
	CancelStop *Dist `json:"cancel_stop,omitempty"`
	// Resume is GET /v1/streams/{sid} sent → its first event
	// (sse-resume).
	Resume *Dist `json:"resume,omitempty"`
	// ChunkLatency is chunk sent → its partial result (sequence preset).
	ChunkLatency *Dist             `json:"chunk_latency,omitempty"`
	Errors       map[string]int64  `json:"errors"`
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	// Embedded: server and load generator share this process, so
	// ClientCPU is the whole process (both) and ServerCPU is absent.
	Embedded  bool     `json:"embedded"`
	ServerCPU *float64 `json:"server_cpu_s,omitempty"`
	ClientCPU float64  `json:"loadgen_cpu_s"`
	Cores     int      `json:"cores"`
	// Server RSS (the whole process in embedded mode): before the load,
	// the highest in the window, and the highest while the most streams
	// were open (StreamsAtFull); RSSPerStreamKB is the growth from the
	// start to full load, per open stream.
	RSSStartMB     float64 `json:"rss_start_mb,omitempty"`
	RSSMaxMB       float64 `json:"rss_max_mb,omitempty"`
	RSSAtFullMB    float64 `json:"rss_at_full_mb,omitempty"`
	StreamsAtFull  int64   `json:"streams_at_full,omitempty"`
	RSSPerStreamKB float64 `json:"rss_per_stream_kb,omitempty"`
	// The gateway process alone, when engine and gateway run apart
	// (--spawn-split): RSS before the load, at full load, growth per
	// stream.
	GatewayRSSStartMB     float64 `json:"gateway_rss_start_mb,omitempty"`
	GatewayRSSAtFullMB    float64 `json:"gateway_rss_at_full_mb,omitempty"`
	GatewayRSSPerStreamKB float64 `json:"gateway_rss_per_stream_kb,omitempty"`
	// LivePerStreamKB and GatewayLivePerStreamKB: the live heap and
	// stacks the server's (the gateway's) last collection in the window
	// found (GC.LiveMB + GC.StacksMB), per stream open at full load. RSS
	// per stream also counts the garbage the collector lets the heap
	// hold, a fixed floor under --gc-min-heap (64 MiB by default) that
	// 1,000 streams share; this is what the streams keep. It includes
	// the process's own fixed live heap (a few MB), so it overstates a
	// stream's share a little at 1,000 streams.
	LivePerStreamKB        float64 `json:"live_per_stream_kb,omitempty"`
	GatewayLivePerStreamKB float64 `json:"gateway_live_per_stream_kb,omitempty"`
	ClientCPUBound         bool    `json:"loadgen_cpu_bound"`
	BoxSaturated           bool    `json:"box_saturated"`
	// GC is the server's garbage collection in the window (--spawn, or
	// --embedded where it includes the load generator's).
	GC *GCStats `json:"gc,omitempty"`
	// GatewayCPU and GatewayGC are the gateway process's alone, when
	// engine and gateway run apart (--spawn-split).
	GatewayCPU *float64 `json:"gateway_cpu_s,omitempty"`
	GatewayGC  *GCStats `json:"gateway_gc,omitempty"`
	// ServerCalls and GatewayCalls are the read and write system calls
	// and the context switches in the window (procstat.Calls), of the
	// server processes together and of the gateway process alone
	// (--spawn-split).
	ServerCalls  *procstat.Calls `json:"server_calls,omitempty"`
	GatewayCalls *procstat.Calls `json:"gateway_calls,omitempty"`
	Ratios       *Ratios         `json:"vs_direct,omitempty"`
	// Floor marks the floor server's run of Transport minus "-floor"
	// (--floor): its ServerCPU and ServerCalls are the floor process's.
	Floor bool `json:"floor,omitempty"`
	// OverFloor, on a gateway's run with --floor: its CPU per response
	// against the floor's run of the same load.
	OverFloor *OverFloor `json:"over_floor,omitempty"`
	// MemSlope, with --slope-at, on the run at --c: memory's growth per
	// stream between it and the run at --slope-at.
	MemSlope *MemSlope `json:"mem_slope,omitempty"`
}

func (r *Result) errorCount() int64 {
	var n int64
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// Report is everything one invocation measured.
type Report struct {
	Preset     string    `json:"preset,omitempty"`
	Command    string    `json:"command"`
	Cores      int       `json:"cores"`
	LoadBefore string    `json:"loadavg_before"`
	LoadAfter  string    `json:"loadavg_after"`
	HTTP       string    `json:"http"`
	GRPC       string    `json:"grpc"`
	Embedded   bool      `json:"embedded"`
	ServerPIDs []int     `json:"server_pids,omitempty"`
	NoFile     uint64    `json:"nofile_limit"`
	Notes      []string  `json:"notes,omitempty"`
	Results    []*Result `json:"results"`
	// Reference is llama.cpp's side of the ttft preset.
	Reference   *Reference `json:"llamacpp,omitempty"`
	GeneratedAt string     `json:"generated_at"`
}

func (rep *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

// d2 formats a percentile of d, or "-" when d has no samples.
func d2(d Dist, v float64) string {
	if d.N == 0 {
		return "-"
	}
	return f2(v)
}
func signed(v float64) string {
	return fmt.Sprintf("%+.2f", v)
}

// writeTable prints the plain-text report.
func (rep *Report) writeTable(w io.Writer) {
	mode := "target " + rep.HTTP + " (http), " + rep.GRPC + " (grpc)"
	if rep.Embedded {
		mode = "embedded engine+gateway in this process (" + rep.HTTP + ", " + rep.GRPC + ")"
	}
	fmt.Fprintf(w, "streamgate bench %s\n", rep.Command)
	fmt.Fprintf(w, "%s; %d cores; load average %s before, %s after\n\n", mode, rep.Cores, rep.LoadBefore, rep.LoadAfter)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	cpuHead := "srv cpu s\tgen cpu s"
	if rep.Embedded {
		cpuHead = "proc cpu s"
	}
	fmt.Fprintf(tw, "transport\tworkload\tconc\treq/s\tresp/s\tttft p50\tp90\tp99\tinter p50\tp99\terrors\t%s\trss MB\t\n", cpuHead)
	for _, r := range rep.Results {
		cpu := f2(r.ClientCPU)
		if !rep.Embedded {
			srv := "-"
			if r.ServerCPU != nil {
				srv = f2(*r.ServerCPU)
			}
			cpu = srv + "\t" + cpu
		}
		rss := "-"
		if r.RSSMaxMB > 0 {
			rss = f1(r.RSSMaxMB)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t\n",
			r.Transport, r.Workload, r.Concurrency, f1(r.ReqPerSec), f1(r.RespPerSec),
			d2(r.TTFT, r.TTFT.P50), d2(r.TTFT, r.TTFT.P90), d2(r.TTFT, r.TTFT.P99), d2(r.Inter, r.Inter.P50), d2(r.Inter, r.Inter.P99),
			r.errorCount(), cpu, rss)
	}
	tw.Flush()
	fmt.Fprintln(w, "(times in ms; ttft = request sent → first response; inter = gap between responses of one request)")

	var withRatios []*Result
	for _, r := range rep.Results {
		if r.Ratios != nil {
			withRatios = append(withRatios, r)
		}
	}
	if len(withRatios) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		cpu := "cpu µs/resp"
		if rep.Embedded {
			cpu = "proc cpu µs/resp"
		}
		fmt.Fprintf(tw, "vs direct\tthroughput\t+ttft p50\t+ttft p99\t+inter p50\t+inter p99\t%s\tdirect\t+relay\t\n", cpu)
		for _, r := range withRatios {
			rt := r.Ratios
			fmt.Fprintf(tw, "%s\t%.3fx\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Transport, rt.Throughput,
				opt(rt.AddedTTFTP50, signed), opt(rt.AddedTTFTP99, signed), opt(rt.AddedInterP50, signed), opt(rt.AddedInterP99, signed),
				opt(rt.CPUPerResponse, f2), opt(rt.BaselineCPUPerResponse, f2), opt(rt.AddedCPUPerResponse, signed))
		}
		tw.Flush()
	}

	fmt.Fprintln(w)
	for _, r := range rep.Results {
		if r.CancelStop != nil && r.Transport == "sse-delete" {
			fmt.Fprintf(w, "%s: %d streams cancelled with DELETE /v1/streams/{sid} mid-stream; engine stopped after p50 %.2f ms, p99 %.2f ms, max %.2f ms (DELETE sent → Execute returned)\n",
				r.Transport, r.CancelStop.N, r.CancelStop.P50, r.CancelStop.P99, r.CancelStop.Max)
		} else if r.CancelStop != nil {
			fmt.Fprintf(w, "%s cancel: %d requests left mid-stream; engine stopped after p50 %.2f ms, p99 %.2f ms, max %.2f ms (client left → Execute returned)\n",
				r.Transport, r.CancelStop.N, r.CancelStop.P50, r.CancelStop.P99, r.CancelStop.Max)
		}
	}
	for _, r := range rep.Results {
		if d := r.Resume; d != nil {
			fmt.Fprintf(w, "%s: resume (GET /v1/streams/{sid} with Last-Event-ID sent → first event) p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms (%d resumes)\n",
				r.Transport, d.P50, d.P90, d.P99, d.Max, d.N)
		}
	}
	for _, r := range rep.Results {
		if d := r.ChunkLatency; d != nil {
			fmt.Fprintf(w, "%s sequence: chunk sent → its partial result p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms (%d chunks)\n",
				r.Transport, d.P50, d.P90, d.P99, d.Max, d.N)
		}
	}
	for _, r := range rep.Results {
		if r.RSSPerStreamKB > 0 && r.Concurrency >= 1000 {
			fmt.Fprintf(w, "%s memory: server rss %.1f MB before, %.1f MB with %d streams open (+%.1f KB per stream), %.1f MB at most%s\n",
				r.Transport, r.RSSStartMB, r.RSSAtFullMB, r.StreamsAtFull, r.RSSPerStreamKB, r.RSSMaxMB, liveNote(r.GC, r.LivePerStreamKB))
			if r.GatewayRSSAtFullMB > 0 && r.Transport != "direct" {
				fmt.Fprintf(w, "%s memory: gateway process alone %.1f MB before, %.1f MB with %d streams open (+%.1f KB per stream)%s\n",
					r.Transport, r.GatewayRSSStartMB, r.GatewayRSSAtFullMB, r.StreamsAtFull, r.GatewayRSSPerStreamKB, liveNote(r.GatewayGC, r.GatewayLivePerStreamKB))
			}
		}
	}
	for _, r := range rep.Results {
		if m := r.MemSlope; m != nil {
			fmt.Fprintf(w, "%s memory per added stream, %d → %d streams: server rss %+.1f KB", r.Transport, m.From, m.To, m.RSSKB)
			if m.LiveKB != 0 {
				fmt.Fprintf(w, ", live heap and stacks %+.1f KB", m.LiveKB)
			}
			if m.GatewayRSSKB != 0 && r.Transport != "direct" {
				fmt.Fprintf(w, "; gateway process alone: rss %+.1f KB", m.GatewayRSSKB)
				if m.GatewayLiveKB != 0 {
					fmt.Fprintf(w, ", live heap and stacks %+.1f KB", m.GatewayLiveKB)
				}
			}
			fmt.Fprintln(w)
		}
	}
	for _, r := range rep.Results {
		if r.Floor {
			if r.ServerCPU != nil && r.Responses > 0 {
				fmt.Fprintf(w, "%s: floor process %.2f µs CPU per response\n", r.Transport, *r.ServerCPU/float64(r.Responses)*1e6)
			}
			if c := r.ServerCalls; c != nil && r.Responses > 0 {
				fmt.Fprintf(w, "%s: floor process %s\n", r.Transport, perResponse(*c, r.Responses))
			}
			continue
		}
		if o := r.OverFloor; o != nil {
			who := "gateway process alone"
			if o.Of == "server" {
				who = "server (engine included)"
			}
			fmt.Fprintf(w, "%s: %s over the floor: %.2f against %.2f µs CPU per response, %+.2f µs (%.2f×)\n",
				r.Transport, who, o.CPUPerResponse, o.FloorCPUPerResponse, o.AddedUS, o.Ratio)
		}
		if r.GatewayCPU != nil && r.Transport != "direct" && r.Responses > 0 {
			fmt.Fprintf(w, "%s: gateway process alone %.2f µs CPU per response", r.Transport, *r.GatewayCPU/float64(r.Responses)*1e6)
			if g := r.GatewayGC; g != nil {
				fmt.Fprintf(w, "; its gc: %d cycles, marking %.1f%% of its CPU (runtime's account), pauses p99 %.3f ms", g.Cycles, 100*g.CPUShare, g.Pauses.P99)
			}
			fmt.Fprintln(w)
		}
		if c := r.GatewayCalls; c != nil && r.Transport != "direct" && r.Responses > 0 {
			fmt.Fprintf(w, "%s: gateway process alone %s\n", r.Transport, perResponse(*c, r.Responses))
		}
		if c := r.ServerCalls; c != nil && r.Responses > 0 {
			fmt.Fprintf(w, "%s: server %s\n", r.Transport, perResponse(*c, r.Responses))
		}
		if g := r.GC; g != nil {
			who := "server"
			if g.Source == "runtime/metrics" {
				who = "process (server and load generator)"
			}
			fmt.Fprintf(w, "%s gc (%s): %d cycles, marking %.1f%% of CPU (runtime's account); pauses p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
				r.Transport, who, g.Cycles, 100*g.CPUShare, g.Pauses.P50, g.Pauses.P99, g.Pauses.Max)
		}
	}
	for _, r := range rep.Results {
		for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
			fmt.Fprintf(w, "%s errors %s ×%d: %s\n", r.Transport, k, r.Errors[k], clip(r.ErrorSamples[k], 160))
		}
		if r.ClientCPUBound {
			fmt.Fprintf(w, "warning: %s: the load generator was CPU-bound (%.1f CPU s in %.1f s on %d cores); figures understate the server\n",
				r.Transport, r.ClientCPU, r.Seconds, r.Cores)
		}
		if r.BoxSaturated {
			fmt.Fprintf(w, "warning: %s: the machine was saturated (server and load generator used ≈ all %d cores); throughput and latency are under CPU contention\n",
				r.Transport, r.Cores)
		}
	}
	if rep.Reference != nil {
		var chat *Result
		for _, r := range rep.Results {
			if r.Transport == "chat" {
				chat = r
			}
		}
		writeReference(w, rep.Reference, chat, busy(rep.LoadBefore, rep.Cores) || busy(rep.LoadAfter, rep.Cores))
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// opt formats *v with f, or "-" when v is nil.
func opt(v *float64, f func(float64) string) string {
	if v == nil {
		return "-"
	}
	return f(*v)
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// liveNote is a memory line's tail: what the last collection found live
// (heap and stacks) per stream, when a collection ran in the window.
func liveNote(g *GCStats, perStream float64) string {
	if g == nil || perStream == 0 {
		return ""
	}
	return fmt.Sprintf("; live at its last gc: heap %.0f MB + stacks %.0f MB = %.1f KB per stream", g.LiveMB, g.StacksMB, perStream)
}

// MemSlope is memory's growth per added stream between two runs of one
// transport and workload at two stream counts, each on a fresh server:
// what one more stream costs, without what the process holds whatever
// its streams (the runtime, pools, the garbage the --gc-min-heap floor
// lets the heap keep). RSS is the whole server (engine included when it
// runs in the gateway's process); Live is the live heap and stacks of
// each run's last collection (gctrace); the Gateway figures are the
// gateway process's alone (--spawn-split).
type MemSlope struct {
	From, To      int64   // streams open at full load in the two runs
	RSSKB         float64 `json:"rss_kb"`
	LiveKB        float64 `json:"live_kb,omitempty"`
	GatewayRSSKB  float64 `json:"gateway_rss_kb,omitempty"`
	GatewayLiveKB float64 `json:"gateway_live_kb,omitempty"`
}

// memSlopes sets MemSlope on each result at from streams that has a
// twin at to streams.
func memSlopes(rs []*Result, from, to int) {
	live := func(g *GCStats) float64 {
		if g == nil {
			return 0
		}
		return g.LiveMB + g.StacksMB
	}
	for _, a := range rs {
		for _, b := range rs {
			if a.Concurrency != from || b.Concurrency != to || a.Transport != b.Transport || a.Workload != b.Workload {
				continue
			}
			n := float64(b.StreamsAtFull - a.StreamsAtFull)
			if n == 0 || a.RSSAtFullMB == 0 || b.RSSAtFullMB == 0 {
				continue
			}
			perStream := func(x, y float64) float64 { return (y - x) * 1024 / n }
			m := &MemSlope{From: a.StreamsAtFull, To: b.StreamsAtFull, RSSKB: perStream(a.RSSAtFullMB, b.RSSAtFullMB)}
			if a.GC != nil && b.GC != nil && a.GC.LiveMB > 0 && b.GC.LiveMB > 0 {
				m.LiveKB = perStream(live(a.GC), live(b.GC))
			}
			if a.GatewayRSSAtFullMB > 0 && b.GatewayRSSAtFullMB > 0 {
				m.GatewayRSSKB = perStream(a.GatewayRSSAtFullMB, b.GatewayRSSAtFullMB)
				if live(a.GatewayGC) > 0 && live(b.GatewayGC) > 0 {
					m.GatewayLiveKB = perStream(live(a.GatewayGC), live(b.GatewayGC))
				}
			}
			a.MemSlope = m
		}
	}
}

// perResponse says c per response: the system calls the floor counts
// (one client write per response, reads shared by many) and the
// context switches, which are the threads' wake-ups.
func perResponse(c procstat.Calls, responses int64) string {
	n := float64(responses)
	return fmt.Sprintf("per response: %.3f read and %.3f write system calls, %.3f context switches",
		float64(c.Reads)/n, float64(c.Writes)/n, float64(c.Switches)/n)
}

// OverFloor is a gateway run's CPU per response against the floor
// server's run of the same transport and load (--floor).
type OverFloor struct {
	// Of is whose CPU CPUPerResponse is: "gateway" (the gateway process
	// alone, --spawn-split) or "server" (the server processes: the
	// engine's work is in it too).
	Of                  string  `json:"of"`
	CPUPerResponse      float64 `json:"cpu_us_per_response"`
	FloorCPUPerResponse float64 `json:"floor_cpu_us_per_response"`
	AddedUS             float64 `json:"added_us"`
	// Ratio is CPUPerResponse / FloorCPUPerResponse; 0 when the floor's
	// CPU read 0 (a run shorter than the clock's ticks).
	Ratio float64 `json:"ratio"`
}

// overFloor sets OverFloor on every gateway run that has a floor run of
// the same transport and load.
func overFloor(rs []*Result) {
	perResp := func(cpu *float64, r *Result) (float64, bool) {
		if cpu == nil || r.Responses == 0 {
			return 0, false
		}
		return *cpu / float64(r.Responses) * 1e6, true
	}
	for _, g := range rs {
		if g.Floor {
			continue
		}
		for _, f := range rs {
			if !f.Floor || f.Transport != g.Transport+"-floor" || f.Workload != g.Workload || f.Concurrency != g.Concurrency {
				continue
			}
			o := &OverFloor{Of: "gateway"}
			var ok, floorOK bool
			if o.CPUPerResponse, ok = perResp(g.GatewayCPU, g); !ok {
				o.Of = "server"
				o.CPUPerResponse, ok = perResp(g.ServerCPU, g)
			}
			if o.FloorCPUPerResponse, floorOK = perResp(f.ServerCPU, f); !ok || !floorOK {
				continue
			}
			o.AddedUS = o.CPUPerResponse - o.FloorCPUPerResponse
			if o.FloorCPUPerResponse > 0 {
				o.Ratio = o.CPUPerResponse / o.FloorCPUPerResponse
			}
			g.OverFloor = o
		}
	}
}

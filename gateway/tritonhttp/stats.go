package tritonhttp

import (
	"sort"
	"strconv"
	"strings"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Statistics prints a ModelStatistics answer as Triton's HTTP endpoint
// does (its core's TRITONSERVER_ServerModelStatistics): {"model_stats":[
// {name, version, last_inference (ms since the epoch), inference_count,
// execution_count, inference_stats, response_stats, batch_stats,
// memory_usage}]}, every duration {"count","ns"}.
func Statistics(resp *pb.ModelStatisticsResponse) []byte {
	b := []byte(`{"model_stats":[`)
	for i, s := range resp.GetModelStats() {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, s.GetName())
		b = append(b, `,"version":`...)
		b = appendString(b, s.GetVersion())
		b = appendUint(b, "last_inference", s.GetLastInference())
		b = appendUint(b, "inference_count", s.GetInferenceCount())
		b = appendUint(b, "execution_count", s.GetExecutionCount())
		is := s.GetInferenceStats()
		b = append(b, `,"inference_stats":{`...)
		b = appendDurations(b, duration{"success", is.GetSuccess()}, duration{"fail", is.GetFail()},
			duration{"queue", is.GetQueue()}, duration{"compute_input", is.GetComputeInput()},
			duration{"compute_infer", is.GetComputeInfer()}, duration{"compute_output", is.GetComputeOutput()},
			duration{"cache_hit", is.GetCacheHit()}, duration{"cache_miss", is.GetCacheMiss()})
		b = append(b, `},"response_stats":{`...)
		keys := make([]string, 0, len(s.GetResponseStats()))
		for k := range s.GetResponseStats() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for j, k := range keys {
			if j > 0 {
				b = append(b, ',')
			}
			r := s.GetResponseStats()[k]
			b = appendString(b, k)
			b = append(b, ":{"...)
			b = appendDurations(b, duration{"compute_infer", r.GetComputeInfer()},
				duration{"compute_output", r.GetComputeOutput()}, duration{"success", r.GetSuccess()},
				duration{"fail", r.GetFail()}, duration{"empty_response", r.GetEmptyResponse()},
				duration{"cancel", r.GetCancel()})
			b = append(b, '}')
		}
		b = append(b, `},"batch_stats":[`...)
		for j, bs := range s.GetBatchStats() {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"batch_size":`...)
			b = strconv.AppendUint(b, bs.GetBatchSize(), 10)
			b = append(b, ',')
			b = appendDurations(b, duration{"compute_input", bs.GetComputeInput()},
				duration{"compute_infer", bs.GetComputeInfer()}, duration{"compute_output", bs.GetComputeOutput()})
			b = append(b, '}')
		}
		b = append(b, `],"memory_usage":[`...)
		for j, m := range s.GetMemoryUsage() {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":`...)
			b = appendString(b, m.GetType())
			b = append(b, `,"id":`...)
			b = strconv.AppendInt(b, m.GetId(), 10)
			b = appendUint(b, "byte_size", m.GetByteSize())
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	return append(b, "]}"...)
}

// appendUint appends `,"<key>":<v>`.
func appendUint(b []byte, key string, v uint64) []byte {
	b = append(b, ',')
	b = appendString(b, key)
	b = append(b, ':')
	return strconv.AppendUint(b, v, 10)
}

// duration is one named statistic; a nil d is zero.
type duration struct {
	name string
	d    *pb.StatisticDuration
}

// appendDurations appends `"<name>":{"count":c,"ns":n}` for each, comma
// separated.
func appendDurations(b []byte, ds ...duration) []byte {
	for i, d := range ds {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, d.name)
		b = append(b, `:{"count":`...)
		b = strconv.AppendUint(b, d.d.GetCount(), 10)
		b = append(b, `,"ns":`...)
		b = strconv.AppendUint(b, d.d.GetNs(), 10)
		b = append(b, '}')
	}
	return b
}

// ParseIndexRequest reads a /v2/repository/index body: empty, or an
// object whose optional "ready" (bool) asks for ready models only.
func ParseIndexRequest(body []byte) (ready bool, err error) {
	top, err := parseTree(body)
	if err != nil {
		return false, err
	}
	if v, ok := top.find("ready"); ok {
		b, e := asBool(v)
		if e != nil {
			return false, e
		}
		return b, nil
	}
	return false, nil
}

// RepositoryIndex prints the repository index as Triton's HTTP endpoint
// does: [{"name", "version" (when known), "state", "reason" (when not
// empty)}], in the order given; with ready, only the models whose state
// is READY.
func RepositoryIndex(models []*pb.RepositoryIndexResponse_ModelIndex, ready bool) []byte {
	b := []byte{'['}
	n := 0
	for _, m := range models {
		if ready && !strings.EqualFold(m.GetState(), "READY") {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"name":`...)
		b = appendString(b, m.GetName())
		if m.GetVersion() != "" {
			b = append(b, `,"version":`...)
			b = appendString(b, m.GetVersion())
		}
		b = append(b, `,"state":`...)
		b = appendString(b, m.GetState())
		if m.GetReason() != "" {
			b = append(b, `,"reason":`...)
			b = appendString(b, m.GetReason())
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

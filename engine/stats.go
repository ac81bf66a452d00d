package engine

import (
	"context"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// modelStats accumulates what ModelStatistics reports for one model
// version, with Triton's meanings (its infer_stats.cc):
//   - success: requests that ended without error, with their time from
//     arrival at the scheduler to their last response built; queue,
//     compute_input, compute_infer and compute_output split that time for
//     them (queue: until their batch got an instance; compute_input: until
//     the backend was called; compute_infer: the backend's call, for a
//     decoupled model every response it sent; compute_output: building the
//     last response);
//   - fail: requests that ended with an error, rejected by the queue (full,
//     timed out) or cancelled while queued included;
//   - inference_count: the batch sizes of successful requests;
//     execution_count and batch_stats: backend executions, by batch size;
//   - last_inference: when the last execution ended, in ms since the epoch.
//
// The response cache is not implemented, so cache_hit and cache_miss stay 0.
type modelStats struct {
	mu             sync.Mutex
	lastInference  time.Time
	inferenceCount uint64
	executionCount uint64
	success, fail  duration
	queue          duration
	computeInput   duration
	computeInfer   duration
	computeOutput  duration
	batches        map[int]*batchStats
}

type duration struct{ count, ns uint64 }

func (d *duration) add(x time.Duration) {
	d.count++
	d.ns += uint64(max(x, 0))
}

func (d duration) proto() *pb.StatisticDuration {
	return &pb.StatisticDuration{Count: d.count, Ns: d.ns}
}

type batchStats struct{ input, infer, output duration }

func (s *modelStats) succeeded(batchSize int, t timings) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inferenceCount += uint64(batchSize)
	s.success.add(t.end.Sub(t.arrived))
	s.queue.add(t.started.Sub(t.arrived))
	s.computeInput.add(t.computeStart.Sub(t.started))
	s.computeInfer.add(t.computed.Sub(t.computeStart))
	s.computeOutput.add(t.end.Sub(t.computed))
}

func (s *modelStats) failed(arrived, end time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail.add(end.Sub(arrived))
}

// executed counts one backend execution of a batch of size batchSize.
func (s *modelStats) executed(batchSize int, t timings) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.executionCount++
	if t.end.After(s.lastInference) {
		s.lastInference = t.end
	}
	if s.batches == nil {
		s.batches = map[int]*batchStats{}
	}
	b := s.batches[batchSize]
	if b == nil {
		b = &batchStats{}
		s.batches[batchSize] = b
	}
	b.input.add(t.computeStart.Sub(t.started))
	b.infer.add(t.computed.Sub(t.computeStart))
	b.output.add(t.end.Sub(t.computed))
}

func (s *modelStats) proto(name, version string) *pb.ModelStatistics {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &pb.ModelStatistics{
		Name:           name,
		Version:        version,
		InferenceCount: s.inferenceCount,
		ExecutionCount: s.executionCount,
		InferenceStats: &pb.InferStatistics{
			Success:       s.success.proto(),
			Fail:          s.fail.proto(),
			Queue:         s.queue.proto(),
			ComputeInput:  s.computeInput.proto(),
			ComputeInfer:  s.computeInfer.proto(),
			ComputeOutput: s.computeOutput.proto(),
			CacheHit:      &pb.StatisticDuration{},
			CacheMiss:     &pb.StatisticDuration{},
		},
	}
	if !s.lastInference.IsZero() {
		out.LastInference = uint64(s.lastInference.UnixMilli())
	}
	sizes := make([]int, 0, len(s.batches))
	for n := range s.batches {
		sizes = append(sizes, n)
	}
	sort.Ints(sizes)
	for _, n := range sizes {
		b := s.batches[n]
		out.BatchStats = append(out.BatchStats, &pb.InferBatchStatistics{
			BatchSize:     uint64(n),
			ComputeInput:  b.input.proto(),
			ComputeInfer:  b.infer.proto(),
			ComputeOutput: b.output.proto(),
		})
	}
	return out
}

// ModelStatistics reports every loaded model version's statistics (name
// ""), every version of one model (version ""), or one version.
func (s *Server) ModelStatistics(_ context.Context, r *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	out := &pb.ModelStatisticsResponse{}
	names := s.names
	if name := r.GetName(); name != "" {
		// Triton's texts and class (TRITONSERVER_ServerModelStatistics).
		if len(s.models[name]) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "requested model '%s' is not available", name)
		}
		if _, err := s.lookup(name, r.GetVersion()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "requested model version is not available for model '%s'", name)
		}
		names = []string{name}
	}
	for _, name := range names {
		for _, m := range s.models[name] {
			if r.GetVersion() == "" || r.GetVersion() == m.Version {
				out.ModelStats = append(out.ModelStats, m.stats.proto(m.Name, m.Version))
			}
		}
	}
	return out, nil
}

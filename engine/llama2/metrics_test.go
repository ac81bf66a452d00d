package llama2

import (
	"sync"
	"testing"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// metricsRecorder is a backend.Metrics that keeps what it is told.
type metricsRecorder struct {
	mu                            sync.Mutex
	passes, seqs, prompt, sampled int
	maxSeqs                       int
	used, total, maxUsed          int
}

func (m *metricsRecorder) Step(sequences, promptTokens, generatedTokens int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.passes++
	m.seqs += sequences
	m.maxSeqs = max(m.maxSeqs, sequences)
	m.prompt += promptTokens
	m.sampled += generatedTokens
}

func (m *metricsRecorder) KVSlots(used, total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.used, m.total = used, total
	m.maxUsed = max(m.maxUsed, used)
}

// The scheduler reports every pass: its sequences, the prompt tokens it
// fed and the tokens it sampled, which add up to the request's own
// counts; and the KV slots, all free again at the end.
func TestMetricsReport(t *testing.T) {
	rec := &metricsRecorder{}
	cfg := Config("test", "m.bin", "t.bin")
	cfg.Parameters[paramMaxSequences] = &pb.ModelParameter{StringValue: "4"}
	b := openConfig(t, backend.Config{Model: cfg, Dir: scriptFiles(t, 32, bytesChain("abcdefghij")), Metrics: rec})

	var wg sync.WaitGroup
	results := make([]result, 3)
	for i := range results {
		wg.Go(func() {
			results[i] = run(t, b, call{prompt: "ab", stream: true, params: `{"temperature":0,"max_tokens":5}`})
		})
	}
	wg.Wait()
	var in, out int
	for _, r := range results {
		in += int(r.inTokens)
		out += int(r.outTokens)
	}
	waitFor(t, "the slots to be reported free", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.used == 0
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.prompt != in || rec.sampled != out {
		t.Errorf("reported %d prompt and %d sampled tokens, the requests counted %d and %d", rec.prompt, rec.sampled, in, out)
	}
	if rec.passes == 0 || rec.seqs < rec.passes || rec.maxSeqs > 3 {
		t.Errorf("%d passes of %d sequences in all (at most %d in one), want each pass to hold 1 to 3", rec.passes, rec.seqs, rec.maxSeqs)
	}
	if rec.total != 4 || rec.maxUsed < 1 || rec.maxUsed > 3 {
		t.Errorf("KV slots: total %d, at most %d used; want 4, and 1 to 3 used", rec.total, rec.maxUsed)
	}
}

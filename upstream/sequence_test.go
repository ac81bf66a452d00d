package upstream

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// seqChunk is a request of sequence id to model, an accumulator, adding v.
// INPUT has shape [1,1] for custom_sequence_int32 (max_batch_size 8), [1]
// for the test models (max_batch_size 0).
func seqChunk(model string, id int64, start, end bool, v int32) *pb.ModelInferRequest {
	shape := []int64{1}
	if model == "custom_sequence_int32" {
		shape = []int64{1, 1}
	}
	req := &pb.ModelInferRequest{ModelName: model, Parameters: map[string]*pb.InferParameter{
		"sequence_id":    {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: id}},
		"sequence_start": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: start}},
		"sequence_end":   {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: end}},
	}}
	tensorsToRequest(req, tensor.NewInt32("INPUT", shape, []int32{v}))
	return req
}

// accSequence is an accumulator per sequence id (backend dyna_sequence,
// which also adds the id at END) with room for 128 open sequences.
func accSequence(tb testing.TB) *pb.ModelConfig {
	tb.Helper()
	cfg, err := engine.ParseConfig([]byte(`name: "acc_seq" backend: "dyna_sequence" max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ] output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
sequence_batching { max_sequence_idle_microseconds: 600000000 oldest { max_candidate_sequences: 64 } control_input [
  { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
  { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
  { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] } ] }
instance_group [ { count: 2 kind: KIND_CPU } ]`))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// one runs a non-decoupled request and returns its OUTPUT and target.
func one(ctx context.Context, tb testing.TB, c *Client, req *pb.ModelInferRequest) (int64, string, error) {
	tb.Helper()
	cl, err := c.Start(ctx, req)
	if err != nil {
		return 0, "", err
	}
	rs, err := readAll(ctx, cl)
	if err != nil {
		return 0, cl.Target(), err
	}
	if len(rs) != 1 {
		tb.Fatalf("%d responses", len(rs))
	}
	return output(tb, rs[0], "OUTPUT"), cl.Target(), nil
}

func inferenceCount(tb testing.TB, e *testEngine, model string) uint64 {
	tb.Helper()
	r, err := e.srv.ModelStatistics(context.Background(), &pb.ModelStatisticsRequest{Name: model})
	if err != nil {
		tb.Fatal(err)
	}
	return r.GetModelStats()[0].GetInferenceCount()
}

// TestSequenceAffinity: 20 concurrent sequences of 5 requests over two
// engines. Every request of a sequence goes to the target its START went
// to (the accumulator's running sum proves it, and each engine counts
// whole sequences), and the sequences are spread over both engines.
func TestSequenceAffinity(t *testing.T) {
	a, b := startEngineWith(t, "", accSequence(t)), startEngineWith(t, "", accSequence(t))
	c := newTestClient(t, []string{a.addr, b.addr}, nil)
	// Until both engines have had their first health check, the one
	// checked first takes every START (on a busy machine, all 20).
	waitChecked(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const seqs, chunks = 20, 5
	// Start all the sequences first, so that they are open together.
	var wg sync.WaitGroup
	errs := make(chan error, seqs)
	started, proceed := make(chan struct{}, seqs), make(chan struct{})
	var mu sync.Mutex
	perTarget := map[string]int{}
	for i := range seqs {
		wg.Go(func() {
			id := int64(5000 + i)
			var first string
			var sum int64
			for j := range chunks {
				v := int32(10*i + j)
				sum += int64(v)
				if j == chunks-1 {
					sum += id // the model adds the id at END
				}
				got, target, err := one(ctx, t, c, seqChunk("acc_seq", id, j == 0, j == chunks-1, v))
				if err != nil {
					errs <- err
					return
				}
				if j == 0 {
					first = target
					mu.Lock()
					perTarget[target]++
					mu.Unlock()
					started <- struct{}{}
					<-proceed // wait for every START
				}
				if target != first || got != sum {
					errs <- fmt.Errorf("sequence %d request %d: target %s (START on %s), sum %d want %d", id, j, target, first, got, sum)
					return
				}
			}
		})
	}
	for range seqs {
		<-started
	}
	if n := c.OpenSequences(); n != seqs {
		t.Fatalf("%d open sequences, want %d", n, seqs)
	}
	close(proceed)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Placed by open sequences: the STARTs split evenly.
	if perTarget[a.addr] != seqs/2 || perTarget[b.addr] != seqs/2 {
		t.Fatalf("sequences per target %v", perTarget)
	}
	na, nb := inferenceCount(t, a, "acc_seq"), inferenceCount(t, b, "acc_seq")
	if na+nb != seqs*chunks || na != uint64(perTarget[a.addr]*chunks) {
		t.Fatalf("engines ran %d and %d requests, want %d per sequence placed there (%v)", na, nb, chunks, perTarget)
	}
	if n := c.OpenSequences(); n != 0 {
		t.Fatalf("%d sequences still open after their END", n)
	}
}

// slowSequence is an accumulator whose every execution takes a minute
// (cancelled when the engine stops).
func slowSequence(tb testing.TB) *pb.ModelConfig {
	tb.Helper()
	cfg, err := engine.ParseConfig([]byte(`name: "slow_sequence" backend: "sequence" max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ] output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
sequence_batching { max_sequence_idle_microseconds: 600000000 control_input [
  { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
  { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ] }
parameters { key: "execute_delay_ms" value: { string_value: "60000" } }
instance_group [ { count: 4 kind: KIND_CPU } ]`))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// TestSequenceLost: when the engine holding a sequence goes away, its
// request in flight and every later one end with KindSequenceLost, never
// re-sent to the other engine; a new START of the id works there.
func TestSequenceLost(t *testing.T) {
	a, b := startEngineWith(t, "", slowSequence(t)), startEngineWith(t, "", slowSequence(t))
	c := newTestClient(t, []string{a.addr, b.addr}, &Options{HealthInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Between requests: the next request of the sequence is lost.
	_, target, err := one(ctx, t, c, seqChunk("custom_sequence_int32", 7, true, false, 1))
	if err != nil {
		t.Fatal(err)
	}
	dead, live := a, b
	if target == b.addr {
		dead, live = b, a
	}
	dead.stop()
	for range 2 {
		_, _, err = one(ctx, t, c, seqChunk("custom_sequence_int32", 7, false, false, 2))
		if e := wantKind(t, err, KindSequenceLost); e.Code != codes.Unavailable {
			t.Fatalf("lost with %+v", e)
		}
	}
	waitFor(t, "the stopped engine to be ejected", func() bool { return !targetHealthy(c, dead.addr) })
	if got, target, err := one(ctx, t, c, seqChunk("custom_sequence_int32", 7, true, true, 3)); err != nil || got != 3 || target != live.addr {
		t.Fatalf("a new START: %d on %s, %v", got, target, err)
	}
	if inferenceCount(t, live, "custom_sequence_int32") != 1 {
		t.Fatal("a request of the lost sequence reached the other engine")
	}

	// In flight: the request running when its engine stops is lost.
	e1 := startEngineWith(t, "", slowSequence(t))
	c1 := newTestClient(t, []string{e1.addr, live.addr}, &Options{HealthInterval: -1})
	cl, err := c1.Start(ctx, seqChunk("slow_sequence", 8, true, false, 1))
	if err != nil {
		t.Fatal(err)
	}
	holder := e1
	if cl.Target() == live.addr {
		holder = live
	}
	waitFor(t, "the request to run", func() bool { return holder.srv.InFlight() == 1 })
	holder.stop()
	_, err = readAll(ctx, cl)
	wantKind(t, err, KindSequenceLost)
	_, _, err = one(ctx, t, c1, seqChunk("slow_sequence", 8, false, true, 1))
	wantKind(t, err, KindSequenceLost)
}

// TestSequenceRouteEnds: a route ends with its sequence's END, with a
// cancelled request, and once unused for the model's idle limit; a pinned
// stream is not closed for idleness while its sequence is open.
func TestSequenceRouteEnds(t *testing.T) {
	idle, err := engine.ParseConfig([]byte(`name: "short_idle" backend: "sequence" max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ -1 ] } ] output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ -1 ] } ]
sequence_batching { max_sequence_idle_microseconds: 20000 control_input [
  { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }`))
	if err != nil {
		t.Fatal(err)
	}
	e := startEngineWith(t, "", idle, slowSequence(t))
	// StreamFill 1: a busy stream gets no second request (below).
	c := newTestClient(t, []string{e.addr}, &Options{IdleStreamTimeout: 20 * time.Millisecond, StreamFill: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, _, err := one(ctx, t, c, seqChunk("custom_sequence_int32", 1, true, false, 1)); err != nil {
		t.Fatal(err)
	}
	// Two slow requests: one on the sequence's stream, one on a second
	// stream. Once both are cancelled, both streams are idle: the second
	// closes after 20 ms, the sequence's stays.
	var slow []*Call
	for range 2 {
		req := &pb.ModelInferRequest{ModelName: "identity_int32", Parameters: map[string]*pb.InferParameter{
			"delay_ms": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 60000}}}}
		tensorsToRequest(req, tensorInt32("INPUT0", 1))
		cl, err := c.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, cl)
	}
	if n := c.Stats().StreamsOpen; n != 2 {
		t.Fatalf("%d streams open, want 2", n)
	}
	for _, cl := range slow {
		cl.Cancel()
	}
	waitFor(t, "the idle stream to close", func() bool { return c.Stats().StreamsOpen == 1 })
	if got, _, err := one(ctx, t, c, seqChunk("custom_sequence_int32", 1, false, true, 2)); err != nil || got != 3 {
		t.Fatalf("after idle streams closed: %d, %v", got, err)
	}
	if n := c.OpenSequences(); n != 0 {
		t.Fatalf("%d open after END", n)
	}

	// A cancelled request ends its route.
	if _, _, err := one(ctx, t, c, seqChunk("custom_sequence_int32", 2, true, false, 1)); err != nil {
		t.Fatal(err)
	}
	cl, err := c.Start(ctx, seqChunk("slow_sequence", 3, true, false, 1))
	if err != nil {
		t.Fatal(err)
	}
	if n := c.OpenSequences(); n != 2 {
		t.Fatalf("%d open, want 2", n)
	}
	cl.Cancel()
	waitFor(t, "the cancelled sequence's route to end", func() bool { return c.OpenSequences() == 1 })

	// Unused for the model's idle limit (20 ms): gone.
	if _, _, err := one(ctx, t, c, seqChunk("short_idle", 4, true, false, 1)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the idle route to expire", func() bool { return c.OpenSequences() == 1 })
}

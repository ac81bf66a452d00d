package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/proto/errclass"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// withSeq sets a request's sequence parameters the way NVIDIA's Python
// client does: an int id as int64_param, a string id as string_param, and
// start and end always (as bool_param).
func withSeq(r *pb.ModelInferRequest, id any, start, end bool) *pb.ModelInferRequest {
	if r.Parameters == nil {
		r.Parameters = map[string]*pb.InferParameter{}
	}
	switch v := id.(type) {
	case int:
		r.Parameters["sequence_id"] = param(int64(v))
	case string:
		r.Parameters["sequence_id"] = param(v)
	}
	r.Parameters["sequence_start"] = param(start)
	r.Parameters["sequence_end"] = param(end)
	return r
}

// intReq is a request with INPUT = vals, shape [1, len(vals)].
func intReq(model, id string, vals ...int32) *pb.ModelInferRequest {
	return build(model, id, false, tensor.NewInt32("INPUT", []int64{1, int64(len(vals))}, vals))
}

func outputInt32(t *testing.T, r *pb.ModelInferResponse) []int32 {
	t.Helper()
	o := output(t, r, "OUTPUT")
	v, err := o.Int32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// openStream opens a ModelStreamInfer stream that ends with the test.
func openStream(t *testing.T, h *harness) pb.GRPCInferenceService_ModelStreamInferClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func send(t *testing.T, s pb.GRPCInferenceService_ModelStreamInferClient, reqs ...*pb.ModelInferRequest) {
	t.Helper()
	for _, r := range reqs {
		if err := s.Send(r); err != nil {
			t.Fatal(err)
		}
	}
}

// recvN reads n responses and returns them by request id (in order per id).
func recvN(t *testing.T, s pb.GRPCInferenceService_ModelStreamInferClient, n int) map[string][]*pb.ModelStreamInferResponse {
	t.Helper()
	out := map[string][]*pb.ModelStreamInferResponse{}
	for range n {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		id := r.GetInferResponse().GetId()
		out[id] = append(out[id], r)
	}
	return out
}

// TestSequenceExampleClients replays NVIDIA's simple_grpc_sequence_stream
// and _sync clients (SEQUENCE.md §4.3): three sequences of eight requests,
// request ids "<seq>_<n>" demultiplexed from the responses, against
// simple_sequence (default) and the dyna models (-d).
func TestSequenceExampleClients(t *testing.T) {
	h := start(t, engine.Options{})
	values := []int32{11, 7, 5, 3, 2, 0, 1}
	type seq struct {
		model string
		id    any
		first int32
		sign  int32
		want  []int32
	}
	neg := func(first int32, plusStart int32, end int32) []int32 {
		w := []int32{first + plusStart}
		for _, v := range values {
			w = append(w, -v)
		}
		w[len(w)-1] += end
		return w
	}
	pos := func(end int32) []int32 {
		w := append([]int32{1}, values...)
		w[len(w)-1] += end
		return w
	}
	modes := map[string][]seq{
		"default": {
			{"simple_sequence", 1000, 0, 1, pos(0)},
			{"simple_sequence", 1001, 100, -1, neg(100, 1, 0)},
			{"simple_sequence", "0b6c1c6e-uuid4-string", 20, -1, neg(20, 1, 0)},
		},
		"-d": {
			{"simple_dyna_sequence", 1000, 0, 1, pos(1000)},
			{"simple_dyna_sequence", 1001, 100, -1, neg(100, 1, 1001)},
			{"simple_string_dyna_sequence", "1002", 20, -1, []int32{20, 9, 2, -3, -6, -8, -8, 993}},
		},
	}
	for mode, seqs := range modes {
		t.Run(mode+"/stream", func(t *testing.T) {
			s := openStream(t, h)
			for _, q := range seqs {
				for i := range 8 {
					v := q.first
					if i > 0 {
						v = q.sign * values[i-1]
					}
					r := build(q.model, fmt.Sprintf("%v_%d", q.id, i+1), false, tensor.NewInt32("INPUT", []int64{1, 1}, []int32{v}))
					send(t, s, withSeq(r, q.id, i == 0, i == 7))
				}
			}
			if err := s.CloseSend(); err != nil {
				t.Fatal(err)
			}
			got := map[string][]int32{}
			for _, r := range collect(t, s) {
				if r.GetErrorMessage() != "" {
					t.Fatalf("error: %s", r.GetErrorMessage())
				}
				seqID, _, _ := strings.Cut(r.GetInferResponse().GetId(), "_")
				o := output(t, r.GetInferResponse(), "OUTPUT")
				v, err := o.Int32s()
				if err != nil || !slices.Equal(o.Shape, []int64{1, 1}) {
					t.Fatalf("OUTPUT %v shape %v: %v", v, o.Shape, err)
				}
				got[seqID] = append(got[seqID], v[0])
			}
			for _, q := range seqs {
				if g := got[fmt.Sprint(q.id)]; !slices.Equal(g, q.want) {
					t.Fatalf("sequence %v: got %v, want %v", q.id, g, q.want)
				}
			}
		})
		t.Run(mode+"/sync", func(t *testing.T) {
			for _, q := range seqs {
				for i := range 8 {
					v := q.first
					if i > 0 {
						v = q.sign * values[i-1]
					}
					r := withSeq(build(q.model, "", false, tensor.NewInt32("INPUT", []int64{1, 1}, []int32{v})), q.id, i == 0, i == 7)
					resp, err := h.client.ModelInfer(context.Background(), r)
					if err != nil {
						t.Fatalf("sequence %v request %d: %v", q.id, i, err)
					}
					if got := outputInt32(t, resp); got[0] != q.want[i] {
						t.Fatalf("sequence %v request %d: got %d, want %d", q.id, i, got[0], q.want[i])
					}
				}
			}
		})
	}
}

// TestSequenceRules: every rule of Triton's sequence batcher that answers
// a request with an error, with its exact text and class, in band on a
// stream (which keeps serving) and as the status of a unary call.
func TestSequenceRules(t *testing.T) {
	h := start(t, engine.Options{})
	const acc = "custom_sequence_int32"
	uintID := intReq(acc, "r", 1)
	uintID.Parameters = map[string]*pb.InferParameter{"sequence_id": param(uint64(5))}
	cases := []struct {
		name string
		reqs []*pb.ModelInferRequest // the last one fails
		want string
		code codes.Code
	}{
		{"batch size above 1", []*pb.ModelInferRequest{withSeq(build(acc, "r", false, tensor.NewInt32("INPUT", []int64{2, 1}, []int32{1, 2})), 70, true, false)},
			"inference request to model 'custom_sequence_int32' must specify batch-size 1 due to requirements of sequence batcher", codes.InvalidArgument},
		{"no correlation id", []*pb.ModelInferRequest{intReq(acc, "r", 1)},
			"inference request to model 'custom_sequence_int32' must specify a non-zero or non-empty correlation ID", codes.InvalidArgument},
		{"id 0", []*pb.ModelInferRequest{withSeq(intReq(acc, "r", 1), 0, true, false)},
			"inference request to model 'custom_sequence_int32' must specify a non-zero or non-empty correlation ID", codes.InvalidArgument},
		{"empty string id", []*pb.ModelInferRequest{withSeq(intReq(acc, "r", 1), "", true, false)},
			"inference request to model 'custom_sequence_int32' must specify a non-zero or non-empty correlation ID", codes.InvalidArgument},
		{"no START", []*pb.ModelInferRequest{withSeq(intReq(acc, "r", 1), 71, false, false)},
			"inference request for sequence 71 to model 'custom_sequence_int32' must specify the START flag on the first request of the sequence", codes.InvalidArgument},
		{"no START, string id", []*pb.ModelInferRequest{withSeq(intReq(acc, "r", 1), "s-72", false, true)},
			"inference request for sequence s-72 to model 'custom_sequence_int32' must specify the START flag on the first request of the sequence", codes.InvalidArgument},
		{"after END", []*pb.ModelInferRequest{withSeq(intReq(acc, "a", 1), 73, true, true), withSeq(intReq(acc, "r", 1), 73, false, false)},
			"inference request for sequence 73 to model 'custom_sequence_int32' must specify the START flag on the first request of the sequence", codes.InvalidArgument},
		{"string id, integer CORRID", []*pb.ModelInferRequest{withSeq(intReq("simple_dyna_sequence", "r", 1), "74", true, false)},
			"[request id: r] sequence batching control 'CORRID' data-type is 'BYTES', but model 'simple_dyna_sequence' expects 'UINT64'", codes.InvalidArgument},
		{"integer id, string CORRID", []*pb.ModelInferRequest{withSeq(intReq("simple_string_dyna_sequence", "", 1), 75, true, false)},
			"[request id: <id_unknown>] sequence batching control 'CORRID' data-type is 'UINT64', but model 'simple_string_dyna_sequence' expects 'BYTES'", codes.InvalidArgument},
		{"uint64 sequence_id", []*pb.ModelInferRequest{uintID},
			"invalid value type for 'sequence_id' parameter, expected int64_param or string_param.", codes.InvalidArgument},
		{"sequence_start type", []*pb.ModelInferRequest{func() *pb.ModelInferRequest {
			r := withSeq(intReq(acc, "r", 1), 76, true, false)
			r.Parameters["sequence_start"] = param(int64(1))
			return r
		}()}, "invalid value type for 'sequence_start' parameter, expected bool_param.", codes.InvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name+"/stream", func(t *testing.T) {
			s := openStream(t, h)
			send(t, s, c.reqs...)
			// The stream keeps serving after the error.
			send(t, s, withSeq(intReq(acc, "next", 5), 99, true, true))
			if err := s.CloseSend(); err != nil {
				t.Fatal(err)
			}
			all := collect(t, s)
			if len(all) != len(c.reqs)+1 {
				t.Fatalf("got %d responses, want %d: %v", len(all), len(c.reqs)+1, all)
			}
			bad := all[len(c.reqs)-1]
			if bad.GetErrorMessage() != c.want {
				t.Fatalf("error %q, want %q", bad.GetErrorMessage(), c.want)
			}
			if cls := bad.GetInferResponse().GetParameters()[errclass.Param].GetStringParam(); cls != errclass.ParamFor(c.code).GetStringParam() {
				t.Fatalf("class %q, want %v", cls, c.code)
			}
			if last := all[len(all)-1]; last.GetErrorMessage() != "" || outputInt32(t, last.GetInferResponse())[0] != 5 {
				t.Fatalf("the request after the error: %v", last)
			}
		})
		t.Run(c.name+"/unary", func(t *testing.T) {
			var err error
			for _, r := range c.reqs {
				_, err = h.client.ModelInfer(context.Background(), r)
			}
			if status.Code(err) != c.code || status.Convert(err).Message() != c.want {
				t.Fatalf("got %v, want %v %q", err, c.code, c.want)
			}
		})
	}
}

// TestSequenceStartOnActive: a START for an id that is active is no error:
// it joins the same slot and resets the model's accumulator.
func TestSequenceStartOnActive(t *testing.T) {
	h := start(t, engine.Options{})
	s := openStream(t, h)
	m := "custom_sequence_int32"
	send(t, s, withSeq(intReq(m, "1", 1), 9, true, false), withSeq(intReq(m, "2", 2), 9, false, false),
		withSeq(intReq(m, "3", 10), 9, true, false), withSeq(intReq(m, "4", 3), 9, false, true))
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var got []int32
	for _, r := range collect(t, s) {
		if r.GetErrorMessage() != "" {
			t.Fatal(r.GetErrorMessage())
		}
		got = append(got, outputInt32(t, r.GetInferResponse())[0])
	}
	if !slices.Equal(got, []int32{1, 3, 10, 13}) {
		t.Fatalf("got %v, want [1 3 10 13]", got)
	}
}

// seqLog is a sequence backend for tests: it records every executed row's
// controls and input, returns OUTPUT = INPUT, and, with hold set, waits in
// each execution until the test sends on hold.
type seqLog struct {
	hold     chan struct{}
	entered  chan struct{}
	holdOnce sync.Once
	mu       sync.Mutex
	runs     [][]seqRow
}

// releaseAll lets every execution, now and later, run to its end.
func (l *seqLog) releaseAll() { l.holdOnce.Do(func() { close(l.hold) }) }

type seqRow struct {
	id                 string
	start, end, ready  int32
	corrid             uint64
	input              int32
	instance           int
	stateIn, stateSeen int32
}

func (l *seqLog) Execute(ctx context.Context, r *backend.Request, _ backend.Responder) (*backend.Response, error) {
	res := l.ExecuteBatch(ctx, &backend.Batch{Requests: []*backend.Request{r}})[0]
	return res.Response, res.Err
}

func (l *seqLog) ExecuteBatch(ctx context.Context, b *backend.Batch) []backend.Result {
	i32 := func(r *backend.Request, name string) int32 {
		v, _ := r.Inputs[name].Int32s()
		if len(v) != 1 {
			return -1
		}
		return v[0]
	}
	var rows []seqRow
	out := make([]backend.Result, len(b.Requests))
	for i, r := range b.Requests {
		num, _, _ := backend.CorrID(r.Inputs["CORRID"])
		row := seqRow{id: r.ID, start: i32(r, "START"), end: i32(r, "END"), ready: i32(r, "READY"), corrid: num, input: i32(r, "INPUT"), instance: b.Instance}
		outs := []*tensor.Tensor{tensor.NewInt32("OUTPUT", r.Inputs["INPUT"].Shape, []int32{row.input})}
		if st := r.Inputs["STATE_IN"]; st != nil {
			// Implicit state: STATE_OUT = STATE_IN + INPUT.
			row.stateIn = i32(r, "STATE_IN")
			outs = append(outs, tensor.NewInt32("STATE_OUT", st.Shape, []int32{row.stateIn + row.input}))
			outs[0] = tensor.NewInt32("OUTPUT", r.Inputs["INPUT"].Shape, []int32{row.stateIn + row.input})
		}
		rows = append(rows, row)
		out[i].Response = &backend.Response{Outputs: outs}
	}
	l.mu.Lock()
	l.runs = append(l.runs, rows)
	l.mu.Unlock()
	if l.hold != nil {
		l.entered <- struct{}{}
		select {
		case <-l.hold:
		case <-ctx.Done():
		}
	}
	return out
}

func (l *seqLog) executions() [][]seqRow {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.runs)
}

// seqModel is a seqlog model: name, max_batch_size, idle µs, the strategy
// and more sequence_batching fields.
const seqModel = `
name: "%s"
backend: "seqlog"
max_batch_size: %d
sequence_batching {
  max_sequence_idle_microseconds: %d
  %s
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: %d kind: KIND_CPU } ]
`

// startSeqLog serves one seqlog model from config; held makes every
// execution wait for the test.
func startSeqLog(t *testing.T, config string, held bool) (*harness, *seqLog) {
	t.Helper()
	l := &seqLog{}
	if held {
		l.hold, l.entered = make(chan struct{}), make(chan struct{}, 1000)
	}
	opts := engine.Options{Backends: builtin.Backends(), ModelDir: repo(t, map[string]string{"m/config.pbtxt": config})}
	opts.Backends["seqlog"] = func(backend.Config) (backend.Backend, error) { return l, nil }
	h := start(t, opts)
	if held {
		t.Cleanup(l.releaseAll)
	}
	return h, l
}

// seqInt is a seqlog request: INPUT = v, shape [1,1] (batching) or [1].
func seqInt(id string, seqID any, start, end bool, v int32, batched bool) *pb.ModelInferRequest {
	shape := []int64{1}
	if batched {
		shape = []int64{1, 1}
	}
	return withSeq(build("m", id, false, tensor.NewInt32("INPUT", shape, []int32{v})), seqID, start, end)
}

// TestSequenceControls: the control tensors of every executed row, as
// SEQUENCE.md §3 gives them, for the direct strategy (rows are slots,
// padding rows in the gaps) and the oldest (oldest requests first, no
// padding), and the batch sizes statistics count.
func TestSequenceControls(t *testing.T) {
	pad := seqRow{ready: 0, start: 0, end: 0, corrid: 0}
	row := func(id string, seqID uint64, start, end bool, in int32) seqRow {
		r := seqRow{id: id, ready: 1, corrid: seqID, input: in}
		if start {
			r.start = 1
		}
		if end {
			r.end = 1
		}
		return r
	}
	t.Run("direct", func(t *testing.T) {
		h, l := startSeqLog(t, fmt.Sprintf(seqModel, "m", 3, 600_000_000, "direct {}", 1), true)
		s := openStream(t, h)
		send(t, s, seqInt("a1", 11, true, false, 1, true))
		<-l.entered // a1 runs; the rest queue behind it
		send(t, s, seqInt("b1", 12, true, false, 2, true), seqInt("c1", 13, true, false, 3, true), seqInt("a2", 11, false, true, 4, true))
		waitFor(t, "3 queued", func() bool { return h.srv.Queued("m") == 3 })
		l.hold <- struct{}{}
		<-l.entered // a2, b1, c1 in slots 0, 1, 2
		send(t, s, seqInt("c2", 13, false, true, 5, true))
		waitFor(t, "1 queued", func() bool { return h.srv.Queued("m") == 1 })
		l.hold <- struct{}{}
		<-l.entered // padding, padding, c2
		send(t, s, seqInt("b2", 12, false, true, 6, true))
		waitFor(t, "1 queued", func() bool { return h.srv.Queued("m") == 1 })
		l.hold <- struct{}{}
		<-l.entered // padding, b2
		l.hold <- struct{}{}
		res := recvN(t, s, 6)
		for id, rs := range res {
			if rs[0].GetErrorMessage() != "" {
				t.Fatalf("%s: %s", id, rs[0].GetErrorMessage())
			}
		}
		want := [][]seqRow{
			{row("a1", 11, true, false, 1)},
			{row("a2", 11, false, true, 4), row("b1", 12, true, false, 2), row("c1", 13, true, false, 3)},
			{pad, pad, row("c2", 13, false, true, 5)},
			{pad, row("b2", 12, false, true, 6)},
		}
		checkRows(t, l.executions(), want)
		if got := batchCounts(stats(t, h, "m")); got[1] != 1 || got[3] != 2 || got[2] != 1 {
			t.Fatalf("batch_stats %v, want {1:1, 2:1, 3:2}", got)
		}
		if st := stats(t, h, "m"); st.GetInferenceCount() != 6 || st.GetExecutionCount() != 4 {
			t.Fatalf("inference_count %d execution_count %d, want 6 and 4", st.GetInferenceCount(), st.GetExecutionCount())
		}
	})
	t.Run("direct waits for slot utilization", func(t *testing.T) {
		// Half the slots must be ready before a batch runs (or a minute
		// must pass): a alone waits for b.
		h, l := startSeqLog(t, fmt.Sprintf(seqModel, "m", 2, 600_000_000, "direct { max_queue_delay_microseconds: 60000000 minimum_slot_utilization: 1.0 }", 1), false)
		s := openStream(t, h)
		send(t, s, seqInt("a1", 31, true, true, 1, true))
		waitFor(t, "a1 queued", func() bool { return h.srv.Queued("m") == 1 })
		send(t, s, seqInt("b1", 32, true, true, 2, true))
		recvN(t, s, 2)
		checkRows(t, l.executions(), [][]seqRow{{row("a1", 31, true, true, 1), row("b1", 32, true, true, 2)}})
	})
	t.Run("oldest", func(t *testing.T) {
		h, l := startSeqLog(t, fmt.Sprintf(seqModel, "m", 2, 600_000_000, "oldest { max_candidate_sequences: 3 }", 1), true)
		s := openStream(t, h)
		send(t, s, seqInt("a1", 21, true, false, 1, true))
		<-l.entered
		send(t, s, seqInt("b1", 22, true, false, 2, true), seqInt("c1", 23, true, true, 3, true), seqInt("a2", 21, false, true, 4, true))
		waitFor(t, "3 queued", func() bool { return h.srv.Queued("m") == 3 })
		l.hold <- struct{}{}
		<-l.entered // the two oldest: b1, c1
		l.hold <- struct{}{}
		<-l.entered // a2
		l.hold <- struct{}{}
		recvN(t, s, 4)
		checkRows(t, l.executions(), [][]seqRow{
			{row("a1", 21, true, false, 1)},
			{row("b1", 22, true, false, 2), row("c1", 23, true, true, 3)},
			{row("a2", 21, false, true, 4)},
		})
	})
}

// checkRows compares executions with want, ignoring instances and state;
// padding rows are compared by their controls only.
func checkRows(t *testing.T, got, want [][]seqRow) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d executions %+v, want %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("execution %d: rows %+v, want %+v", i, got[i], want[i])
		}
		for j, w := range want[i] {
			g := got[i][j]
			if w.ready == 0 {
				g.id, g.input = "", 0
			}
			g.instance, g.stateIn = 0, 0
			if g != w {
				t.Fatalf("execution %d row %d: %+v, want %+v (all: %+v)", i, j, g, w, got)
			}
		}
	}
}

// TestSequenceBacklog: with every slot taken, new sequences wait in a FIFO
// backlog and move into a freed slot whole, in order; a backlogged request
// whose timeout passes fails its whole backlogged sequence.
func TestSequenceBacklog(t *testing.T) {
	config := fmt.Sprintf(seqModel, "m", 0, 600_000_000, "", 1) // one slot
	t.Run("order", func(t *testing.T) {
		h, l := startSeqLog(t, config, true)
		s := openStream(t, h)
		send(t, s, seqInt("a1", 1, true, false, 0, false))
		<-l.entered
		send(t, s, seqInt("b1", 2, true, false, 0, false), seqInt("c1", 3, true, false, 0, false), seqInt("b2", 2, false, false, 0, false),
			seqInt("c2", 3, false, true, 0, false), seqInt("b3", 2, false, true, 0, false), seqInt("a2", 1, false, true, 0, false))
		waitFor(t, "6 queued", func() bool { return h.srv.Queued("m") == 6 })
		l.releaseAll()
		recvN(t, s, 7)
		var order []string
		for _, run := range l.executions() {
			for _, r := range run {
				order = append(order, r.id)
			}
		}
		if want := []string{"a1", "a2", "b1", "b2", "b3", "c1", "c2"}; !slices.Equal(order, want) {
			t.Fatalf("ran %v, want %v", order, want)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		h, l := startSeqLog(t, config, true)
		s := openStream(t, h)
		send(t, s, seqInt("a1", 1, true, false, 0, false))
		<-l.entered
		b2 := seqInt("b2", 2, false, false, 0, false)
		b2.Parameters["timeout"] = param(int64(1000)) // 1 ms, for the whole backlogged sequence
		send(t, s, seqInt("b1", 2, true, false, 0, false), b2)
		// Both fail once b2's timeout passes; then b is unknown.
		waitFor(t, "the backlog to expire", func() bool { return stats(t, h, "m").GetInferenceStats().GetFail().GetCount() == 2 })
		send(t, s, seqInt("b3", 2, false, true, 0, false), seqInt("a2", 1, false, true, 0, false))
		l.releaseAll()
		res := recvN(t, s, 5)
		for _, id := range []string{"b1", "b2"} {
			if msg := res[id][0].GetErrorMessage(); msg != "timeout of the corresponding sequence has been expired" {
				t.Fatalf("%s: %q (all %v)", id, msg, res)
			}
			if cls := res[id][0].GetInferResponse().GetParameters()[errclass.Param].GetStringParam(); cls != errclass.ParamFor(codes.Unavailable).GetStringParam() {
				t.Fatalf("%s class %q, want UNAVAILABLE", id, cls)
			}
		}
		if msg := res["b3"][0].GetErrorMessage(); !strings.Contains(msg, "must specify the START flag") {
			t.Fatalf("b3 after the timeout: %q", msg)
		}
		if msg := res["a2"][0].GetErrorMessage(); msg != "" {
			t.Fatalf("a2: %q", msg)
		}
	})
}

// TestSequenceIdle: a sequence whose last request is older than
// max_sequence_idle_microseconds loses its slot (the backlogged sequence
// then runs) and its id: its next request needs START.
func TestSequenceIdle(t *testing.T) {
	h, _ := startSeqLog(t, fmt.Sprintf(seqModel, "m", 0, 20_000, "", 1), false)
	ctx := context.Background()
	if _, err := h.client.ModelInfer(ctx, seqInt("a1", 1, true, false, 0, false)); err != nil {
		t.Fatal(err)
	}
	// b waits in the backlog until a is reaped.
	if _, err := h.client.ModelInfer(ctx, seqInt("b1", 2, true, false, 0, false)); err != nil {
		t.Fatal(err)
	}
	_, err := h.client.ModelInfer(ctx, seqInt("a2", 1, false, false, 0, false))
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "inference request for sequence 1 to model 'm' must specify the START flag on the first request of the sequence" {
		t.Fatalf("a after reaping: %v", err)
	}
}

// TestSequenceCancel: a request cancelled while it waits cancels its whole
// sequence: the sequence's other waiting requests fail CANCELLED and its
// id is forgotten; the running request is not touched. The same holds in
// the backlog.
func TestSequenceCancel(t *testing.T) {
	h, l := startSeqLog(t, fmt.Sprintf(seqModel, "m", 0, 600_000_000, "", 1), true)
	s := openStream(t, h)
	send(t, s, seqInt("a1", 1, true, false, 0, false))
	<-l.entered
	send(t, s, seqInt("a2", 1, false, false, 0, false), seqInt("a3", 1, false, false, 0, false),
		seqInt("b1", 2, true, false, 0, false), seqInt("b2", 2, false, false, 0, false))
	waitFor(t, "4 queued", func() bool { return h.srv.Queued("m") == 4 })
	cancelReq := func(id string) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "m", Id: id, Parameters: map[string]*pb.InferParameter{engine.ParamCancel: param(true)}}
	}
	send(t, s, cancelReq("a2"), cancelReq("b1"))
	waitFor(t, "both sequences cancelled", func() bool { return h.srv.Queued("m") == 0 })
	send(t, s, seqInt("a4", 1, false, true, 0, false))
	l.releaseAll()
	// a1 ran; a2 and b1 (cancelled by the client) end without a response;
	// a3 and b2 fail CANCELLED; a4 needs START.
	res := recvN(t, s, 4)
	if res["a1"][0].GetErrorMessage() != "" {
		t.Fatalf("a1: %v", res["a1"])
	}
	for id, seq := range map[string]int{"a3": 1, "b2": 2} {
		r := res[id][0]
		if want := fmt.Sprintf("sequence %d of model 'm' was cancelled", seq); r.GetErrorMessage() != want {
			t.Fatalf("%s: %q, want %q", id, r.GetErrorMessage(), want)
		}
		if cls := r.GetInferResponse().GetParameters()[errclass.Param].GetStringParam(); cls != errclass.ParamFor(codes.Canceled).GetStringParam() {
			t.Fatalf("%s class %q", id, cls)
		}
	}
	if msg := res["a4"][0].GetErrorMessage(); !strings.Contains(msg, "sequence 1 to model 'm' must specify the START flag") {
		t.Fatalf("a4: %q", msg)
	}
	if runs := l.executions(); len(runs) != 1 {
		t.Fatalf("executions %+v, want a1 only", runs)
	}
}

// TestSequenceState: implicit state (sequence_batching.state with zero
// initial data) is given to the model per sequence, taken from its output,
// reset on START and never sent to the client.
func TestSequenceState(t *testing.T) {
	config := fmt.Sprintf(seqModel, "m", 4, 600_000_000, `state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
		initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } } ]`, 2)
	h, _ := startSeqLog(t, config, false)
	s := openStream(t, h)
	for i := range 3 {
		for _, seq := range []int{1, 2} {
			v := int32(seq * 10)
			send(t, s, seqInt(fmt.Sprintf("%d_%d", seq, i), seq, i == 0, i == 2, v, true))
		}
	}
	// START again on 1: the state starts from zero.
	send(t, s, seqInt("1_again", 1, true, true, 7, true))
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[string]int32{}
	for _, r := range collect(t, s) {
		if r.GetErrorMessage() != "" {
			t.Fatal(r.GetErrorMessage())
		}
		if n := len(r.GetInferResponse().GetOutputs()); n != 1 {
			t.Fatalf("%d outputs: the state output reached the client", n)
		}
		got[r.GetInferResponse().GetId()] = outputInt32(t, r.GetInferResponse())[0]
	}
	want := map[string]int32{"1_0": 10, "1_1": 20, "1_2": 30, "2_0": 20, "2_1": 40, "2_2": 60, "1_again": 7}
	for id, w := range want {
		if got[id] != w {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// TestSequenceAccumulatorStress has the shape of Triton's
// L0_sequence_stress: 8 concurrent clients, each on its own stream, run
// 200 passes against custom_sequence_int32 and check the running sum on
// every response; some passes send a request without START (an error),
// or leave a sequence without END and START the id again (a reset).
func TestSequenceAccumulatorStress(t *testing.T) {
	// The no-END passes make the engine warn of a conflict each time.
	h := start(t, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	const clients, passes = 8, 200
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() { errs <- stressClient(h, c, passes) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func stressClient(h *harness, client, passes int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := h.client.ModelStreamInfer(ctx)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(client), 17))
	id := 1000 * (client + 1)
	type expect struct {
		sum   int32
		noSeq bool
	}
	var want []expect
	n := 0
	for pass := range passes {
		switch pass % 10 {
		case 3: // no START: rejected
			n++
			if err := s.Send(withSeq(intReq("custom_sequence_int32", fmt.Sprint(n), 1), 999_000+client*1000+pass, false, false)); err != nil {
				return err
			}
			want = append(want, expect{noSeq: true})
			continue
		case 7: // no END: the next START on the id resets it
			var sum int32
			for i := range 1 + rng.IntN(3) {
				v := int32(rng.IntN(100))
				sum += v
				n++
				if err := s.Send(withSeq(intReq("custom_sequence_int32", fmt.Sprint(n), v), id, i == 0, false)); err != nil {
					return err
				}
				want = append(want, expect{sum: sum})
			}
			continue
		}
		length := 1 + rng.IntN(6)
		var sum int32
		for i := range length {
			v := int32(rng.IntN(1000)) - 300
			sum += v
			n++
			if err := s.Send(withSeq(intReq("custom_sequence_int32", fmt.Sprint(n), v), id, i == 0, i == length-1)); err != nil {
				return err
			}
			want = append(want, expect{sum: sum})
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	// A non-decoupled model's responses come in request order.
	for i := 0; ; i++ {
		r, err := s.Recv()
		if errors.Is(err, io.EOF) {
			if i != len(want) {
				return fmt.Errorf("client %d: %d responses, want %d", client, i, len(want))
			}
			return nil
		}
		if err != nil {
			return err
		}
		if i >= len(want) {
			return fmt.Errorf("client %d: more responses than requests", client)
		}
		if w := want[i]; w.noSeq {
			if !strings.Contains(r.GetErrorMessage(), "must specify the START flag") {
				return fmt.Errorf("client %d response %d: %q, want the START error", client, i, r.GetErrorMessage())
			}
			continue
		}
		if r.GetErrorMessage() != "" {
			return fmt.Errorf("client %d response %d: %s", client, i, r.GetErrorMessage())
		}
		outs, err := tensor.FromResponse(r.GetInferResponse())
		if err != nil || len(outs) != 1 {
			return fmt.Errorf("client %d response %d: outputs %v %v", client, i, outs, err)
		}
		v, err := outs[0].Int32s()
		if err != nil || len(v) != 1 || v[0] != want[i].sum {
			return fmt.Errorf("client %d response %d: got %v, want running sum %d", client, i, v, want[i].sum)
		}
	}
}

// TestTranscribe: the streaming transcriber's partial results as chunks
// arrive (the transcript up to its last space), the rest with END, two
// sequences interleaved on one stream, and stream=false (all at END).
func TestTranscribe(t *testing.T) {
	h := start(t, engine.Options{})
	chunk := func(id string, seq any, startSeq, end bool, text string, stream *bool) *pb.ModelInferRequest {
		ins := []*tensor.Tensor{tensor.NewString("text_input", text)}
		if stream != nil {
			ins = append(ins, tensor.NewBool("stream", []int64{1}, []bool{*stream}))
		}
		return withSeq(build("transcribe", id, true, ins...), seq, startSeq, end)
	}
	off := false
	s := openStream(t, h)
	a := []string{"hel", "lo wor", "ld, how", " are you"}
	b := []string{"día ", "ñandú", " über"}
	for i := range 4 {
		send(t, s, chunk(fmt.Sprintf("a%d", i), "mic-a", i == 0, i == 3, a[i], nil))
		if i < 3 {
			send(t, s, chunk(fmt.Sprintf("b%d", i), 42, i == 0, i == 2, b[i], nil))
		}
	}
	for i, c := range []string{"quiet ", "one"} {
		send(t, s, chunk(fmt.Sprintf("c%d", i), "mic-c", i == 0, i == 1, c, &off))
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	finish := map[string]string{}
	for _, r := range collect(t, s) {
		if r.GetErrorMessage() != "" {
			t.Fatal(r.GetErrorMessage())
		}
		ir := r.GetInferResponse()
		outs, err := tensor.FromResponse(ir)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			v, err := o.Strings()
			if err != nil || len(v) != 1 {
				t.Fatalf("%s: %v %v", o.Name, v, err)
			}
			switch o.Name {
			case "text_output":
				texts[ir.GetId()] = string(v[0])
			case "finish_reason":
				finish[ir.GetId()] = string(v[0])
			default:
				t.Fatalf("output %s reached the client", o.Name)
			}
		}
	}
	want := map[string]string{"a1": "hello ", "a2": "world, ", "a3": "how are you", "b0": "día ", "b1": "", "b2": "ñandú über", "c1": "quiet one"}
	for id, w := range want {
		if texts[id] != w {
			t.Fatalf("%s: %q, want %q (all %q)", id, texts[id], w, texts)
		}
	}
	if len(texts) != len(want)-1 { // b1 gained nothing: no data response
		t.Fatalf("responses with text: %q", texts)
	}
	for _, id := range []string{"a3", "b2", "c1"} {
		if finish[id] != "stop" {
			t.Fatalf("%s finish_reason %q", id, finish[id])
		}
	}
}

// TestSequenceConfig: the server advertises sequences, ModelConfig shows
// the normalized idle limit, and bad sequence_batching configs fail to load
// with Triton's texts.
func TestSequenceConfig(t *testing.T) {
	h := start(t, engine.Options{})
	md, err := h.client.ServerMetadata(context.Background(), &pb.ServerMetadataRequest{})
	if err != nil || !slices.Contains(md.GetExtensions(), "sequence") || !slices.Contains(md.GetExtensions(), "sequence(string_id)") {
		t.Fatalf("extensions %v: %v", md.GetExtensions(), err)
	}
	cfg, err := h.client.ModelConfig(context.Background(), &pb.ModelConfigRequest{Name: "simple_sequence"})
	if err != nil || cfg.GetConfig().GetSequenceBatching().GetMaxSequenceIdleMicroseconds() != 1_000_000 {
		t.Fatalf("simple_sequence config %v: %v", cfg, err)
	}
	const ctl = `{ name: "C" control [ { kind: %s } ] }`
	for _, c := range []struct{ name, batching, want string }{
		{"unnamed control", `control_input [ { control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] } ]`,
			"sequence batching control tensor must have a name for m"},
		{"tensor twice", `control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] }, { name: "C" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] } ] } ]`,
			"sequence batching control tensor 'C' is specified for multiple control kinds for m"},
		{"kind twice", `control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] }, { name: "B" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] } ]`,
			"sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m"},
		{"no values", "control_input [ " + fmt.Sprintf(ctl, "CONTROL_SEQUENCE_READY") + " ]",
			"sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_READY for m"},
		{"three values", `control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1, 2] } ] } ]`,
			"sequence batching control 'int32_false_true' must have exactly 2 entries for CONTROL_SEQUENCE_END for m"},
		{"two kinds of values", `control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] fp32_false_true: [0, 1] } ] } ]`,
			"sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and 'bool_false_true' for CONTROL_SEQUENCE_END for m"},
		{"corrid type", `control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ]`,
			"unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"},
		{"slot utilization", `direct { minimum_slot_utilization: 1.5 }`,
			"sequence batching minimum slot utilization must be in range (0.0, 1.0] for m"},
		{"preferred size", `oldest { preferred_batch_size: [ 9 ] }`,
			"sequence batching preferred batch size must be <= max batch size for m"},
		{"two initial states", `state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [1] initial_state [ { data_type: TYPE_INT32 dims: [1] zero_data: true name: "a" }, { data_type: TYPE_INT32 dims: [1] zero_data: true name: "b" } ] } ]`,
			"initial_state field for state input 'I' must contain exactly one or zero element. Found '2' elements."},
		{"initial state type", `state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [1] initial_state [ { data_type: TYPE_FP32 dims: [1] zero_data: true name: "a" } ] } ]`,
			"The data type used for 'initial_state' field of state 'I' does not match the state data type."},
		{"iterative", `iterative_sequence: true`, "iterative sequences are not supported"},
	} {
		t.Run(c.name, func(t *testing.T) {
			config := fmt.Sprintf(`name: "m" backend: "simple_sequence" max_batch_size: 8
				input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ] output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
				sequence_batching { %s }`, c.batching)
			_, err := engine.New(engine.Options{ModelDir: repo(t, map[string]string{"m/config.pbtxt": config}), Backends: builtin.Backends()})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}

package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/proto/errclass"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// sink is where one request's responses go. send delivers a non-final data
// response and blocks while the transport is backed up (ctx is the
// request's); finish delivers the last one (nil when nothing is to be
// written; err is the error an error response carries) and must not block
// past the transport's own lifetime.
type sink interface {
	send(ctx context.Context, r *pb.ModelStreamInferResponse) error
	finish(r *pb.ModelStreamInferResponse, err error)
}

// errRequestDone is the cause with which a request's context is cancelled
// once the request is over. Any other cause is a cancellation by the client
// (or the server stopping), which also ends an instance hold.
var errRequestDone = errors.New("request done")

// call is one admitted request on its way through a model.
type call struct {
	model         *Model
	req           *backend.Request
	wanted        map[string]bool // requested outputs; nil = all
	version       string          // the version the client asked for
	emptyFinal    bool
	out           sink
	batchSize     int    // the request's batch dimension; 1 for models without batching
	priority      uint64 // the priority parameter; 0 = the model's default level
	timeoutMicros int64  // the timeout parameter; <= 0 = none asked for
	seq           seqFlags

	// Set by the sequencer, for models with sequence_batching: where the
	// call waits (or why it could not be queued), then the slot it runs in
	// and which of the slot's sequences it belongs to.
	queued   *seqPending
	queueErr error
	slot     *seqSlot
	slotGen  uint64

	tel *requestTelemetry // its span and measurements; set by run
}

// newCall builds the call of a decoded request.
func newCall(m *Model, req *pb.ModelInferRequest, p requestParams) (*call, error) {
	br, wanted, batchSize, err := m.decode(req, p.model)
	if err != nil {
		return nil, err
	}
	if m.seqs != nil {
		if err := m.seqs.cfg.checkCorrID(m.Name, req.GetId(), p.seq.id); err != nil {
			return nil, err
		}
	}
	return &call{model: m, req: br, wanted: wanted, version: req.GetModelVersion(), emptyFinal: p.emptyFinal,
		batchSize: batchSize, priority: p.priority, timeoutMicros: p.timeout, seq: p.seq}, nil
}

// batch is a set of queued calls that run together on one instance. The
// first call's goroutine executes it; for a BatchBackend the others wait
// for done.
type batch struct {
	instance int
	started  time.Time // when it got its instance
	calls    []*call
	one      [1]*call // calls' storage for a batch of one
	// rows is what the backend executes when it is more than the calls'
	// requests (the sequencer's padding rows); rowOf[i] is calls[i]'s row.
	// Both are nil otherwise.
	rows  []*backend.Request
	rowOf []int
	size  int           // the sum of the rows' batch sizes
	done  chan struct{} // for batches of several: closed by the leader of a BatchBackend batch once out is set
	out   []outcome     // per call, for BatchBackend batches
	t     timings       // compute times of a BatchBackend batch, shared by its calls

	cancelled atomic.Int32 // calls whose context is done
	ctxOnce   sync.Once
	ctx       context.Context
	cancel    context.CancelFunc // ends ctx: every call cancelled, or the batch is over
}

// context is the batch's context, done once every call of the batch is
// cancelled or the batch is over.
func (b *batch) context() context.Context {
	b.ctxOnce.Do(func() { b.ctx, b.cancel = context.WithCancel(context.Background()) })
	return b.ctx
}

// memberCancelled counts a call of b whose context ended; the batch's
// context ends with the last one.
func (b *batch) memberCancelled() {
	if int(b.cancelled.Add(1)) == len(b.calls) {
		b.context()
		b.cancel()
	}
}

// outcome is a call's last response and its error, ready for the sink.
type outcome struct {
	resp *pb.ModelStreamInferResponse
	err  error
}

// timings are the moments of a call's life that statistics report.
type timings struct {
	arrived      time.Time // entered the scheduler
	started      time.Time // its batch got an instance
	computeStart time.Time // the backend was called
	computed     time.Time // the backend returned
	end          time.Time // the last response was built
}

// run executes the call to completion and always finishes its sink once,
// in the call's span (a child of ctx's trace context; see telemetry.go).
func (s *Server) run(ctx context.Context, c *call) {
	m := c.model
	t := timings{arrived: time.Now()}
	ctx = s.begin(ctx, c)
	b, err := m.sched.submit(ctx, c)
	if err != nil {
		m.stats.failed(t.arrived, time.Now())
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			c.out.finish(c.flagsOnlyFinal(), nil)
			c.tel.end(ctx, t, nil, true, nil)
			return
		}
		c.out.finish(c.errorResponse(err), err)
		c.tel.end(ctx, t, err, false, nil)
		return
	}
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	t.started = b.started

	var o outcome
	if bb, ok := m.backend.(backend.BatchBackend); ok {
		if len(b.calls) == 1 {
			executeBatch(ctx, bb, b)
		} else {
			stop := context.AfterFunc(ctx, b.memberCancelled)
			if b.calls[0] == c {
				executeBatch(b.context(), bb, b)
			}
			<-b.done
			stop()
		}
		for i, member := range b.calls {
			if member == c {
				o = b.out[i]
			}
		}
		t.computeStart, t.computed, t.end = b.t.computeStart, b.t.computed, b.t.end
	} else {
		o = executeOne(ctx, c, b.instance, &t)
	}
	if o.err != nil {
		m.stats.failed(t.arrived, t.end)
	} else {
		m.stats.succeeded(c.batchSize, t)
	}
	c.out.finish(o.resp, o.err)
	if m.seqs != nil {
		m.seqs.finished(c)
	}
	c.tel.end(ctx, t, o.err, ctx.Err() != nil, o.resp)
}

// executeBatch runs a batch of a BatchBackend: one ExecuteBatch call with
// ctx (the batch's, or the one call's own), then every call's final
// response. It frees the instance when the backend returns and closes
// b.done.
func executeBatch(ctx context.Context, bb backend.BatchBackend, b *batch) {
	m := b.calls[0].model
	reqs := b.rows
	if reqs == nil {
		reqs = make([]*backend.Request, len(b.calls))
		for i, c := range b.calls {
			reqs[i] = c.req
		}
	}
	b.t.computeStart = time.Now()
	results := bb.ExecuteBatch(ctx, &backend.Batch{Instance: b.instance, Requests: reqs})
	b.t.computed = time.Now()
	m.sched.release(b.instance)
	if b.done != nil {
		b.context()
		b.cancel()
	}
	b.out = make([]outcome, len(b.calls))
	for i, c := range b.calls {
		r := backend.Result{Err: errorf(codes.Internal, "model '%s' returned %d results for %d requests", m.Name, len(results), len(reqs))}
		if len(results) == len(reqs) {
			row := i
			if b.rowOf != nil {
				row = b.rowOf[i]
			}
			r = results[row]
		}
		b.out[i] = c.result(r.Response, true, r.Err)
	}
	b.t.started, b.t.end = b.started, time.Now()
	m.stats.executed(b.size, b.t)
	if b.done != nil {
		close(b.done)
	}
}

// executeOne runs a call on a Backend, which answers through its
// Responder and frees the instance by Release, HoldUntil, or by returning.
func executeOne(ctx context.Context, c *call, instance int, t *timings) outcome {
	m := c.model
	r := &responder{call: c, ctx: ctx, instance: instance}
	t.computeStart = time.Now()
	resp, err := m.backend.Execute(ctx, c.req, r)
	t.computed = time.Now()
	r.executed()
	final := true
	if err == nil && resp == nil && !m.Decoupled {
		// A non-decoupled model that sent its response and then a
		// flags-only final: Triton delivers the first response sent,
		// with the final flag it was sent with.
		if resp = r.firstSent(); resp == nil {
			err = errorf(codes.Internal, "model '%s' returned no response", m.Name)
		}
		final = false
	}
	o := c.result(resp, final, err)
	t.end = time.Now()
	m.stats.executed(c.batchSize, *t)
	return o
}

// result turns a backend's outcome into the call's last response.
func (c *call) result(resp *backend.Response, final bool, err error) outcome {
	// A backend error without a class is UNKNOWN, as Triton reports an
	// unclassified backend error.
	err = backend.WithCode(codes.Unknown, err)
	if c.model.seqs != nil {
		resp = c.model.seqs.keepState(c, resp)
	}
	switch {
	case err != nil:
		return outcome{c.errorResponse(err), err}
	case resp != nil:
		return outcome{c.dataResponse(resp, final), nil}
	}
	return outcome{c.flagsOnlyFinal(), nil}
}

// responder is the backend.Responder (and backend.Holder) of one call.
type responder struct {
	call     *call
	ctx      context.Context
	instance int

	mu       sync.Mutex
	released bool
	held     bool
	stopHold func() // stops the hold's timer and cancellation watch
	first    *backend.Response
}

// HoldUntil keeps the instance until t even if Execute returns first. A
// cancellation of the request (not its normal end) frees it at once.
func (r *responder) HoldUntil(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		r.Release()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released || r.held {
		return
	}
	r.held = true
	timer := time.AfterFunc(d, r.Release)
	stop := context.AfterFunc(r.ctx, func() {
		if !errors.Is(context.Cause(r.ctx), errRequestDone) {
			r.Release()
		}
	})
	r.stopHold = func() {
		timer.Stop()
		stop()
	}
}

// executed is called when Execute has returned: the instance is free now
// unless the backend holds it.
func (r *responder) executed() {
	r.mu.Lock()
	held := r.held
	r.mu.Unlock()
	if !held {
		r.Release()
	}
}

func (r *responder) Release() {
	r.mu.Lock()
	if r.released {
		r.mu.Unlock()
		return
	}
	r.released = true
	stop := r.stopHold
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
	r.call.model.sched.release(r.instance)
}

// Send delivers a decoupled model's response. A non-decoupled model's
// responses are not written as they come: the first is kept, the one
// response of the request (as in Triton), and later ones are dropped.
func (r *responder) Send(ctx context.Context, resp *backend.Response) error {
	if ctx.Err() != nil {
		return backend.ErrCancelled
	}
	if !r.call.model.Decoupled {
		r.mu.Lock()
		if r.first == nil {
			r.first = resp
		}
		r.mu.Unlock()
		return nil
	}
	if m := r.call.model; m.seqs != nil {
		if resp = m.seqs.keepState(r.call, resp); resp == nil {
			return nil
		}
	}
	if err := r.call.out.send(ctx, r.call.dataResponse(resp, false)); err != nil {
		return backend.ErrCancelled
	}
	r.call.tel.response()
	return nil
}

func (r *responder) firstSent() *backend.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

func finalParam(final bool) *pb.InferParameter {
	return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: final}}
}

func (c *call) dataResponse(resp *backend.Response, final bool) *pb.ModelStreamInferResponse {
	ir := &pb.ModelInferResponse{
		ModelName:    c.model.Name,
		ModelVersion: c.model.Version,
		Id:           c.req.ID,
		Parameters:   make(map[string]*pb.InferParameter, len(resp.Parameters)+1),
	}
	for k, v := range resp.Parameters {
		ir.Parameters[k] = v
	}
	ir.Parameters[paramFinal] = finalParam(final)
	outs := resp.Outputs
	if c.wanted != nil {
		outs = make([]*tensor.Tensor, 0, len(resp.Outputs))
		for _, t := range resp.Outputs {
			if c.wanted[t.Name] {
				outs = append(outs, t)
			}
		}
	}
	tensor.ToResponse(ir, outs)
	return &pb.ModelStreamInferResponse{InferResponse: ir}
}

// errorResponse is a model error: final, with the requested version.
func (c *call) errorResponse(err error) *pb.ModelStreamInferResponse {
	return &pb.ModelStreamInferResponse{
		ErrorMessage: err.Error(),
		InferResponse: &pb.ModelInferResponse{
			Id: c.req.ID, ModelName: c.model.Name, ModelVersion: c.version,
			Parameters: map[string]*pb.InferParameter{
				paramFinal:     finalParam(true),
				errclass.Param: errclass.ParamFor(classOf(err, codes.Unknown)),
			},
		},
	}
}

// flagsOnlyFinal is written only to clients that opted in, as Triton writes
// it: with triton_enable_empty_final_response=true.
func (c *call) flagsOnlyFinal() *pb.ModelStreamInferResponse {
	if !c.emptyFinal || !c.model.Decoupled {
		return nil
	}
	return &pb.ModelStreamInferResponse{InferResponse: &pb.ModelInferResponse{
		Id: c.req.ID, ModelName: c.model.Name, ModelVersion: c.version,
		Parameters: map[string]*pb.InferParameter{paramFinal: finalParam(true)},
	}}
}

// rejectResponse is an error before the request reached a model: the id
// (as in Triton) and the error's class (streamgate's addition).
func rejectResponse(id string, err error) *pb.ModelStreamInferResponse {
	return &pb.ModelStreamInferResponse{ErrorMessage: err.Error(), InferResponse: &pb.ModelInferResponse{
		Id:         id,
		Parameters: map[string]*pb.InferParameter{errclass.Param: errclass.ParamFor(classOf(err, codes.InvalidArgument))},
	}}
}

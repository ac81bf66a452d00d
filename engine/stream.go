package engine

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// writeQueue bounds the responses waiting for a stream's writer; backends
// block in Send (backpressure) when it is full.
const writeQueue = 256

// ModelStreamInfer serves Triton's bidirectional stream. The handler
// goroutine reads requests; one writer goroutine owns stream.Send; each
// request runs in its own goroutine, owned by the handler's WaitGroup.
// Half-close lets running requests finish, then the RPC ends OK; cancelling
// the RPC cancels every request on it.
//
// With gRPC metadata `triton_grpc_error: true` on the stream (Triton's
// "triton_grpc_error" mode) the first error of any request ends the whole
// RPC with its gRPC status instead of an in-band error_message.
func (s *Server) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	ctx, cancel := context.WithCancel(s.extractMetadata(stream.Context()))
	defer cancel()
	st := &streamState{srv: s, ctx: ctx, cancel: cancel, out: make(chan *pb.ModelStreamInferResponse, writeQueue),
		ended: make(chan struct{}), active: map[string][]*active{}, aborted: make(chan struct{})}
	if md, ok := metadata.FromIncomingContext(stream.Context()); ok {
		v := md.Get("triton_grpc_error")
		st.grpcErrors = len(v) > 0 && strings.EqualFold(v[0], "true")
	}

	if d, ok := stream.Context().Deadline(); ok {
		t := time.AfterFunc(time.Until(d)-deadlineMargin(d), st.deadlinePassed)
		defer t.Stop()
	}

	writerDone := make(chan error, 1)
	go func() { writerDone <- st.write(stream) }()

	// The reader is a goroutine of its own only so that an abort
	// (triton_grpc_error) can end the RPC while it is blocked in Recv; it
	// returns as soon as the RPC ends.
	readerDone := make(chan error, 1)
	go func() { readerDone <- st.read(stream) }()
	var recvErr error
	select {
	case recvErr = <-readerDone:
	case <-st.aborted:
	}
	st.closeIntake()
	st.reqs.Wait()
	// out is never closed: after an abort the reader may still be running
	// and may still enqueue. Every request goroutine is done, so ended
	// tells the writer to send what is queued and stop; a late enqueue
	// from the reader returns on the cancelled ctx (abort cancels it).
	close(st.ended)
	writeErr := <-writerDone
	st.mu.Lock() // the deadline's timer may still be running
	abortErr := st.abortErr
	st.mu.Unlock()
	switch {
	case abortErr != nil:
		return abortErr
	case recvErr != nil:
		return status.Convert(recvErr).Err()
	case writeErr != nil:
		return writeErr
	}
	return nil
}

// read receives requests until the client half-closes (nil) or the RPC
// fails (the error, after cancelling every request on the stream).
func (st *streamState) read(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			st.cancel()
			return err
		}
		st.handle(req)
	}
}

// closeIntake stops handle from starting requests, so that reqs.Wait sees
// every request the stream will have.
func (st *streamState) closeIntake() {
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
}

// abort ends the RPC with err's status (triton_grpc_error mode): the first
// error wins, every request is cancelled and nothing more is written.
func (st *streamState) abort(err error) { st.end(toStatus(err, codes.Internal)) }

// end ends the RPC with the status s unless it has ended already: every
// request is cancelled and nothing more is written.
func (st *streamState) end(s error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.abortErr != nil {
		return
	}
	st.abortErr = s
	close(st.aborted)
	st.cancel()
}

// deadlineMargin is how long before a stream's gRPC deadline the engine
// ends the RPC itself: 100 ms, or a quarter of what is left if that is
// less. At the deadline grpc-go's server resets the stream (RST_STREAM
// CANCEL), which a grpc core client whose own timer has not run yet (a
// busy client) reports as "Received RST_STREAM with error code 8";
// Triton's server (grpc core) ends the RPC with the status
// DEADLINE_EXCEEDED "Deadline Exceeded" instead, and so does the engine by
// ending first (L0_grpc_state_cleanup test_decoupled_timeout).
func deadlineMargin(d time.Time) time.Duration {
	return min(100*time.Millisecond, time.Until(d)/4)
}

// deadlinePassed ends the RPC as Triton does when its deadline passes:
// DEADLINE_EXCEEDED "Deadline Exceeded".
func (st *streamState) deadlinePassed() {
	st.end(status.Error(codes.DeadlineExceeded, "Deadline Exceeded"))
}

// fail delivers an error response, or in triton_grpc_error mode ends the
// RPC with the error's status.
func (st *streamState) fail(r *pb.ModelStreamInferResponse, err error) {
	if st.grpcErrors {
		st.abort(err)
		return
	}
	_ = st.enqueue(st.ctx, r)
}

// streamState is what one ModelStreamInfer RPC shares between its reader,
// writer and request goroutines.
type streamState struct {
	srv        *Server
	ctx        context.Context
	cancel     context.CancelFunc
	out        chan *pb.ModelStreamInferResponse // never closed; see ended
	ended      chan struct{}                     // closed once no request goroutine is left
	reqs       sync.WaitGroup
	grpcErrors bool          // triton_grpc_error mode
	aborted    chan struct{} // closed by abort

	mu       sync.Mutex
	closed   bool                 // no more requests start
	abortErr error                // the status the RPC ends with, once aborted
	active   map[string][]*active // by request id, for in-band cancel
	fifo     []*ordered           // non-decoupled responses, in request order
	draining bool                 // an orderedSink is handing the FIFO's head to the writer
}

// active is a running request: cancel with errRequestDone once it is over,
// with nil (context.Canceled) to cancel it.
type active struct{ cancel context.CancelCauseFunc }

// ordered is a non-decoupled request's slot in the stream's FIFO.
type ordered struct {
	resp *pb.ModelStreamInferResponse
	done bool
}

// write owns stream.Send. After a send fails, or the stream was aborted, it
// keeps draining so that no sender blocks. It returns once ended is closed
// and what was queued before it is sent.
func (st *streamState) write(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	var err error
	send := func(r *pb.ModelStreamInferResponse) {
		if err != nil || st.isAborted() {
			return
		}
		if d := st.srv.delay; d > 0 && !backend.Sleep(st.ctx, d) {
			return // the RPC ended; Send would fail
		}
		if err = stream.Send(r); err != nil {
			st.cancel()
		}
	}
	for {
		select {
		case r := <-st.out:
			send(r)
		case <-st.ended:
			for {
				select {
				case r := <-st.out:
					send(r)
				default:
					return err
				}
			}
		}
	}
}

func (st *streamState) isAborted() bool {
	select {
	case <-st.aborted:
		return true
	default:
		return false
	}
}

// enqueue hands r to the writer unless the stream is gone.
func (st *streamState) enqueue(ctx context.Context, r *pb.ModelStreamInferResponse) error {
	select {
	case st.out <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (st *streamState) handle(req *pb.ModelInferRequest) {
	id := req.GetId()
	reject := func(err error) {
		// Errors before the request reaches a model are the request's
		// fault unless they say otherwise (queue full, shutting down).
		err = backend.WithCode(codes.InvalidArgument, err)
		st.fail(rejectResponse(id, err), err)
	}
	p, err := parseParams(req.GetParameters())
	if err != nil {
		reject(err)
		return
	}
	if p.cancel {
		st.cancelID(id)
		return
	}
	if st.srv.stopping.Load() {
		reject(errShuttingDown)
		return
	}
	m, err := st.srv.lookup(req.GetModelName(), req.GetModelVersion())
	if err != nil {
		reject(err)
		return
	}
	c, err := newCall(m, req, p)
	if err != nil {
		reject(err)
		return
	}
	ctx, cancel := context.WithCancelCause(st.srv.extractParams(st.ctx, req))
	a := &active{cancel: cancel}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		cancel(errRequestDone)
		return
	}
	st.active[id] = append(st.active[id], a)
	if m.Decoupled {
		c.out = decoupledSink{st}
	} else {
		slot := &ordered{}
		st.fifo = append(st.fifo, slot)
		c.out = &orderedSink{st: st, slot: slot}
	}
	if m.seqs != nil {
		// A sequence's requests queue in the order they arrive.
		m.seqs.enqueue(c)
	}
	st.reqs.Go(func() {
		defer st.forget(id, a)
		st.srv.run(ctx, c)
	})
}

// cancelID cancels every running request with this id (in-band cancel);
// unknown ids are ignored.
func (st *streamState) cancelID(id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, a := range st.active[id] {
		a.cancel(nil)
	}
}

func (st *streamState) forget(id string, a *active) {
	a.cancel(errRequestDone)
	st.mu.Lock()
	defer st.mu.Unlock()
	list := st.active[id]
	for i, x := range list {
		if x == a {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(st.active, id)
	} else {
		st.active[id] = list
	}
}

// decoupledSink writes responses as they come.
type decoupledSink struct{ st *streamState }

func (d decoupledSink) send(ctx context.Context, r *pb.ModelStreamInferResponse) error {
	return d.st.enqueue(ctx, r)
}

func (d decoupledSink) finish(r *pb.ModelStreamInferResponse, err error) {
	switch {
	case err != nil:
		d.st.fail(r, err)
	case r != nil:
		_ = d.st.enqueue(d.st.ctx, r)
	}
}

// orderedSink releases a non-decoupled response once every earlier
// non-decoupled request on the stream has been answered.
type orderedSink struct {
	st   *streamState
	slot *ordered
}

func (o *orderedSink) send(context.Context, *pb.ModelStreamInferResponse) error { return nil }

// finish marks the request answered and hands every answered response at
// the head of the FIFO to the writer, in order. st.mu is never held while
// sending (a full write queue must not block the stream's reader, cancels
// or other requests): one goroutine at a time drains the head, and a
// request that finishes while another drains leaves its response to it.
func (o *orderedSink) finish(r *pb.ModelStreamInferResponse, err error) {
	st := o.st
	if err != nil && st.grpcErrors {
		st.abort(err)
	}
	st.mu.Lock()
	o.slot.resp, o.slot.done = r, true
	if st.draining {
		st.mu.Unlock()
		return
	}
	st.draining = true
	for {
		var ready []*pb.ModelStreamInferResponse
		for len(st.fifo) > 0 && st.fifo[0].done {
			if head := st.fifo[0].resp; head != nil {
				ready = append(ready, head)
			}
			st.fifo[0] = nil
			st.fifo = st.fifo[1:]
		}
		if len(ready) == 0 {
			st.draining = false
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()
		for _, head := range ready {
			_ = st.enqueue(st.ctx, head)
		}
		st.mu.Lock()
	}
}

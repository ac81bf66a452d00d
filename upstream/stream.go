package upstream

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

type streamState int

const (
	stateNew     streamState = iota // placed on, not open yet
	stateOpen                       // ModelStreamInfer is open
	stateClosing                    // takes no calls; half-closes once empty
	stateDead                       // ended; its calls were failed over
)

// stream is one ModelStreamInfer RPC and the calls on it. A pooled stream
// carries up to MaxRequestsPerStream calls; a dedicated one (CancelStream)
// carries one call and is cancelled with it.
//
// Goroutines: run (the sender, started by target.startStream and owned by
// the Client's WaitGroup) and the reader it starts and waits for. Only the
// sender calls Send and CloseSend, only the reader calls Recv. Everyone
// else talks to the sender through sendq and wake.
type stream struct {
	t         *target
	id        uint64
	dedicated bool
	gen       int64 // target's breakGen when created
	ctx       context.Context
	cancelCtx context.CancelFunc
	wake      chan struct{} // capacity 1: "sendq or state changed"
	load      atomic.Int32  // len(calls), readable without mu for placement
	// selfClosed is set when we end the stream on purpose (idle, or the
	// end of its dedicated call), so its end is not a failure.
	selfClosed atomic.Bool
	// closed mirrors state > stateOpen for lock-free placement scans.
	closed atomic.Bool
	// seqs counts the open sequences pinned to s: it is not idle while
	// they last (sequence.go).
	seqs atomic.Int32

	mu        sync.Mutex
	state     streamState
	opened    bool             // ModelStreamInfer succeeded
	calls     map[uint64]*Call // by routing key (Call.key)
	sendq     []sendItem
	skipped   map[uint64]bool // in-band calls ended before their request was sent
	idleSince time.Time       // when calls last became empty

	msg wireMsg // the reader's receive buffer
	// told holds the calls the reader has queued responses for since it
	// last read the connection, to be told (deliver) before it reads
	// again, when its streamRPC says when that is (readBatcher): the
	// responses one read brought reach each consumer in one wake-up.
	// Reader only.
	told    []*Call
	batched bool
}

// sendItem is a request to send: the call's request, or its in-band cancel.
type sendItem struct {
	call   *Call
	cancel bool
}

// add registers cl on s and queues its request. It fails when cl already
// ended or s is full, closing or dedicated to another call.
func (s *stream) add(cl *Call) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.finished {
		return false
	}
	s.mu.Lock()
	if s.state > stateOpen || (s.dedicated && len(s.calls) > 0) ||
		(!s.dedicated && len(s.calls) >= s.t.c.opts.MaxRequestsPerStream) {
		s.mu.Unlock()
		return false
	}
	s.calls[cl.key] = cl
	s.load.Add(1)
	s.sendq = append(s.sendq, sendItem{call: cl})
	s.mu.Unlock()
	cl.st = s
	s.t.outstanding.Add(1)
	s.signal()
	return true
}

// remove unregisters cl; false if it was not on s (any more).
func (s *stream) remove(cl *Call) bool {
	s.mu.Lock()
	ok := s.removeLocked(cl)
	s.mu.Unlock()
	if ok {
		s.t.outstanding.Add(-1)
	}
	return ok
}

func (s *stream) removeLocked(cl *Call) bool {
	if s.calls[cl.key] != cl {
		return false
	}
	delete(s.calls, cl.key)
	s.load.Add(-1)
	if len(s.calls) == 0 {
		s.idleSince = time.Now()
		if s.state == stateClosing {
			s.finishClosingLocked()
		}
	}
	return true
}

// removeAndCancel unregisters cl and cancels it upstream; false if it was
// not on s (any more).
func (s *stream) removeAndCancel(cl *Call) bool {
	s.mu.Lock()
	ok := s.removeLocked(cl)
	if ok {
		s.queueCancelLocked(cl)
	}
	s.mu.Unlock()
	if ok {
		s.t.outstanding.Add(-1)
		s.cancelUpstream(cl)
	}
	return ok
}

// queueCancelLocked queues the in-band cancel of cl, just removed from s.
// Doing it under the same lock as the removal keeps a closing stream from
// half-closing in between.
func (s *stream) queueCancelLocked(cl *Call) {
	if cl.cancelMode() == CancelInband && s.state <= stateClosing {
		s.sendq = append(s.sendq, sendItem{call: cl, cancel: true})
	}
}

// cancelUpstream completes the cancellation of cl, removed from s with its
// in-band cancel queued: it counts it, wakes the sender or, for a
// dedicated stream, cancels the RPC.
func (s *stream) cancelUpstream(cl *Call) {
	ctr := &s.t.c.ctr
	switch cl.cancelMode() {
	case CancelInband:
		ctr.cancelInband.Add(1)
		s.signal()
	case CancelStream:
		ctr.cancelStream.Add(1)
		if s.dedicated {
			s.selfClosed.Store(true)
			s.cancelCtx()
		}
	default:
		ctr.cancelNone.Add(1)
	}
}

func (s *stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// closeIfIdle starts closing s when it has had no calls for idle; true if
// it did (the caller drops s from the pool). Called with t.mu held.
func (s *stream) closeIfIdle(now time.Time, idle time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state > stateOpen || len(s.calls) > 0 || s.seqs.Load() > 0 || now.Sub(s.idleSince) < idle {
		return false
	}
	s.selfClosed.Store(true)
	s.state = stateClosing
	s.closed.Store(true)
	s.finishClosingLocked()
	return true
}

// finishClosingLocked ends a closing stream that has no calls left: the
// sender half-closes an open one; one still opening is abandoned.
func (s *stream) finishClosingLocked() {
	if s.opened {
		s.signal()
	} else {
		s.cancelCtx()
	}
}

// drain stops s taking calls, to half-close it once the calls on it are
// done (the target is shutting down), and drops it from the pool.
func (s *stream) drain() { s.stopTaking(true) }

// goingAway is drain for a stream whose connection the server is
// closing gracefully (GOAWAY): the same, except that the stream ending
// with an error rather than its half-close still counts as a break (the
// connection may be lost rather than closed).
func (s *stream) goingAway() { s.stopTaking(false) }

// stopTaking drains s; self says the close is ours alone (see
// selfClosed).
func (s *stream) stopTaking(self bool) {
	s.mu.Lock()
	if s.state <= stateOpen {
		s.selfClosed.Store(self)
		s.state = stateClosing
		s.closed.Store(true)
		if len(s.calls) == 0 {
			s.finishClosingLocked()
		}
	}
	s.mu.Unlock()
	s.t.drained(s)
}

// run is the stream's sender goroutine: it waits out the target's backoff,
// opens the RPC, starts the reader and sends until the stream ends, then
// waits for the reader.
func (s *stream) run() {
	defer s.cancelCtx()
	if d := s.t.openDelay(); d > 0 {
		tm := time.NewTimer(d)
		select {
		case <-tm.C:
		case <-s.ctx.Done():
			tm.Stop()
			s.closeWith(s.ctx.Err())
			return
		}
	}
	rpc, err := s.t.openStream(s.ctx, s.dedicated, func() bool { return s.load.Load() > 0 }, s.goingAway)
	if err != nil {
		s.closeWith(err)
		return
	}
	s.mu.Lock()
	s.opened = true
	if s.state == stateNew {
		s.state = stateOpen
	}
	s.mu.Unlock()
	s.signal() // a stream closed while opening half-closes now
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		s.readLoop(rpc)
	}()
	s.sendLoop(rpc)
	<-readerDone
}

type streamRPC interface {
	Send(*pb.ModelInferRequest) error
	RecvMsg(m any) error // into a *wireMsg (codec)
	CloseSend() error
}

// A readBatcher is a streamRPC that says when its reader is about to read
// the connection (the own-h2 transport's): OnRead's f runs then, on the
// reader, once the messages of the last read are all returned. grpc-go's
// stream cannot say so; its reader tells a call of each response at
// once.
type readBatcher interface {
	streamRPC
	OnRead(f func())
}

// sendLoop sends queued requests in order. It returns when the stream's
// context ends, after a half-close, or when Send fails (the reader then
// learns the stream's status from Recv).
func (s *stream) sendLoop(rpc streamRPC) {
	for {
		select {
		case <-s.wake:
		case <-s.ctx.Done():
			return
		}
		for {
			msg, closeSend := s.next()
			if msg != nil {
				if err := rpc.Send(msg); err != nil {
					return
				}
				continue
			}
			if closeSend {
				rpc.CloseSend()
				return
			}
			break
		}
	}
}

// next pops the next message to send. With none, closeSend says whether to
// half-close: a dedicated stream after its one request, a closing stream
// once its calls are done.
func (s *stream) next() (msg *pb.ModelInferRequest, closeSend bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.sendq) > 0 {
		it := s.sendq[0]
		s.sendq[0] = sendItem{}
		s.sendq = s.sendq[1:]
		cl := it.call
		if it.cancel {
			if s.skipped[cl.key] {
				delete(s.skipped, cl.key)
				continue
			}
			return cancelRequest(cl.req), false
		}
		if s.calls[cl.key] != cl { // ended before it was sent
			if cl.cancelMode() == CancelInband {
				if s.skipped == nil {
					s.skipped = map[uint64]bool{}
				}
				s.skipped[cl.key] = true
			}
			continue
		}
		return cl.req, false
	}
	s.sendq = nil
	return nil, s.dedicated || (s.state == stateClosing && len(s.calls) == 0)
}

// cancelRequest is the in-band cancel of req: same id and model, no
// inputs, streamgate_cancel=true.
func cancelRequest(req *pb.ModelInferRequest) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{
		ModelName:    req.GetModelName(),
		ModelVersion: req.GetModelVersion(),
		Id:           req.GetId(),
		Parameters: map[string]*pb.InferParameter{
			"streamgate_cancel": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
		},
	}
}

// readLoop is the reader goroutine: it routes every response and ends the
// stream when Recv fails.
//
// Where rpc says when it reads the connection (readBatcher), the reader
// tells the calls of what one read brought only once it has routed all
// of it, before it reads again (deliver): a call whose last response
// and final flag came in one read (a decoupled model sends the flag as
// a message of its own right after) is told once, and its consumer
// relays both at once, in one write to its client; so are several
// responses of one call in one read.
func (s *stream) readLoop(rpc streamRPC) {
	if b, ok := rpc.(readBatcher); ok {
		s.batched = true
		b.OnRead(s.deliver)
	}
	first := true
	var heard uint64 // the last health check epoch noted (target.hear)
	for {
		err := rpc.RecvMsg(&s.msg)
		if err == nil {
			s.t.hear(&heard)
			err = s.route(s.msg.b)
		}
		if err != nil {
			s.deliver()
			s.closeWith(err)
			return
		}
		if first {
			first = false
			s.t.breaks.Store(0) // the target answers: no more backoff
			if s.t.c.opts.HealthInterval < 0 {
				s.t.admit() // no health checks: re-admit passively
			}
		}
	}
}

// route hands one response, as its wire bytes, to its call without
// blocking. It ends the call on an error_message, on the final flag (or
// the one response of a non-decoupled model), and when its queue cannot
// take the response (a stalled consumer, or the memory budget spent). An
// error is a message too malformed to route: the stream breaks.
func (s *stream) route(msg []byte) error {
	h, err := scanHeader(msg)
	if err != nil {
		return status.Error(codes.Internal, "upstream: malformed ModelStreamInferResponse")
	}
	key := s.t.c.keyOf(h.id)
	s.mu.Lock()
	cl := s.calls[key]
	if cl == nil {
		s.mu.Unlock()
		s.t.c.ctr.dropped.Add(1) // a cancelled or unknown request
		return nil
	}
	var end error
	var slow pushResult
	var told Notifier // the call's, to tell of a queued response
	if len(h.errMsg) > 0 {
		e, classed := inbandError(string(h.errMsg), errorParams(msg))
		if e.Code == codes.Unavailable && !cl.delivered.Load() && cl.seq == nil {
			// Refused before it ran: the request may go elsewhere (not
			// one of a sequence, whose state is on this target).
			s.removeLocked(cl)
			s.mu.Unlock()
			s.t.outstanding.Add(-1)
			s.refused(cl, e, !classed && isShuttingDown(e.Message))
			return nil
		}
		end = e
	} else {
		final := !cl.decoupled || h.final
		if !final || !h.flagsOnly {
			slow, told = cl.q.push(msg, &s.t.c.lim)
			switch slow {
			case pushedBehind:
				// Once per call: its client fell behind by its own
				// queue bytes.
				s.t.c.ctr.behind.Add(1)
				cl.span.AddEvent("behind")
				fallthrough
			case pushed:
				if !cl.delivered.Load() && !cl.delivered.Swap(true) {
					dropInputs(cl.req) // once: no locked swap per response
				}
				cl.progress.Add(1)
			case stalled:
				end = s.t.c.errStalled
			case overBudget:
				end = s.t.c.overBudget(cl)
			}
		}
		if final && end == nil {
			end = io.EOF
		}
	}
	if end == nil {
		s.mu.Unlock()
		if told != nil {
			s.tell(cl, told)
		}
		return nil
	}
	s.removeLocked(cl)
	if !slow.ok() {
		s.queueCancelLocked(cl)
	}
	s.mu.Unlock()
	s.t.outstanding.Add(-1)
	// The call ends before its consumer hears of its last response: one
	// notify (finish's) finds both, so the consumer relays the response
	// and the end at once, knowing it is the last (a decoupled model's
	// final flag usually follows the last token within microseconds).
	if !cl.finish(end, false) && told != nil {
		told.Ready()
	}
	if !slow.ok() {
		ctr := &s.t.c.ctr
		if slow == stalled {
			ctr.stalled.Add(1)
		} else {
			ctr.overBudget.Add(1)
		}
		s.cancelUpstream(cl)
	}
	return nil
}

// tell tells n, cl's Notifier, of a response just queued: at once, or
// with the other responses of the same read (deliver) when the reader
// reads by batches.
func (s *stream) tell(cl *Call, n Notifier) {
	if !s.batched {
		n.Ready()
		return
	}
	if k := len(s.told); k == 0 || s.told[k-1] != cl { // a call's responses often come in a row
		s.told = append(s.told, cl)
	}
}

// deliver tells the calls in s.told of the responses queued for them,
// each its Notifier as it is now (one set to nil since is told nothing).
// A call that has ended meanwhile is not told: its end told it, or will,
// once all it had queued was there (finish). A call told twice (its
// responses not in a row) finds nothing the second time.
func (s *stream) deliver() {
	for i, cl := range s.told {
		s.told[i] = nil
		if cl.ended.Load() {
			continue
		}
		if n := cl.q.notifier(); n != nil {
			n.Ready()
		}
	}
	s.told = s.told[:0]
}

// dropInputs frees the inputs, parameters and outputs of req, a request
// that has delivered a response: it will not be sent again (failover
// re-sends only requests that delivered nothing), and its in-band cancel
// needs only its id and model. The sender is done with it: the target
// answered it. A held stream then keeps no prompt, and no parameter map.
func dropInputs(req *pb.ModelInferRequest) {
	req.Inputs, req.RawInputContents = nil, nil
	req.Parameters, req.Outputs = nil, nil
}

// errorParams decodes the response parameters of an in-band error (its
// error class), allocating: errors are rare.
func errorParams(msg []byte) map[string]*pb.InferParameter {
	f := &frame{}
	f.buf = msg
	if f.decode() != nil || !f.hasResp {
		return nil
	}
	return f.resp.Parameters
}

// refused handles cl, just removed from s, which s's target refused
// in-band as UNAVAILABLE before it delivered anything: its queue is full,
// or it is shutting down. A draining Triton says so in its text
// (tritonShutdown; it sends no error class): its streams take no more
// requests and it is ejected at once. Otherwise the target is asked (one ServerReady check, shared by
// the refusals that arrive meanwhile) whether it is still ready: a target
// that is not is ejected and its streams drained, as a failed health check
// does, while a full one keeps them. Then cl is retried once on another
// target, or ends with e when there is none. The reader must not block, so
// the check and the retry run in a goroutine owned by the Client.
func (s *stream) refused(cl *Call, e *Error, tritonShutdown bool) {
	t, c := s.t, s.t.c
	if tritonShutdown {
		s.drain()
		t.eject("shutting down")
		c.failover(cl, t, newError(KindUnavailable, codes.Unavailable, e.Message), false)
		return
	}
	if !c.goStream(func() {
		t.recheck(c.root)
		c.failover(cl, t, e, true)
	}) {
		cl.finish(errClosed, true)
	}
}

// closeWith ends s for cause and fails over the calls still on it. It is
// idempotent: the first cause wins.
func (s *stream) closeWith(cause error) {
	s.mu.Lock()
	if s.state == stateDead {
		s.mu.Unlock()
		return
	}
	s.state = stateDead
	s.closed.Store(true)
	calls := s.calls
	s.calls = map[uint64]*Call{}
	s.sendq = nil
	s.load.Store(0)
	s.mu.Unlock()
	s.cancelCtx()
	s.t.forget(s)
	s.t.outstanding.Add(-int64(len(calls)))

	c := s.t.c
	// A stream that ends with requests still on it broke, whoever
	// half-closed it (a draining stream whose engine dies is a break too);
	// an empty one broke only if we did not close it ourselves.
	broken := !c.isClosed() && (len(calls) > 0 || (!s.selfClosed.Load() && !errors.Is(cause, io.EOF)))
	if broken {
		s.t.noteBreak(s.gen)
		c.ctr.breaks.Add(1)
		c.opts.Logger.Warn("upstream stream broke", "target", s.t.addr, "stream", s.id, "requests", len(calls), "err", cause)
		if status.Code(cause) == codes.Unavailable {
			s.t.eject("stream: " + cause.Error())
		}
	}
	if len(calls) == 0 {
		return
	}
	why := unavailable("stream to "+s.t.addr+" ended", cause)
	if errors.Is(cause, io.EOF) {
		why = newError(KindUnavailable, codes.Unavailable, "stream to "+s.t.addr+" ended before the request")
	}
	for _, cl := range calls {
		c.failover(cl, s.t, why, false)
	}
}

package upstream

import (
	"context"
	"io"

	"google.golang.org/protobuf/proto"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Canned clients: a Client made by NewCanned places its calls on no
// target. Each Start makes a real *Call, with its queue, its Notify and
// its end on Start's context or Cancel, and hands it to an answer
// function that feeds it responses (Feed) as a stream's reader would.
// They let the layers above upstream (the gateway) run their requests
// without a network or an engine, and under testing/synctest. Package
// upstreamtest has the usual answers.

// Answer feeds the call Start has just made for req: it may send
// responses and end the call at once, or keep f and do it later (from any
// goroutine). An error refuses the request: Start returns it.
type Answer func(ctx context.Context, req *pb.ModelInferRequest, f *Feed) error

// Feed is one canned call's side that a stream's reader would be.
type Feed struct{ cl *Call }

// NewCanned returns a Client whose every Start is answered by answer.
// Only Start and its Call work on it: it has no targets to inspect.
func NewCanned(answer Answer) *Client {
	c := &Client{canned: answer, idPrefix: "canned-", resolved: make(chan struct{})}
	c.lim = queueLimits{own: 1 << 20, now: monoClock()}
	close(c.resolved)
	c.root, c.cancelRoot = context.WithCancel(context.Background())
	return c
}

// startCanned is Start on a canned Client.
func (c *Client) startCanned(ctx context.Context, req *pb.ModelInferRequest) (*Call, error) {
	cl := &Call{
		c:         c,
		req:       req,
		origID:    req.GetId(),
		decoupled: true,
		q:         newRespQueue(),
		done:      make(chan struct{}),
	}
	cl.id, cl.key = c.newID()
	cl.mode.Store(int32(CancelNone))
	if err := c.canned(ctx, req, &Feed{cl: cl}); err != nil {
		cl.finish(io.EOF, true)
		return nil, err
	}
	cl.watch(ctx)
	return cl, nil
}

// Call is the call f feeds.
func (f *Feed) Call() *Call { return f.cl }

// Send queues resps for the call's consumer and then tells its Notify
// function once, as a stream's reader does for the responses one read
// returned: the consumer sees them as one batch. False when the call has
// ended (cancelled, or its context done) and the responses were dropped.
func (f *Feed) Send(resps ...*pb.ModelInferResponse) bool {
	return f.SendEncoded(encodeAll(resps)...)
}

// encodeAll is Encode of each of resps.
func encodeAll(resps []*pb.ModelInferResponse) [][]byte {
	msgs := make([][]byte, len(resps))
	for i, r := range resps {
		msgs[i] = Encode(r)
	}
	return msgs
}

// Encode is resp as a stream carries it, for SendEncoded.
func Encode(resp *pb.ModelInferResponse) []byte {
	msg, err := proto.Marshal(&pb.ModelStreamInferResponse{InferResponse: resp})
	if err != nil {
		panic("upstream: a canned response does not marshal: " + err.Error())
	}
	return msg
}

// SendEncoded is Send for responses Encode has encoded: a test that
// sends one response many times encodes it once (encoding allocates;
// queueing and receiving it do not).
func (f *Feed) SendEncoded(msgs ...[]byte) bool {
	told, ok := f.push(msgs)
	if ok && told != nil {
		told.Ready()
	}
	return ok
}

// SendLast is Send followed by End(io.EOF), with one wake-up of the
// consumer for both, as a stream's reader delivers a decoupled model's
// final response that carries data: the consumer relays the responses
// knowing that the call has ended.
func (f *Feed) SendLast(resps ...*pb.ModelInferResponse) bool {
	told, ok := f.push(encodeAll(resps))
	if ok && !f.cl.finish(io.EOF, false) && told != nil {
		told.Ready()
	}
	return ok
}

// push queues msgs for the call's consumer and returns its Notify
// function, to tell; false when the call has ended.
func (f *Feed) push(msgs [][]byte) (told Notifier, ok bool) {
	cl := f.cl
	cl.mu.Lock()
	if cl.finished {
		cl.mu.Unlock()
		return nil, false
	}
	for _, msg := range msgs {
		var res pushResult
		if res, told = cl.q.push(msg, &cl.c.lim); !res.ok() {
			cl.mu.Unlock()
			return nil, false
		}
	}
	cl.mu.Unlock()
	cl.delivered.Store(true)
	cl.progress.Add(uint64(len(msgs)))
	return told, true
}

// End ends the call: io.EOF when it completed, otherwise the error its
// consumer gets (an *Error, as upstream's own, or any other). The
// responses sent before it are still received. Ending it again does
// nothing.
func (f *Feed) End(err error) { f.cl.finish(err, false) }

// Ended reports whether the call has ended, and why (as End was given,
// or the cancel that ended it).
func (f *Feed) Ended() (bool, error) {
	cl := f.cl
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.finished, cl.err
}

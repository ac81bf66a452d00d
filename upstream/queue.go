package upstream

import (
	"encoding/binary"
	"sync"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// respQueue is one call's bounded response queue: the stream's reader
// pushes without ever blocking, the call's consumer pops.
//
// Bounds: at most maxLen responses and maxBytes of payload (the sizes of
// their output contents, see respSize); a single response larger than
// maxBytes is still accepted into an empty queue. When a response does not
// fit, push tries to coalesce it, as a text delta, into the last queued
// response (see coalesce); otherwise the push fails and the call fails
// with KindTooSlow.
//
// The ring grows on demand (doubling, from 4) and is dropped when it
// empties after growing past 64, so an idle call costs a few pointers
// whatever maxLen is.
type respQueue struct {
	mu      sync.Mutex
	buf     []*pb.ModelInferResponse // ring
	head, n int
	bytes   int

	// ready has a token whenever a push may have made the queue non-empty
	// since the consumer last looked.
	ready chan struct{}
}

func newRespQueue() respQueue {
	return respQueue{ready: make(chan struct{}, 1)}
}

// push queues r; false when r neither fits nor coalesces. coalesced
// reports that r was merged into the last queued response instead. A
// final response (the call's last) may exceed maxLen by one, so that a
// text stream whose deltas coalesced can still end normally.
func (q *respQueue) push(r *pb.ModelInferResponse, maxLen, maxBytes int, final bool) (ok, coalesced bool) {
	size := respSize(r)
	if final {
		maxLen++
	}
	q.mu.Lock()
	switch {
	case q.n == 0 || (q.n < maxLen && q.bytes+size <= maxBytes):
		if q.n == len(q.buf) {
			q.grow()
		}
		q.buf[(q.head+q.n)%len(q.buf)] = r
		q.n++
		q.bytes += size
		ok = true
	case !final && q.bytes+size <= maxBytes:
		if added, merged := coalesce(q.buf[(q.head+q.n-1)%len(q.buf)], r); merged {
			q.bytes += added
			ok, coalesced = true, true
		}
	}
	q.mu.Unlock()
	if ok && !coalesced {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
	return ok, coalesced
}

func (q *respQueue) grow() {
	n := 2 * len(q.buf)
	if n < 4 {
		n = 4
	}
	buf := make([]*pb.ModelInferResponse, n)
	for i := range q.n {
		buf[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = buf, 0
}

// pop removes the oldest response; false when the queue is empty.
func (q *respQueue) pop() (*pb.ModelInferResponse, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return nil, false
	}
	r := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	q.bytes -= respSize(r)
	if q.n == 0 {
		q.head, q.bytes = 0, 0
		if len(q.buf) > 64 {
			q.buf = nil
		}
	}
	return r, true
}

// respSize is what r counts against QueueBytes: its output contents
// (raw, or typed with every element counted at 8 bytes or its length).
// It is cheap and never changes for a queued response except through
// coalesce, which push accounts for.
func respSize(r *pb.ModelInferResponse) int {
	n := 0
	for _, b := range r.GetRawOutputContents() {
		n += len(b)
	}
	for _, o := range r.GetOutputs() {
		c := o.GetContents()
		if c == nil {
			continue
		}
		for _, b := range c.GetBytesContents() {
			n += len(b)
		}
		n += 8 * (len(c.GetBoolContents()) + len(c.GetIntContents()) + len(c.GetInt64Contents()) +
			len(c.GetUintContents()) + len(c.GetUint64Contents()) + len(c.GetFp32Contents()) +
			len(c.GetFp64Contents()))
	}
	return n
}

// coalesce appends the text of delta to last when both are text deltas of
// the same shape: not final, no parameters but triton_final_response,
// exactly one output, BYTES with one element, same name, model, version
// and encoding (raw_output_contents or typed contents). The element bytes
// are concatenated, so text split inside a multi-byte UTF-8 character
// stays exactly as the model sent it and the gateway's UTF-8 joining sees
// the same byte stream. last must not be visible to the consumer yet.
// added is how much respSize(last) grew.
func coalesce(last, delta *pb.ModelInferResponse) (added int, ok bool) {
	if !textDelta(last) || !textDelta(delta) ||
		last.GetModelName() != delta.GetModelName() || last.GetModelVersion() != delta.GetModelVersion() {
		return 0, false
	}
	lo, do := last.GetOutputs()[0], delta.GetOutputs()[0]
	if lo.GetName() != do.GetName() {
		return 0, false
	}
	lraw, draw := last.GetRawOutputContents(), delta.GetRawOutputContents()
	switch {
	case len(lraw) == 1 && len(draw) == 1 && lo.GetContents() == nil && do.GetContents() == nil:
		a, ok1 := oneElement(lraw[0])
		b, ok2 := oneElement(draw[0])
		if !ok1 || !ok2 {
			return 0, false
		}
		merged := make([]byte, 4, 4+len(a)+len(b))
		binary.LittleEndian.PutUint32(merged, uint32(len(a)+len(b)))
		merged = append(append(merged, a...), b...)
		last.RawOutputContents[0] = merged
		return len(b), true
	case len(lraw) == 0 && len(draw) == 0 &&
		len(lo.GetContents().GetBytesContents()) == 1 && len(do.GetContents().GetBytesContents()) == 1:
		a, b := lo.Contents.BytesContents[0], do.Contents.BytesContents[0]
		lo.Contents.BytesContents[0] = append(a[:len(a):len(a)], b...)
		return len(b), true
	}
	return 0, false
}

// textDelta reports whether r is a non-final response whose only content
// is one BYTES output of shape [1].
func textDelta(r *pb.ModelInferResponse) bool {
	for k, p := range r.GetParameters() {
		if k != "triton_final_response" || p.GetBoolParam() {
			return false
		}
	}
	outs := r.GetOutputs()
	if len(outs) != 1 {
		return false
	}
	o := outs[0]
	if o.GetDatatype() != "BYTES" || len(o.GetShape()) != 1 || o.GetShape()[0] != 1 || len(o.GetParameters()) > 0 {
		return false
	}
	return true
}

// oneElement returns the element of a serialized BYTES tensor holding
// exactly one (4-byte little-endian length, then the bytes).
func oneElement(raw []byte) ([]byte, bool) {
	if len(raw) < 4 {
		return nil, false
	}
	n := binary.LittleEndian.Uint32(raw)
	if uint64(n) != uint64(len(raw)-4) {
		return nil, false
	}
	return raw[4:], true
}

package upstream

import (
	"encoding/binary"
	"math/bits"
	"sync"
	"time"

	"github.com/streamgate/streamgate/upstream/budget"
)

// respQueue is one call's responses waiting for its consumer, kept as the
// wire bytes they arrived in (about 100 bytes for a token or a
// repeat_int32 response, a tenth of the decoded message): the stream's
// reader pushes without ever blocking, the call's consumer pops and
// decodes (Call.TryRecv).
//
// Memory: the messages sit back to back in one buffer, each after a
// 4-byte length. The buffer starts at 256 bytes, doubles when a push
// needs room the consumer has not freed, and goes back to its pool
// (queueBufs) when the consumer empties it, so an idle call holds none
// (a WebSocket may hold thousands of idle calls) and a keeping-up one
// takes a buffer from the pool and gives it back for each batch. A call may hold Options.QueueBytes of
// buffer of its own; beyond that it borrows from the budget shared by
// every queue (Options.Memory), and a push the budget cannot cover fails
// the call with KindBudget. A consumer that has responses waiting and has
// taken none for Options.StallTimeout fails its call with KindTooSlow at
// the next push. Nothing else fails a call for being slow.
type respQueue struct {
	// In the order a push and a pop touch them: see Call.
	mu   sync.Mutex
	n    int // messages queued
	r, w int
	buf  []byte // messages at buf[r:w]
	// notify, when set (Call.Notify), is told after every push, once
	// the pusher holds no lock (stream.route). It is read under mu by
	// the push itself, on a cache line the push has just loaded: no
	// pointer to a pointer to chase per response.
	notify Notifier
	// ready has a token whenever a push may have made the queue non-empty
	// since the consumer last looked; made by the first consumer that
	// waits (readyChan), nil before: a consumer that waits without a
	// goroutine (Notify) needs none.
	ready chan struct{}
	pops  uint64
	// behind is true while the consumer lags (see seen).
	behind bool
	// closed: the call ended and nobody will read; pushes are dropped.
	closed bool
	// borrowed: the queue has borrowed from the shared budget once.
	borrowed bool
	bufp     *[]byte // buf's pool handle (queueBufs)
	charged  int64   // bytes of cap(buf) borrowed from the shared budget
	// seen and since: the consumer had popped seen messages when a push
	// first found it behind, at since (queueLimits.now).
	seen  uint64
	since time.Duration
}

// queueBufs recycles queue buffers by size class (bufClass: 256 bytes to
// 1 MiB), so that a call whose queue grows in a burst and is drained again
// takes a buffer another call gave back rather than allocating one. Free
// buffers count against no budget; the pools empty at garbage
// collections.
var queueBufs [13]sync.Pool

// getQueueBuf returns a buffer of size bytes (a bufClass) and its pool
// handle (nil for sizes beyond the classes).
func getQueueBuf(size int) ([]byte, *[]byte) {
	i := bits.Len(uint(size-1)) - 8 // 256 -> 0
	if i < 0 || i >= len(queueBufs) {
		return make([]byte, size), nil
	}
	if p, _ := queueBufs[i].Get().(*[]byte); p != nil {
		return (*p)[:size], p
	}
	b := make([]byte, size)
	return b, &b
}

func putQueueBuf(p *[]byte) {
	if p == nil {
		return
	}
	i := bits.Len(uint(cap(*p)-1)) - 8
	if i >= 0 && i < len(queueBufs) {
		queueBufs[i].Put(p)
	}
}

func newRespQueue() respQueue {
	return respQueue{}
}

// readyChan returns q.ready, made on first use.
func (q *respQueue) readyChan() chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ready == nil {
		q.ready = make(chan struct{}, 1)
	}
	return q.ready
}

// queueLimits are a Client's queue bounds (see Options).
type queueLimits struct {
	own   int64          // Options.QueueBytes
	bud   *budget.Budget // Options.Memory
	stall time.Duration  // Options.StallTimeout
	// now is a monotonic clock of any origin (monoClock): a push reads
	// it whenever its consumer is behind, so it is the cheap one.
	now func() time.Duration
}

// monoClock returns the time since its creation from the monotonic clock
// alone: time.Since reads one clock, time.Now two.
func monoClock() func() time.Duration {
	epoch := time.Now()
	return func() time.Duration { return time.Since(epoch) }
}

type pushResult int

const (
	pushed       pushResult = iota
	pushedBehind            // pushed, and the queue borrows from the shared budget for the first time
	stalled                 // the consumer made no progress for the stall timeout
	overBudget              // the shared budget cannot cover the growth
)

// ok reports that the response was queued.
func (r pushResult) ok() bool { return r == pushed || r == pushedBehind }

// push queues msg, copying it; n is the Notifier to tell once the
// pusher holds no lock (nil: none).
func (q *respQueue) push(msg []byte, lim *queueLimits) (_ pushResult, n Notifier) {
	need := 4 + len(msg)
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return pushed, nil
	}
	if q.n > 0 {
		switch {
		case !q.behind || q.pops != q.seen:
			q.seen, q.since, q.behind = q.pops, lim.now(), true
		case lim.stall > 0 && lim.now()-q.since >= lim.stall:
			q.mu.Unlock()
			return stalled, nil
		}
	} else {
		q.behind = false
	}
	res := pushed
	if q.w+need > len(q.buf) {
		if !q.makeRoom(need, lim) {
			q.mu.Unlock()
			return overBudget, nil
		}
		if q.charged > 0 && !q.borrowed {
			q.borrowed, res = true, pushedBehind
		}
	}
	binary.LittleEndian.PutUint32(q.buf[q.w:], uint32(len(msg)))
	copy(q.buf[q.w+4:], msg)
	q.w += need
	q.n++
	ready, n := q.ready, q.notify
	q.mu.Unlock()
	// nil: nobody waits. A token already there (the consumer has not
	// taken it yet, so it will look at the queue after this push) makes
	// another needless: skip the channel's lock.
	if ready != nil && len(ready) == 0 {
		select {
		case ready <- struct{}{}:
		default:
		}
	}
	return res, n
}

// setNotify makes n the Notifier told after every push (nil: none).
func (q *respQueue) setNotify(n Notifier) {
	q.mu.Lock()
	q.notify = n
	q.mu.Unlock()
}

// notifier is the Notifier told after every push, nil for none.
func (q *respQueue) notifier() Notifier {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.notify
}

// makeRoom makes need bytes free after q.w: it moves the queued messages
// to the front, or grows the buffer with what the budgets allow.
func (q *respQueue) makeRoom(need int, lim *queueLimits) bool {
	used := q.w - q.r
	if used+need <= len(q.buf) {
		copy(q.buf, q.buf[q.r:q.w])
		q.r, q.w = 0, used
		return true
	}
	size := max(2*len(q.buf), bufClass(used+need))
	charge := max(int64(size)-lim.own, 0)
	if more := charge - q.charged; more > 0 && !lim.bud.Take(more) {
		return false
	}
	buf, bufp := getQueueBuf(size)
	copy(buf, q.buf[q.r:q.w])
	if less := q.charged - charge; less > 0 {
		lim.bud.Give(less)
	}
	putQueueBuf(q.bufp)
	q.buf, q.bufp, q.r, q.w, q.charged = buf, bufp, 0, used, charge
	return true
}

// pop copies the oldest message into dst[:0] and removes it; false when
// the queue is empty.
func (q *respQueue) pop(dst []byte, lim *queueLimits) ([]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return dst, false
	}
	l := int(binary.LittleEndian.Uint32(q.buf[q.r:]))
	dst = append(dst[:0], q.buf[q.r+4:q.r+4+l]...)
	q.r += 4 + l
	q.n--
	q.pops++
	if q.n == 0 {
		q.r, q.w = 0, 0
		q.dropLocked(lim)
	}
	return dst, true
}

// discard drops every queued message and the buffer, and every later
// push.
func (q *respQueue) discard(lim *queueLimits) {
	q.mu.Lock()
	q.closed = true
	q.r, q.w, q.n = 0, 0, 0
	q.dropLocked(lim)
	q.mu.Unlock()
}

func (q *respQueue) dropLocked(lim *queueLimits) {
	putQueueBuf(q.bufp)
	q.buf, q.bufp = nil, nil
	lim.bud.Give(q.charged)
	q.charged = 0
}

// queued reports how many messages wait and the buffer's size.
func (q *respQueue) queued() (n, size int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n, len(q.buf)
}

package ws

// The session's sending side: the queue of frames waiting for the socket
// (sendQueue, bounded per socket and drawn from the shared memory
// budget), the one goroutine that writes them in batches, and the pings.

import (
	"context"
	encbin "encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/streamgate/streamgate/upstream/budget"
)

var (
	errSlow      = errors.New("ws: reader too slow")
	errNoMemory  = errors.New("ws: server out of memory for slow readers")
	errClosing   = errors.New("ws: socket closing")
	closedReason = map[error]string{errSlow: "reader too slow", errNoMemory: "server out of memory for slow readers"}
)

// enqueue queues the frame f for the writer.
func (s *Session) enqueue(f []byte) error {
	return s.push(len(f), func(b []byte) []byte { return append(b, f...) })
}

// push queues the frame that build appends (about size bytes) for the
// writer, without blocking. A client whose socket has more than
// QueueBytes waiting, or that the shared Memory cannot cover, gets the
// socket closed with 1008 at once.
func (s *Session) push(size int, build func([]byte) []byte) error {
	select {
	case <-s.closed:
		return errClosing
	default:
	}
	err := s.q.push(size, build, s.opts.QueueBytes, s.opts.Memory)
	if err != nil {
		s.close(websocket.StatusPolicyViolation, closedReason[err], false)
		return err
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// writeLoop is the socket's only writer of data frames: it sends every
// frame queued so far in one network write, then waits for more. When the
// session closes it sends the frames already queued (when the close asks
// for it), then the close frame.
func (s *Session) writeLoop(ctx context.Context) {
	// Writes are bounded by the connection's deadline (WriteTimeout), not
	// by a context per frame.
	wctx := context.WithoutCancel(ctx)
	var batch []byte
	writeAll := func() bool {
		for {
			batch = s.q.take(batch, s.opts.Memory)
			if len(batch) == 0 {
				return true
			}
			if !s.writeBatch(wctx, batch) {
				return false
			}
		}
	}
	for {
		select {
		case <-s.wake:
			if !writeAll() {
				s.close(websocket.StatusAbnormalClosure, "", false)
				s.conn.CloseNow()
				return
			}
		case <-s.closed:
			s.mu.Lock()
			why := s.closeWhy
			s.mu.Unlock()
			if why.flush {
				writeAll()
			}
			if why.code == websocket.StatusAbnormalClosure {
				s.conn.CloseNow()
			} else {
				s.conn.Close(why.code, why.reason) // also ends the blocking Read in Run
			}
			return
		case <-ctx.Done():
			return
		}
	}
}

// writeBatch writes the frames of one batch (sendQueue records) as one
// network write.
func (s *Session) writeBatch(ctx context.Context, batch []byte) bool {
	s.conn.out.hold()
	for len(batch) > 0 {
		n := int(encbin.LittleEndian.Uint32(batch))
		if s.conn.Write(ctx, websocket.MessageText, batch[4:4+n]) != nil {
			s.conn.out.release(0)
			return false
		}
		batch = batch[4+n:]
	}
	return s.conn.out.release(s.opts.WriteTimeout) == nil
}

func (s *Session) pingLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, s.opts.PingTimeout)
			err := s.conn.Ping(pctx)
			cancel()
			if err != nil {
				s.close(websocket.StatusAbnormalClosure, "", false)
				return
			}
		case <-s.closed:
			return
		case <-ctx.Done():
			return
		}
	}
}

// sendQueue holds a socket's frames waiting for the writer, back to back
// in one buffer, each after its 4-byte length. The writer takes them all
// at once (take), handing back the buffer of its last batch, so that two
// buffers serve the socket in turn and queuing allocates nothing once
// they have grown. Bytes count against the socket's QueueBytes until
// written.
type sendQueue struct {
	mu       sync.Mutex
	buf      []byte
	inFlight int   // bytes the writer took and has not finished writing
	charged  int64 // bytes borrowed from the shared budget
}

// keepSendBuf is the largest send buffer kept once written.
const keepSendBuf = 64 << 10

// push appends the frame build writes; errSlow or errNoMemory when the
// socket's budget or the shared one cannot take it.
func (q *sendQueue) push(size int, build func([]byte) []byte, limit int64, mem *budget.Budget) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.buf == nil {
		q.buf = make([]byte, 0, max(4+size, 512))
	}
	at := len(q.buf)
	q.buf = append(q.buf, 0, 0, 0, 0)
	q.buf = build(q.buf)
	n := len(q.buf) - at - 4
	encbin.LittleEndian.PutUint32(q.buf[at:], uint32(n))
	waiting := int64(len(q.buf) + q.inFlight)
	if waiting > limit {
		q.buf = q.buf[:at]
		return errSlow
	}
	if more := waiting - ownQueue - q.charged; more > 0 {
		if !mem.Take(more) {
			q.buf = q.buf[:at]
			return errNoMemory
		}
		q.charged += more
	}
	return nil
}

// take hands the queued frames to the writer in exchange for the buffer of
// its last batch, now written.
func (q *sendQueue) take(done []byte, mem *budget.Budget) []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.inFlight = 0
	if cap(done) > keepSendBuf {
		done = nil
	}
	batch := q.buf
	q.buf = done[:0]
	q.inFlight = len(batch)
	if over := int64(q.inFlight) - ownQueue; over < q.charged {
		mem.Give(q.charged - max(over, 0))
		q.charged = max(over, 0)
	}
	return batch
}

// drop gives back everything borrowed; the session has ended.
func (q *sendQueue) drop(mem *budget.Budget) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.buf, q.inFlight = nil, 0
	mem.Give(q.charged)
	q.charged = 0
}

package ws

// The session's sending side: the queue of frames waiting for the socket
// (sendQueue, bounded per socket and drawn from the shared memory
// budget), the one goroutine that writes them in batches, and the pings.

import (
	"context"
	"errors"
	"time"

	"github.com/coder/websocket"
)

var (
	errSlow      = errors.New("ws: reader too slow")
	errNoMemory  = errors.New("ws: server out of memory for slow readers")
	errClosing   = errors.New("ws: socket closing")
	closedReason = map[error]string{errSlow: "reader too slow", errNoMemory: "server out of memory for slow readers"}
)

// enqueue sends the frame f.
func (s *Session) enqueue(f []byte) error {
	return s.push(len(f), func(b []byte) []byte { return append(b, f...) })
}

// push sends the frame that build appends (about size bytes), without
// blocking: it is queued for the writer. A client whose socket has more
// than QueueBytes waiting, or that the shared Memory cannot cover, gets
// the socket closed with 1008 at once; one whose socket fails, closed.
func (s *Session) push(size int, build func([]byte) []byte) error {
	select {
	case <-s.closed:
		return errClosing
	default:
	}
	switch err := s.conn.out.send(size, build); err {
	case nil, errClosing:
		return err
	case errSlow, errNoMemory:
		s.close(websocket.StatusPolicyViolation, closedReason[err], false)
		return err
	default:
		s.close(websocket.StatusAbnormalClosure, "", false)
		return err
	}
}

// writeLoop writes what waits for the socket whenever a sender leaves
// some (output), until nothing does. When the session closes it writes
// what waits (when the close asks for it; else only a close frame of
// coder's that waits), then the close frame.
func (s *Session) writeLoop(ctx context.Context) {
	out := s.conn.out
	for {
		select {
		case <-out.wake:
			if out.flush() != nil {
				s.close(websocket.StatusAbnormalClosure, "", false)
				s.conn.CloseNow()
				return
			}
		case <-s.closed:
			s.mu.Lock()
			why := s.closeWhy
			s.mu.Unlock()
			out.close(!why.flush)
			out.flush() // what waits, or only coder's close frame

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

func (s *Session) pingLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, s.opts.PingTimeout)
			err := s.conn.ws.Ping(pctx)
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

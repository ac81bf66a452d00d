package resume

import (
	"context"
	"errors"
	"time"

	"github.com/streamgate/streamgate/gateway/store"
)

// attendEvery is how often a Reader tells the store it follows its
// stream; the note lasts attendFor.
const (
	attendEvery = time.Second
	attendFor   = 5 * time.Second
)

// Reader follows one stream from an event on. Its methods belong to one
// goroutine.
type Reader struct {
	m         *Manager
	sid       string
	meta      store.StreamMeta
	after     uint64 // the last id returned
	attended  time.Time
	leaseGone time.Time // since when reads find no lease; zero while there is one
	done      bool
}

// Open opens stream sid for owner, to read the events after id after. It
// returns ErrNotFound when there is no such stream or it is not owner's,
// and store.ErrUnavailable when the store cannot be reached.
func (m *Manager) Open(ctx context.Context, sid, owner string, after uint64) (*Reader, error) {
	meta, err := m.meta(ctx, sid, owner)
	if err != nil {
		return nil, err
	}
	return &Reader{m: m, sid: sid, meta: meta, after: after}, nil
}

// Meta is the stream's meta (its Format says how to write its events).
func (r *Reader) Meta() store.StreamMeta { return r.meta }

// After is the id of the last event Next returned (or Open's after).
func (r *Reader) After() uint64 { return r.after }

// Next returns the next events, in order, waiting up to wait for the
// first (none when the stream stayed quiet that long; wait 0 does not
// wait). The last event of the stream is an end event (End set); after it
// Next returns io.EOF-like nil events forever. ErrLost: the producer is
// gone without an end, and every stored event has been returned.
// store.ErrTrimmed: the events after Open's id are no longer stored.
// store.ErrUnavailable: the store cannot be reached.
func (r *Reader) Next(ctx context.Context, wait time.Duration) ([]store.Event, error) {
	if r.done {
		return nil, nil
	}
	if now := time.Now(); now.Sub(r.attended) >= attendEvery {
		actx, cancel := r.m.opCtx(ctx)
		err := r.m.st.AttendStream(actx, r.sid, attendFor)
		cancel()
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			r.m.failed("attend", r.sid, err)
			return nil, err
		}
		r.attended = now
	}
	rctx, cancel := context.WithTimeout(ctx, wait+r.m.opts.OpTimeout)
	defer cancel()
	rd, err := r.m.st.ReadStream(rctx, r.sid, r.after, 512, wait)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, ErrLost // expired while being read
	case err != nil:
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, store.ErrTrimmed) {
			r.m.failed("read", r.sid, err)
		}
		return nil, err
	}
	if len(rd.Events) == 0 && !rd.Live {
		// The lease is gone. A producer whose store stopped answering
		// for longer than its lease (a hung Redis master: its clock
		// runs on) renews it once the store answers again, which may
		// take a while (every replica reconnects at once): it is lost
		// only once the lease has stayed gone for a whole lease.
		now := time.Now()
		if r.leaseGone.IsZero() {
			r.leaseGone = now
		}
		if now.Sub(r.leaseGone) >= r.m.opts.Lease {
			return nil, ErrLost
		}
		return nil, nil
	}
	r.leaseGone = time.Time{}
	if n := len(rd.Events); n > 0 {
		r.after = max(r.after, rd.Events[n-1].ID) // an end read past the end has an id before
		r.done = rd.Events[n-1].End != ""
	}
	return rd.Events, nil
}

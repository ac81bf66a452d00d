package resume

import (
	"context"
	"sync"
	"time"

	"github.com/streamgate/streamgate/gateway/store"
)

// Producer writes one resumable stream's log. The goroutine that produces
// the stream calls Append, Flush and Close; Detach and the cancel
// function's call may come from any goroutine.
type Producer struct {
	m      *Manager
	sid    string
	meta   store.StreamMeta
	cancel func(cause error)

	next    uint64        // the id of the next Append (producer's goroutine)
	batch   []store.Event // appended since the last Flush (producer's goroutine)
	wake    chan struct{} // a batch is pending (cap 1)
	closing chan struct{} // Close was called: write the end, then stop
	created chan struct{} // closed once the first write was tried
	done    chan struct{} // the writer has returned

	mu         sync.Mutex
	pending    []store.Event // flushed, not yet written
	size       int           // bytes in pending, each taken from Options.Memory
	broken     bool          // the log was given up
	detachedAt time.Time     // when the live client left; zero while it is there
	attendedAt time.Time     // when the store last said a reader follows
}

// Start begins a resumable stream described by meta and returns its
// producer, whose log is being written from now on. cancel is called
// (from another goroutine, possibly after the stream ended, and again on
// each later renewal or tick while the cause holds: it must be
// idempotent, as a context.CancelCauseFunc is) when the stream must
// stop: ErrCancelled or ErrAbandoned.
func (m *Manager) Start(meta store.StreamMeta, cancel func(cause error)) *Producer {
	p := &Producer{
		m: m, sid: newID(), meta: meta, cancel: cancel, next: 1,
		wake: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{}),
		created: make(chan struct{}),
	}
	m.register(p)
	go p.run()
	return p
}

// ID is the stream's id (the sid).
func (p *Producer) ID() string { return p.sid }

// Append adds one event whose payload is data (copied) to the batch and
// returns its id. The batch goes to the store with the next Flush.
func (p *Producer) Append(data []byte) uint64 {
	id := p.next
	p.next++
	p.batch = append(p.batch, store.Event{ID: id, Data: append([]byte(nil), data...)})
	return id
}

// Created is closed once the stream's first write to the store (which
// creates it) has been tried: from then on any replica finds the stream,
// unless the store failed. Send the stream's id to its client after it,
// so that a cancel or read that follows at once finds the stream; it
// normally comes long before the request's first response.
func (p *Producer) Created() <-chan struct{} { return p.created }

// NextID is the id the next Append will give.
func (p *Producer) NextID() uint64 { return p.next }

// Flush hands the batch to the writer, which writes it behind the caller
// within Options.FlushInterval (at once when the pending bytes reach
// Options.BatchBytes, or after Detach). The batch's bytes are taken from Options.Memory
// until they are written; when they cannot be, the log is given up.
func (p *Producer) Flush() {
	if len(p.batch) == 0 {
		return
	}
	p.mu.Lock()
	wake := len(p.pending) == 0
	if !p.broken {
		n := 0
		for _, e := range p.batch {
			n += len(e.Data)
		}
		switch {
		case p.size+n > p.m.opts.MaxPending:
			p.giveUp("its store writes are behind by more than the stream may hold")
		case !p.m.opts.Memory.Take(int64(n)):
			p.giveUp("--queue-memory is spent")
		default:
			p.size += n
			p.pending = append(p.pending, p.batch...)
			wake = wake || p.size >= p.m.opts.BatchBytes || !p.detachedAt.IsZero()
		}
	}
	p.mu.Unlock()
	p.batch = nil
	if wake {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// giveUp abandons the log (the store is failing or slow, and the bytes
// waiting for it would pass a bound): nothing more is written, the lease
// runs out, and readers end with ErrLost after what was stored. The live
// client is not touched. p.mu is held.
func (p *Producer) giveUp(why string) {
	if !p.broken {
		p.m.opts.Logger.Warn("resumable stream is no longer resumable: its log was given up", "stream", p.sid, "reason", why)
	}
	p.broken = true
	p.m.opts.Memory.Give(int64(p.size))
	p.pending, p.size = nil, 0
}

// due reports whether the pending batch should be written without
// waiting for the interval: it reaches Options.BatchBytes, or the live
// client has left.
func (p *Producer) due() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size >= p.m.opts.BatchBytes || !p.detachedAt.IsZero()
}

// Detach notes that the live client left: unless a reader follows the
// stream, it is cancelled with ErrAbandoned after the grace period.
// From then on the writer writes each batch at once, without gathering
// for FlushInterval: a client that left is likely to resume, and what it
// missed should be in the store when it does.
func (p *Producer) Detach() {
	p.mu.Lock()
	if p.detachedAt.IsZero() {
		p.detachedAt = time.Now()
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Close ends the stream: what Append buffered and an end event of kind
// end (EndFinal, EndError, EndCancelled) with detail as its Data are
// written, then the lease is released. It waits for the writer, which
// tries the last write again while the store fails, for up to
// Options.Lease (readers wait as long for a producer whose lease is
// gone): a stream that ends while Redis fails over or hangs briefly
// still reaches its readers whole.
func (p *Producer) Close(end string, detail []byte) {
	p.batch = append(p.batch, store.Event{ID: p.next, End: end, Data: append([]byte(nil), detail...)})
	p.next++
	p.Flush()
	close(p.closing)
	<-p.done
	p.m.unregister(p)
}

// tick is how often the writer renews the lease and checks the grace
// period when no batch comes.
func (p *Producer) tick() time.Duration {
	return max(min(p.m.opts.Lease/3, p.m.opts.Grace/4), 10*time.Millisecond)
}

// retryAfter is how long the writer waits after a failed write: well
// within the lease, so that once a hung store answers again the lease is
// back before a reader takes its absence for the producer's death (a
// reader waits a whole Lease for that).
func (p *Producer) retryAfter() time.Duration {
	return max(p.tick()/4, 10*time.Millisecond)
}

// run is the writer: it writes the pending batch in one store call at
// most once per Options.FlushInterval (sooner when the batch is full or
// the stream ends), and renews the lease when the stream is quiet, until
// the end is written (or, after Close, its tries failed for a Lease).
func (p *Producer) run() {
	defer close(p.done)
	t := time.NewTicker(p.tick())
	defer t.Stop()
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	tried := false // the first write: it creates the stream
	defer func() {
		if !tried {
			close(p.created)
		}
	}()
	needMeta := true // no write has succeeded yet
	var renewed, wrote time.Time
	closing, failed := false, false
	var lastTry time.Time // after Close, when the last write may be tried until
	for {
		switch {
		case failed && closing: // wait a little before trying the end again
			retry.Reset(p.retryAfter())
			<-retry.C
		case closing, !tried: // the first write goes at once
		case failed: // wait a little before trying again
			retry.Reset(p.retryAfter())
			select {
			case <-retry.C:
			case <-p.closing:
				retry.Stop()
				closing = true
			}
		default:
			select {
			case <-p.wake:
				closing = p.hold(hold, wrote)
			case <-t.C:
			case <-p.closing:
				closing = true
			}
		}
		p.mu.Lock()
		batch, size, broken := p.pending, p.size, p.broken
		p.pending, p.size = nil, 0
		p.mu.Unlock()
		now := time.Now()
		if broken || (closing && len(batch) == 0) {
			if closing {
				return
			}
			p.checkGrace(now)
			continue
		}
		renew := needMeta || now.Sub(renewed) >= p.tick()/2
		if len(batch) > 0 || renew {
			a := store.Append{Events: batch, Renew: renew, Holder: p.m.holder, Lease: p.m.opts.Lease, TTL: p.m.opts.TTL}
			if needMeta {
				a.Meta = &p.meta
			}
			ctx, cancel := p.m.opCtx(context.Background())
			res, err := p.m.st.AppendStream(ctx, p.sid, a)
			cancel()
			wrote = now
			if !tried {
				tried = true
				close(p.created)
			}
			failed = err != nil
			if failed {
				p.m.failed("append", p.sid, err)
				if closing && lastTry.IsZero() {
					lastTry = now.Add(p.m.opts.Lease)
				}
				if closing && !now.Before(lastTry) {
					p.m.opts.Memory.Give(int64(size))
					return
				}
				p.requeue(batch, size)
			} else {
				p.m.opts.Memory.Give(int64(size))
				needMeta = false
				if len(batch) > 0 && batch[len(batch)-1].End != "" {
					return
				}
				if renew {
					renewed = now
					p.noteResult(res, now)
				}
			}
		}
		p.checkGrace(now)
	}
}

// hold waits, once a batch is pending, until Options.FlushInterval has
// passed since the last write, the batch is due, or Close is called
// (then it returns true): the batching that makes a stream cost the store
// a few round trips a second rather than one per event.
func (p *Producer) hold(timer *time.Timer, wrote time.Time) (closing bool) {
	d := p.m.opts.FlushInterval - time.Since(wrote)
	if d <= 0 || p.due() {
		return false
	}
	timer.Reset(d)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			return false
		case <-p.closing:
			return true
		case <-p.wake:
			if p.due() {
				return false
			}
		}
	}
}

// requeue puts a batch of size bytes that could not be written back in
// front of what is pending, to be written again (ids already stored are
// not stored twice), unless that makes more than MaxPending.
func (p *Producer) requeue(batch []store.Event, size int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken {
		p.m.opts.Memory.Give(int64(size))
		return
	}
	p.size += size
	p.pending = append(batch, p.pending...)
	if p.size > p.m.opts.MaxPending {
		p.giveUp("its store writes are behind by more than the stream may hold")
	}
}

// noteResult acts on what a write learnt: a cancel from another replica,
// a reader following the stream.
func (p *Producer) noteResult(res store.AppendResult, now time.Time) {
	if res.Cancelled {
		p.cancel(ErrCancelled)
	}
	if res.Attended {
		p.mu.Lock()
		p.attendedAt = now
		p.mu.Unlock()
	}
}

// checkGrace cancels the stream with ErrAbandoned once its live client
// has been gone, and no reader has followed it, for the grace period.
func (p *Producer) checkGrace(now time.Time) {
	p.mu.Lock()
	left, seen := p.detachedAt, p.attendedAt
	p.mu.Unlock()
	if left.IsZero() {
		return
	}
	if seen.After(left) {
		left = seen
	}
	if now.Sub(left) >= p.m.opts.Grace {
		p.cancel(ErrAbandoned)
	}
}

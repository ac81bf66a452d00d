package store

import (
	"context"
	"sync"
	"time"
)

// memStreams keeps streams in this process, behind one lock.
type memStreams struct {
	mu       sync.Mutex
	streams  map[string]*memStream
	watchers map[*func(string)]struct{}
	swept    time.Time
}

type memStream struct {
	meta      StreamMeta
	events    []Event // the log, oldest first (trimmed to MaxStreamEvents)
	last      uint64  // the last id written
	lease     time.Time
	seen      time.Time
	cancelled bool
	expires   time.Time
	changed   chan struct{} // closed and replaced on every append
}

func (s *memStreams) init() {
	s.streams = map[string]*memStream{}
	s.watchers = map[*func(string)]struct{}{}
}

// get returns sid's stream unless it expired; s.mu is held.
func (s *memStreams) get(sid string, now time.Time) *memStream {
	st := s.streams[sid]
	if st != nil && !now.Before(st.expires) {
		delete(s.streams, sid)
		return nil
	}
	return st
}

// sweep drops expired streams, at most once a second; s.mu is held.
func (s *memStreams) sweep(now time.Time) {
	if now.Sub(s.swept) < time.Second {
		return
	}
	s.swept = now
	for sid, st := range s.streams {
		if !now.Before(st.expires) {
			delete(s.streams, sid)
		}
	}
}

func (s *memStreams) AppendStream(_ context.Context, sid string, a Append) (AppendResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	st := s.get(sid, now)
	if st == nil {
		s.sweep(now)
		st = &memStream{changed: make(chan struct{})}
		s.streams[sid] = st
	}
	if a.Meta != nil {
		st.meta = *a.Meta
	}
	for _, e := range a.Events {
		if e.ID <= st.last {
			continue
		}
		e.Data = append([]byte(nil), e.Data...)
		st.events = append(st.events, e)
		st.last = e.ID
	}
	if len(st.events) > MaxStreamEvents+MaxStreamEvents/4 { // trimmed now and then, as Redis's MAXLEN ~
		st.events = append(st.events[:0:0], st.events[len(st.events)-MaxStreamEvents:]...)
	}
	end := ended(st.events)
	if end {
		st.lease = time.Time{}
	} else if a.Renew {
		st.lease = now.Add(a.Lease)
	}
	if end || a.Renew {
		st.expires = now.Add(a.TTL)
	}
	close(st.changed)
	st.changed = make(chan struct{})
	if !a.Renew {
		return AppendResult{}, nil
	}
	return AppendResult{Cancelled: st.cancelled, Attended: now.Before(st.seen)}, nil
}

func (s *memStreams) StreamMeta(_ context.Context, sid string) (StreamMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.get(sid, time.Now())
	if st == nil {
		return StreamMeta{}, ErrNotFound
	}
	return st.meta, nil
}

func (s *memStreams) ReadStream(ctx context.Context, sid string, after uint64, max int, wait time.Duration) (Read, error) {
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	for {
		s.mu.Lock()
		now := time.Now()
		st := s.get(sid, now)
		if st == nil {
			s.mu.Unlock()
			return Read{}, ErrNotFound
		}
		var r Read
		if len(st.events) > 0 && after < st.events[0].ID-1 { // not after+1: it may overflow
			s.mu.Unlock()
			return Read{}, ErrTrimmed
		}
		for _, e := range st.events {
			if e.ID > after && (max <= 0 || len(r.Events) < max) {
				r.Events = append(r.Events, e)
			}
		}
		if len(r.Events) == 0 && ended(st.events) { // after is at or past the end
			r.Events = append(r.Events, st.events[len(st.events)-1])
		}
		r.Live = len(r.Events) > 0 || now.Before(st.lease)
		changed := st.changed
		s.mu.Unlock()
		if len(r.Events) > 0 || !r.Live || timer == nil {
			return r, nil
		}
		select {
		case <-changed:
		case <-timer:
			timer = nil // one more look, then return
		case <-ctx.Done():
			return Read{}, ctx.Err()
		}
	}
}

func (s *memStreams) AttendStream(_ context.Context, sid string, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	st := s.get(sid, now)
	if st == nil {
		return ErrNotFound
	}
	st.seen = now.Add(d)
	return nil
}

func (s *memStreams) CancelStream(_ context.Context, sid string) error {
	s.mu.Lock()
	st := s.get(sid, time.Now())
	if st == nil {
		s.mu.Unlock()
		return ErrNotFound
	}
	st.cancelled = true
	fns := make([]func(string), 0, len(s.watchers))
	for fn := range s.watchers {
		fns = append(fns, *fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn(sid)
	}
	return nil
}

func (s *memStreams) WatchCancels(ctx context.Context, ready func(), fn func(sid string)) error {
	p := &fn
	s.mu.Lock()
	s.watchers[p] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, p)
		s.mu.Unlock()
	}()
	ready()
	<-ctx.Done()
	return nil
}

package core

import (
	"context"
	"sync"
	"time"
)

// registry tracks the live inference requests and sockets so Drain can
// wait for them, then end them.
type registry struct {
	mu       sync.Mutex
	live     map[*LiveStream]struct{}
	draining bool
	changed  chan struct{} // closed and replaced whenever live shrinks
}

// LiveStream is one registered request or socket. soft is called when
// draining starts (nil: nothing to do), hard when its time is up, and cut
// when it has not ended Options.StopTimeout after hard: cut makes its
// writes fail at once (a client that does not read cannot hold it).
type LiveStream struct {
	Soft, Hard, Cut func()
}

func newRegistry() *registry {
	return &registry{live: map[*LiveStream]struct{}{}, changed: make(chan struct{})}
}

// Add registers e; it fails once draining has begun. The returned function
// unregisters it.
func (r *registry) Add(e *LiveStream) (remove func(), ok bool) {
	if !r.add(e) {
		return nil, false
	}
	return func() { r.remove(e) }, true
}

// add registers e; false once draining has begun.
func (r *registry) add(e *LiveStream) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return false
	}
	r.live[e] = struct{}{}
	return true
}

// remove unregisters e, if registered. Only Drain waits for changes, so
// only a drain's removals signal them.
func (r *registry) remove(e *LiveStream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.live[e]; !ok {
		return
	}
	delete(r.live, e)
	if r.draining {
		close(r.changed)
		r.changed = make(chan struct{})
	}
}

// snapshot returns the live entries and a channel closed at the next
// change.
func (r *registry) snapshot() ([]*LiveStream, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*LiveStream, 0, len(r.live))
	for e := range r.live {
		out = append(out, e)
	}
	return out, r.changed
}

// Drain shuts the gateway down gracefully. At once /readyz and
// /v2/health/ready start failing, new inference requests get 503 with
// Retry-After, and WebSocket sockets stop taking requests (and close with
// 1001 as soon as they have none running). Running requests may finish
// until ctx is done; then SSE streams end with an error event, non-streaming
// requests get 503, and sockets close with 1001. What has not ended
// Options.StopTimeout later (its client does not read) has its connection
// cut. Drain returns once every request has ended: nil if all finished on
// their own, ctx.Err() if some had to be ended. It does not close
// listeners; call http.Server.Shutdown afterwards.
func (s *Server) Drain(ctx context.Context) error {
	if !s.draining.Swap(true) {
		s.metrics.draining.With().Inc()
	}
	r := s.streams
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()

	live, _ := r.snapshot()
	for _, e := range live {
		if e.Soft != nil {
			e.Soft()
		}
	}
	var forced error
	var cutoff <-chan time.Time
	for {
		live, changed := r.snapshot()
		if len(live) == 0 {
			return forced
		}
		select {
		case <-changed:
		case <-doneIf(forced == nil, ctx):
			forced = ctx.Err()
			for _, e := range live {
				e.Hard()
			}
			t := time.NewTimer(s.Opts.StopTimeout)
			defer t.Stop()
			cutoff = t.C
		case <-cutoff: // once: what is still live was ended StopTimeout ago
			cutoff = nil
			for _, e := range live {
				if e.Cut != nil {
					e.Cut()
				}
			}
		}
	}
}

// doneIf is ctx.Done() while wait holds, and nil (never ready) after.
func doneIf(wait bool, ctx context.Context) <-chan struct{} {
	if wait {
		return ctx.Done()
	}
	return nil
}

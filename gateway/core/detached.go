package core

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/streamgate/streamgate/gateway/detach"
)

// Detached streams (Options.Detach): a held event stream in net/http's
// handler goroutine costs that goroutine's stack under net/http's and the
// router's frames, net/http's background reader and its connection's
// buffers (about 21 KB). Detached, a plain stream (serveDetached) costs no
// goroutine of its own: it starts on its handler's goroutine, is relayed
// on the upstream reader (Flight.Relay) and ends where its flight ends;
// one small reader goroutine notices its client leaving and then waits
// for the connection's next request. A resumable one (DetachStream) runs
// on a goroutine of its own.

// detached is one event stream on a connection taken from net/http: what
// its start, its end and Drain share.
type detached struct {
	s *Server
	// d is the response, once taken (Drain's cut may come first).
	d atomic.Pointer[detach.Response]
	// live is registered for Drain until its connection is handed back
	// or closed (unregister).
	live LiveStream

	w      statusWriter  // the stream's, over d: its status, span and log line
	r      *http.Request // the request as the stream keeps it
	cancel context.CancelCauseFunc
	f      ErrorFormat
	route  string
}

// detach takes r's connection from net/http for an event stream answered
// in format f, with its own context (the handler's ends as it returns),
// registered for Drain until its connection is handed back or closed.
// It returns nil, doing nothing, when r cannot be detached (not
// plaintext HTTP/1.1, Options.Detach unset, already answered, draining).
//
// Slim drops what the rest of a plain stream (serveDetached) no longer
// reads of the request: its headers (about 0.5 KB a stream holds).
func (s *Server) detach(w http.ResponseWriter, r *http.Request, f ErrorFormat, slim bool) *detached {
	if s.Opts.Detach == nil || r.ProtoMajor != 1 || r.TLS != nil {
		return nil
	}
	sw := instrumented(w)
	if sw == nil || sw.status != 0 {
		return nil
	}
	// Registered for Drain from before the connection leaves net/http
	// (which no longer closes it at shutdown) until it is handed back or
	// closed: Drain's cut closes it.
	ds := &detached{s: s, f: f}
	ds.live = LiveStream{Hard: func() {}, Cut: ds.cut}
	if !s.streams.add(&ds.live) {
		return nil
	}
	d, err := detach.Hijack(sw.ResponseWriter, r)
	if err != nil {
		s.streams.remove(&ds.live)
		return nil
	}
	ds.d.Store(d)
	sw.detached = true
	// As runShallow's rest, the stream holds net/http's request rather
	// than the router's copy of it, which holds the route's path values
	// (the rest reads none), and the router's context when nothing came
	// after it.
	base, parent := r, r.Context()
	if sw.top != nil {
		base = sw.top
		if parent == sw.routed {
			parent = sw.top.Context()
		}
	}
	// The request's one cancellable context: its client leaving, Drain
	// and its end cancel it (the flight runs in it: Begin's cancel).
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	kept := *base
	kept.Body = http.NoBody // read; and it holds net/http's read buffer
	if slim {               // the rest reads its method, path, remote address and context
		kept.Header, kept.Trailer, kept.TransferEncoding = nil, nil, nil
		kept.Form, kept.PostForm, kept.MultipartForm, kept.GetBody = nil, nil, nil, nil
	}
	ds.r = kept.WithContext(ctx) // net/http ends r's context as the handler returns
	ds.cancel = cancel
	ds.w = statusWriter{ResponseWriter: d, since: sw.since, span: sw.span, start: sw.start}
	ds.route = routePattern(r)
	return ds
}

// cut is Drain's: the connection is closed, every write fails.
func (ds *detached) cut() {
	if d := ds.d.Load(); d != nil {
		d.Close()
	}
}

// unregister takes it out of Drain's registry.
func (ds *detached) unregister() { ds.s.streams.remove(&ds.live) }

// gone is the reader's: the client left, which ends the request.
func (ds *detached) gone() { ds.cancel(nil) }

// serveDetached runs j as an event stream (ServeSSE, not resumable) on
// r's connection taken from net/http, with errors in format errs, and
// reports true; the handler must then return at once, writing nothing.
// The stream starts here, on the handler's goroutine (admission, the
// upstream call); it is relayed where its responses arrive (Flight.Relay)
// and ends where its flight ends (ended), so that no goroutine waits for
// it meanwhile. It reports false, doing nothing, when r cannot be
// detached (see detach).
func (s *Server) serveDetached(w http.ResponseWriter, r *http.Request, j *Job, errs ErrorFormat, firstErrorAsEvent bool) bool {
	ds := s.detach(w, r, errs, true)
	if ds == nil {
		return false
	}
	defer ds.recover()
	out := s.NewSSESink(&ds.w, ds.r, errs, firstErrorAsEvent)
	d := ds.d.Load()
	d.Watch(ds.gone) // the client leaving ends the request, as in net/http
	f, err := s.Begin(ds.r.Context(), ds.cancel, ds.r.RemoteAddr, j, out)
	if f == nil {
		ds.ended(err)
		return true
	}
	f.Relay(ds.ended)
	return true
}

// DetachStream runs run, the rest of an event stream's request, on a
// goroutine of its own over r's connection taken from net/http, and
// reports true; the handler must then return at once, writing nothing.
// run's error, if any, is answered in format f there, and the request's
// server span, metrics and access log line are ended there too, as
// instrument ends them. A request that cannot be detached (not plaintext
// HTTP/1.1, Options.Detach unset) runs shallow instead (runShallow). It
// reports false, doing nothing, when neither can be done (already
// answered, draining): run it in place.
func (s *Server) DetachStream(w http.ResponseWriter, r *http.Request, f ErrorFormat, run HandlerFunc) bool {
	if s.Opts.Detach == nil || r.ProtoMajor != 1 || r.TLS != nil {
		return s.runShallow(w, r, f, run)
	}
	ds := s.detach(w, r, f, false)
	if ds == nil {
		return false
	}
	go ds.run(run)
	return true
}

// run is a detached request's goroutine (DetachStream).
func (ds *detached) run(run HandlerFunc) {
	defer ds.recover()
	ds.d.Load().Watch(ds.gone) // the client leaving ends the request, as in net/http
	ds.end(run(&ds.w, ds.r))
	ds.d.Load().Finish(ds.back())
	ds.unregister()
}

// ended is the end of a stream whose flight ended with err (nil: it
// completed, or its sink delivered its error): Flight.Relay's. The
// flight's end calls it on the upstream reader only with nil, once
// everything is out, so it waits for nothing: a response whose end the
// socket does not take at once is finished on a goroutine of its own.
func (ds *detached) ended(err error) {
	defer ds.recover()
	ds.end(err)
	if ds.d.Load().FinishNow(ds.back()) {
		ds.unregister()
		return
	}
	go ds.finish()
}

// finish finishes the response, waiting for the client up to the SSE
// write timeout (what is left may be the stream's last events as well
// as its last chunk: SSESink.flushLast), and hands its connection back.
func (ds *detached) finish() {
	defer ds.recover()
	d := ds.d.Load()
	if t := ds.s.Opts.SSE.Timeout(); t > 0 {
		_ = d.SetWriteDeadline(time.Now().Add(t))
	}
	d.Finish(ds.back())
	ds.unregister()
}

// end answers err, if any, in the stream's format, and ends the request's
// server span, metrics and access log line, as instrument would, and its
// context.
func (ds *detached) end(err error) {
	if err != nil {
		ds.s.writeError(&ds.w, ds.r, ds.f, err)
	}
	ds.s.endServerSpan(ds.r.Context(), ds.r, &ds.w, ds.route)
	ds.cancel(nil)
}

// back is where a finished stream's connection goes for its next
// request: the Listener, unless the gateway drains (then it is closed).
func (ds *detached) back() *detach.Listener {
	if ds.s.draining.Load() {
		return nil
	}
	return ds.s.Opts.Detach
}

// recover ends a detached stream whose start or end panicked, as net/http
// ends a handler that panics: the panic is logged with its stack and the
// connection closed.
func (ds *detached) recover() {
	v := recover()
	if v == nil {
		return
	}
	ds.s.Log.Error("panic serving a detached stream", "method", ds.r.Method, "path", ds.r.URL.Path,
		"panic", v, "stack", stack())
	ds.cut()
	ds.cancel(nil)
	ds.unregister()
}

// runShallow leaves run, the rest of an event stream's request, to
// topHandler, which runs it once the router has returned, and reports
// true; the handler must then return at once, writing nothing. A stream
// that stays in net/http (HTTP/2, TLS) then waits with none of the
// router's, instrument's and its route's frames under it: the handler
// goroutine's stack, grown by parsing the request, shrinks at the next
// collections to what the wait uses (2 or 4 KB rather than 8). run's
// error, if any, is answered in format f there, and the request's server
// span, metrics and access log line are ended there too, as instrument
// ends them. It reports false, doing nothing, when the request did not
// come through topHandler or is answered already: run it in place.
func (s *Server) runShallow(w http.ResponseWriter, r *http.Request, f ErrorFormat, run HandlerFunc) bool {
	sw := instrumented(w)
	if sw == nil || sw.top == nil || sw.rest != nil || sw.status != 0 {
		return false
	}
	sw.detached = true
	route := routePattern(r) // chi reuses its routing context once the router returns
	// The rest runs with the request as net/http gave it, in the
	// handler's context: the router's copy of it (and the copies made
	// for contexts after it) would hold the route's path values, a map,
	// for the stream's whole life, and the rest reads none. When nothing
	// was added to the context after the router (no trace, request id or
	// API key), net/http's request itself will do: the router's context
	// only adds its routing state, which it reuses once it returns.
	if r.Context() == sw.routed {
		r = sw.top
	} else {
		r = sw.top.WithContext(r.Context())
	}
	sw.rest = func() {
		if err := run(w, r); err != nil {
			s.writeError(w, r, f, err)
		}
		s.endServerSpan(r.Context(), r, sw, route)
	}
	return true
}

// runsShallow says whether w is the writer of a request running as
// topHandler's rest (runShallow).
func runsShallow(w http.ResponseWriter) bool {
	sw := instrumented(w)
	return sw != nil && sw.rest != nil
}

// instrumented is the statusWriter instrument gave the request whose
// ResponseWriter is w, nil if none.
func instrumented(w http.ResponseWriter) *statusWriter {
	for {
		if sw, ok := w.(*statusWriter); ok {
			return sw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

package gateway

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/streamgate/streamgate/gateway/detach"
)

// Detached streams (Options.Detach): a held event stream in net/http's
// handler goroutine costs that goroutine's stack under net/http's and the
// router's frames, net/http's background reader and its connection's
// buffers (about 21 KB). Detached, it costs a goroutine whose stack holds
// only the stream's own frames, one small reader goroutine, and a
// detach.Response.

// detachStream runs run, the rest of an event stream's request, on a
// goroutine of its own over r's connection taken from net/http, and
// reports true; the handler must then return at once, writing nothing.
// run's error, if any, is answered in format f there, and the request's
// server span, metrics and access log line are ended there too, as
// instrument ends them. It reports false, doing nothing, when the
// request cannot be detached (not plaintext HTTP/1.1, Options.Detach
// unset, already answered, draining): run it in place.
func (s *Server) detachStream(w http.ResponseWriter, r *http.Request, f errorFormat, run handlerFunc) bool {
	if s.opts.Detach == nil || r.ProtoMajor != 1 || r.TLS != nil {
		return false
	}
	sw := instrumented(w)
	if sw == nil || sw.status != 0 {
		return false
	}
	// Registered for Drain from before the connection leaves net/http
	// (which no longer closes it at shutdown) until it is handed back or
	// closed: Drain's cut closes it.
	var resp atomic.Pointer[detach.Response]
	remove, ok := s.streams.add(&liveStream{hard: func() {}, cut: func() {
		if d := resp.Load(); d != nil {
			d.Close()
		}
	}})
	if !ok {
		return false
	}
	d, err := detach.Hijack(sw.ResponseWriter, r)
	if err != nil {
		remove()
		return false
	}
	resp.Store(d)
	sw.detached = true
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	dr := r.WithContext(ctx) // net/http ends r's context as the handler returns
	dr.Body = http.NoBody    // read; and it holds net/http's read buffer
	w2 := &statusWriter{ResponseWriter: d, since: sw.since, span: sw.span, start: sw.start}
	go s.runDetached(d, w2, dr, cancel, f, run, routePattern(r), remove)
	return true
}

// runDetached is a detached request's goroutine.
func (s *Server) runDetached(d *detach.Response, w *statusWriter, r *http.Request, cancel context.CancelFunc, f errorFormat, run handlerFunc, route string, remove func()) {
	defer remove()
	defer func() {
		if v := recover(); v != nil { // as net/http answers a handler's panic
			s.log.Error("panic serving a detached stream", "method", r.Method, "path", r.URL.Path,
				"panic", v, "stack", stack())
			d.Close()
		}
	}()
	d.Watch(cancel) // the client leaving ends the request, as in net/http
	if err := run(w, r); err != nil {
		s.writeError(w, r, f, err)
	}
	s.endServerSpan(r.Context(), r, w, route)
	cancel()
	var back *detach.Listener
	if !s.draining.Load() {
		back = s.opts.Detach
	}
	d.Finish(back)
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

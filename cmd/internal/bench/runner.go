package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/engine/backend"
)

// transport runs requests over one protocol. do may be called from many
// goroutines at once; close is called once, after every do has returned.
type transport interface {
	// do runs request serial to its end. It calls s.begin just before
	// sending and s.response for each response that carries content (a
	// repeat OUT, a non-empty text piece). When s.response returns true
	// the client leaves at once (drops the connection or cancels the
	// request, whichever the protocol offers) and do returns
	// errClientCancel. Errors are *kindError where the kind is known.
	do(ctx context.Context, serial int32, s *stream) error
	close()
}

// errClientCancel is returned by transport.do when the bench itself left
// the stream (cancel preset).
var errClientCancel = errors.New("client cancelled")

// kindError is an error with the short kind it is counted under in the
// results ("http_503", "grpc_unavailable", "model_error", ...).
type kindError struct {
	kind string
	err  error
}

func (e *kindError) Error() string { return e.kind + ": " + e.err.Error() }
func (e *kindError) Unwrap() error { return e.err }

func errKind(kind string, err error) error { return &kindError{kind: kind, err: err} }

func errKindf(kind, format string, args ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, args...)}
}

// kindOf names the kind an error is counted under.
func kindOf(err error) string {
	var ke *kindError
	switch {
	case errors.As(err, &ke):
		return ke.kind
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return "grpc_" + codeName(st.Code())
	}
	return "other"
}

func codeName(c codes.Code) string {
	b := []byte(c.String())
	out := make([]byte, 0, len(b)+4)
	for i, ch := range b {
		if ch >= 'A' && ch <= 'Z' {
			if i > 0 {
				out = append(out, '_')
			}
			ch += 'a' - 'A'
		}
		out = append(out, ch)
	}
	return string(out)
}

// window is the measurement window: what happens in [from, to) counts.
type window struct{ from, to time.Time }

func (w window) in(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }

// recorder collects one goroutine's observations; it is not shared while
// a run is going.
type recorder struct {
	win       window
	ttft      []int64
	gaps      []int64
	stops     []int64 // cancel: client left → engine stopped
	chunks    []int64 // sequence: chunk sent → its partial result
	resumes   []int64 // sse-resume: GET /v1/streams sent → first event
	responses int64
	completed int64
	cancelled int64
	errors    map[string]int64
	examples  map[string]string
}

func newRecorder(w window) *recorder {
	return &recorder{win: w, errors: map[string]int64{}, examples: map[string]string{}}
}

func (r *recorder) fail(err error) {
	k := kindOf(err)
	r.errors[k]++
	if _, ok := r.examples[k]; !ok {
		r.examples[k] = err.Error()
	}
}

// merge adds o into r.
func (r *recorder) merge(o *recorder) {
	r.ttft = append(r.ttft, o.ttft...)
	r.gaps = append(r.gaps, o.gaps...)
	r.stops = append(r.stops, o.stops...)
	r.resumes = append(r.resumes, o.resumes...)
	r.chunks = append(r.chunks, o.chunks...)
	r.responses += o.responses
	r.completed += o.completed
	r.cancelled += o.cancelled
	for k, v := range o.errors {
		r.errors[k] += v
	}
	for k, v := range o.examples {
		if _, ok := r.examples[k]; !ok {
			r.examples[k] = v
		}
	}
}

// stream is the observation of one request, owned by the goroutine running
// it.
type stream struct {
	rec         *recorder
	start, last time.Time
	n           int
	cancelAt    int // leave after this many responses; 0 never
	left        time.Time
	pending     []time.Time // sequence: send times of the chunks not answered yet
}

// sent marks one chunk of a sequence sent.
func (s *stream) sent() { s.pending = append(s.pending, time.Now()) }

// partial records the partial result of the oldest chunk not answered yet
// (each chunk of the sequence preset gains exactly one), and counts it as
// a response.
func (s *stream) partial() {
	if len(s.pending) > 0 {
		sent, now := s.pending[0], time.Now()
		s.pending = s.pending[1:]
		if !sent.Before(s.rec.win.from) && now.Before(s.rec.win.to) {
			s.rec.chunks = append(s.rec.chunks, int64(now.Sub(sent)))
		}
	}
	s.response()
}

// begin marks the moment the request is sent.
func (s *stream) begin() { s.start = time.Now() }

// resumed records the latency of resuming the stream (sse-resume).
func (s *stream) resumed(d time.Duration) {
	if s.rec.win.in(time.Now()) {
		s.rec.resumes = append(s.rec.resumes, int64(d))
	}
}

// response records one response and reports whether the client should
// leave now.
func (s *stream) response() bool {
	now := time.Now()
	r := s.rec
	if s.n == 0 {
		if !s.start.Before(r.win.from) && now.Before(r.win.to) {
			r.ttft = append(r.ttft, int64(now.Sub(s.start)))
		}
	} else if r.win.in(now) {
		r.gaps = append(r.gaps, int64(now.Sub(s.last)))
	}
	if r.win.in(now) {
		r.responses++
	}
	s.last = now
	s.n++
	if s.cancelAt > 0 && s.n >= s.cancelAt {
		s.left = time.Now()
		return true
	}
	return false
}

// runSpec is one transport's run.
type runSpec struct {
	name        string
	tr          transport
	wl          workload
	conc        int
	rate        float64 // > 0: open loop, requests/s; conc caps in-flight
	duration    time.Duration
	warmup      time.Duration
	ramp        time.Duration
	requests    int64 // > 0: stop after starting this many
	cancelAfter int
	tracker     *tracker // engine-side stop times (cancel), or nil
	pids        []int    // server processes to measure
	embedded    bool
	gc          func(window) *GCStats // the spawned server's GC, or nil
	gatewayGC   func(window) *GCStats // the spawned gateway's alone (split), or nil
	gatewayPID  int                   // > 0: also measure this process's RSS alone
	serial      *atomic.Int32
	// atWindowEnd, if set, runs when the window closes, before the load
	// is stopped (e.g. to take a heap profile at full load).
	atWindowEnd func()
}

// run drives spec's load and returns its result.
func run(ctx context.Context, spec runSpec) *Result {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	win := window{from: start.Add(spec.warmup), to: start.Add(spec.warmup + spec.duration)}
	var active atomic.Int64
	mon := startMonitor(spec.pids, spec.gatewayPID, win, &active, spec.embedded)
	stopTimer := time.AfterFunc(spec.warmup+spec.duration, func() {
		if spec.atWindowEnd != nil {
			spec.atWindowEnd()
		}
		cancel()
	})
	defer stopTimer.Stop()

	var started atomic.Int64
	more := func() bool {
		return runCtx.Err() == nil && (spec.requests <= 0 || started.Add(1) <= spec.requests)
	}
	one := func(rec *recorder) bool {
		s := stream{rec: rec, cancelAt: spec.cancelAfter}
		serial := spec.serial.Add(1)
		active.Add(1)
		err := spec.tr.do(runCtx, serial, &s)
		active.Add(-1)
		end := time.Now()
		switch {
		case errors.Is(err, errClientCancel):
			if win.in(s.left) {
				rec.cancelled++
			}
			if spec.tracker != nil {
				stopped, ok := spec.tracker.await(ctx, serial, 5*time.Second)
				switch {
				case !ok && ctx.Err() == nil:
					rec.fail(errKindf("engine_kept_running", "request %d still running 5s after the client left", serial))
				case ok && win.in(s.left):
					rec.stops = append(rec.stops, max(int64(stopped.Sub(s.left)), 0))
				}
			}
		case err != nil:
			if spec.tracker != nil {
				spec.tracker.forget(serial)
			}
			if runCtx.Err() != nil {
				return true // cut by the end of the run
			}
			if !end.Before(win.from) {
				rec.fail(err)
			}
			return false
		default:
			if spec.tracker != nil {
				spec.tracker.forget(serial)
			}
			if win.in(end) {
				rec.completed++
			}
		}
		return true
	}

	var mu sync.Mutex
	total := newRecorder(win)
	collect := func(r *recorder) {
		mu.Lock()
		total.merge(r)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	if spec.rate > 0 {
		openLoop(runCtx, spec, win, more, one, collect, &wg)
	} else {
		for i := range spec.conc {
			wg.Go(func() {
				rec := newRecorder(win)
				defer collect(rec)
				if spec.ramp > 0 && !backend.Sleep(runCtx, time.Duration(int64(spec.ramp)*int64(i)/int64(spec.conc))) {
					return
				}
				for more() {
					if !one(rec) {
						backend.Sleep(runCtx, 10*time.Millisecond) // no hot loop on a failing target
					}
				}
			})
		}
	}
	wg.Wait()
	end := time.Now()
	if end.Before(win.to) {
		win.to = end
	}
	snap := mon.stop()
	r := spec.result(total, win, snap)
	switch {
	case spec.gc != nil:
		r.GC = spec.gc(win)
	case snap.gc != nil:
		r.GC = snap.gc
	}
	if r.GC != nil {
		cpu := r.ClientCPU // embedded: the whole process
		if r.ServerCPU != nil {
			cpu = *r.ServerCPU
		}
		if cpu > 0 {
			r.GC.CPUShare = r.GC.CPUSeconds / cpu
		}
	}
	if snap.serverCallsOK {
		r.ServerCalls = &snap.serverCalls
	}
	if snap.gwCallsOK {
		r.GatewayCalls = &snap.gwCalls
	}
	if snap.gwCPUOK {
		v := snap.gwCPU
		r.GatewayCPU = &v
		if spec.gatewayGC != nil {
			r.GatewayGC = spec.gatewayGC(win)
			if v > 0 {
				r.GatewayGC.CPUShare = r.GatewayGC.CPUSeconds / v
			}
		}
	}
	r.LivePerStreamKB = r.GC.livePerStreamKB(r.StreamsAtFull)
	r.GatewayLivePerStreamKB = r.GatewayGC.livePerStreamKB(r.StreamsAtFull)
	return r
}

// openLoop starts requests at spec.rate, each in its own goroutine, with at
// most spec.conc in flight; a request due when none is free is counted as
// an "overload" error.
func openLoop(ctx context.Context, spec runSpec, win window, more func() bool, one func(*recorder) bool, collect func(*recorder), wg *sync.WaitGroup) {
	free := make(chan *recorder, spec.conc)
	for range spec.conc {
		free <- newRecorder(win)
	}
	late := newRecorder(win)
	defer func() {
		wg.Wait()
		close(free)
		for r := range free {
			collect(r)
		}
		collect(late)
	}()
	interval := time.Duration(float64(time.Second) / spec.rate)
	next := time.Now()
	for more() {
		if !backend.Sleep(ctx, time.Until(next)) {
			return
		}
		next = next.Add(interval)
		select {
		case rec := <-free:
			wg.Go(func() {
				defer func() { free <- rec }()
				one(rec)
			})
		default:
			if win.in(time.Now()) {
				late.fail(errKindf("overload", "%d requests in flight, none free", spec.conc))
			}
		}
	}
}

// result assembles the figures of a finished run.
func (spec runSpec) result(rec *recorder, win window, snap monitorSnapshot) *Result {
	secs := win.to.Sub(win.from).Seconds()
	r := &Result{
		Transport:    spec.name,
		Model:        spec.wl.Model,
		Workload:     spec.wl.String(),
		Concurrency:  spec.conc,
		Rate:         spec.rate,
		Seconds:      secs,
		Requests:     rec.completed,
		Cancelled:    rec.cancelled,
		Responses:    rec.responses,
		TTFT:         summarize(rec.ttft),
		Inter:        summarize(rec.gaps),
		Errors:       rec.errors,
		ErrorSamples: rec.examples,
		Embedded:     spec.embedded,
		ClientCPU:    snap.clientCPU,
		Cores:        runtime.NumCPU(),
	}
	if len(rec.stops) > 0 {
		d := summarize(rec.stops)
		r.CancelStop = &d
	}
	if len(rec.chunks) > 0 {
		d := summarize(rec.chunks)
		r.ChunkLatency = &d
	}
	if len(rec.resumes) > 0 {
		d := summarize(rec.resumes)
		r.Resume = &d
	}
	if secs > 0 {
		r.RespPerSec = float64(rec.responses) / secs
		r.ReqPerSec = float64(rec.completed+rec.cancelled) / secs
	}
	if snap.serverOK && !spec.embedded {
		v := snap.serverCPU
		r.ServerCPU = &v
	}
	if snap.rssOK {
		r.RSSStartMB = float64(snap.rssStart) / (1 << 20)
		r.RSSMaxMB = float64(snap.rssMax) / (1 << 20)
		r.RSSAtFullMB = float64(snap.rssAtFull) / (1 << 20)
		r.StreamsAtFull = snap.activeMax
		if snap.activeMax > 0 && snap.rssAtFull > snap.rssStart {
			r.RSSPerStreamKB = float64(snap.rssAtFull-snap.rssStart) / 1024 / float64(snap.activeMax)
		}
		if snap.gwOK && snap.activeMax > 0 {
			r.GatewayRSSStartMB = float64(snap.gwStart) / (1 << 20)
			r.GatewayRSSAtFullMB = float64(snap.gwAtFull) / (1 << 20)
			r.GatewayRSSPerStreamKB = float64(snap.gwAtFull-snap.gwStart) / 1024 / float64(snap.activeMax)
		}
	}
	wall := secs * float64(r.Cores)
	r.ClientCPUBound = wall > 0 && !spec.embedded && snap.clientCPU >= 0.85*wall
	total := snap.clientCPU
	if r.ServerCPU != nil {
		total += *r.ServerCPU
	}
	r.BoxSaturated = wall > 0 && total >= 0.9*wall
	return r
}

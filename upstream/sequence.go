package upstream

import (
	"context"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Sequences (Triton's stateful models): a request whose parameters carry a
// non-zero sequence_id belongs to that sequence of its model, and the
// target keeps the sequence's state between its requests. So every
// request of a sequence goes to the target its START went to, and with
// in-band cancel (streamgate's engine) on the same pooled stream, which
// keeps them in order; a new START may go anywhere, and goes to the
// target with the fewest open sequences. The route expires with the
// sequence: when its END request is started, when one of its requests is
// cancelled, or once it has been unused for the model's
// max_sequence_idle_microseconds (the target's reaper has forgotten it by
// then).
//
// A request of a sequence is never failed over: if its stream or target
// goes away the call ends with KindSequenceLost, and so does every later
// request of the sequence until a new START, because the state is gone.
// An in-band UNAVAILABLE error ends the call as it is (KindModel): the
// target refused the request but still holds the sequence.
//
// With Options.Sequences, clients (gateway replicas) share their routes:
// a START notes its target in the store, every later request renews it,
// and a client that has no route for a sequence (a START included) asks
// the store first, so a sequence started through one replica continues
// through any other on the same target, or ends with KindSequenceLost
// when that target is gone. This costs one store round trip per request
// of a sequence, two for a START that no client knows yet.

// defaultSequenceIdle is a route's lifetime when the model's config
// cannot be read: Triton's default max_sequence_idle_microseconds.
const defaultSequenceIdle = time.Second

// seqKey names a sequence: Triton's sequence ids are per model.
type seqKey struct {
	model, version string
	id             string // the decimal id, or "s:" and the string id
}

// sequenceOf reads a request's sequence parameters; ok is false outside a
// sequence (no sequence_id, or id 0 or "").
func sequenceOf(req *pb.ModelInferRequest) (k seqKey, start, end, ok bool) {
	p := req.GetParameters()
	switch v := p["sequence_id"].GetParameterChoice().(type) {
	case *pb.InferParameter_Int64Param:
		if v.Int64Param == 0 {
			return k, false, false, false
		}
		k.id = strconv.FormatUint(uint64(v.Int64Param), 10)
	case *pb.InferParameter_StringParam:
		if v.StringParam == "" {
			return k, false, false, false
		}
		k.id = "s:" + v.StringParam
	default:
		return k, false, false, false
	}
	k.model, k.version = req.GetModelName(), req.GetModelVersion()
	return k, p["sequence_start"].GetBoolParam(), p["sequence_end"].GetBoolParam(), true
}

// seqRoute is where an open sequence's requests go.
type seqRoute struct {
	key seqKey
	t   *target
	st  *stream // the pooled stream it is pinned to; nil with CancelStream (every request gets its own stream)

	// Under seqRoutes.mu:
	ttl      time.Duration
	lastUsed time.Time
	inflight int
	lost     *Error // set once its stream or target went away
	open     bool   // counted in t.sequences (and st.seqs)
}

// seqRoutes is a Client's open sequences.
type seqRoutes struct {
	mu sync.Mutex
	m  map[seqKey]*seqRoute
}

// seqPlan is what sequenceRoute decided for one request.
type seqPlan struct {
	r     *seqRoute // nil: the request is placed as any other (a lone START+END, or no route)
	fresh bool      // r was created for this START
	end   bool      // the request ends the sequence: r is dropped once it is placed
}

// sequenceRoute finds or creates the route of req when it belongs to a
// sequence. A START with no open route gets a new one on the target with
// the fewest open sequences; a request of a lost sequence fails with
// KindSequenceLost; a request of an unknown sequence (never started here,
// or expired) is placed as any other, and the target answers it.
func (c *Client) sequenceRoute(ctx context.Context, req *pb.ModelInferRequest) (seqPlan, error) {
	k, start, end, ok := sequenceOf(req)
	if !ok {
		return seqPlan{}, nil
	}
	c.seqs.mu.Lock()
	r := c.seqs.m[k]
	switch {
	case r != nil && r.lost != nil && !start:
		lost := r.lost
		c.seqs.mu.Unlock()
		return seqPlan{}, lost
	case r != nil && r.lost != nil:
		c.seqs.dropLocked(r) // a new START after the loss
		r = nil
	}
	if r != nil {
		c.seqs.mu.Unlock()
		if !end {
			c.share(ctx, r) // renewed while it is used
		}
		return seqPlan{r: r, end: end}, nil
	}
	c.seqs.mu.Unlock()
	if start && end {
		return seqPlan{}, nil
	}
	select {
	case <-c.resolved:
	case <-ctx.Done():
		return seqPlan{}, ctxError(ctx)
	}
	if c.opts.Sequences != nil {
		// Another client may have started it: follow its route (a new
		// START included, as the target keeps one sequence per id).
		plan, found, err := c.sharedRoute(ctx, k, end)
		if found || err != nil {
			return plan, err
		}
	}
	if !start {
		return seqPlan{}, nil
	}
	// Picking and counting the new sequence under one lock spreads
	// concurrent STARTs evenly.
	c.seqs.mu.Lock()
	if r = c.seqs.m[k]; r != nil {
		// A START for the same id raced this one: join it.
		c.seqs.mu.Unlock()
		return seqPlan{r: r, end: end}, nil
	}
	// By open sequences first: between their requests sequences have
	// nothing outstanding, yet they hold state on their target.
	t, release, err := c.pickBy(nil, func(t *target) int64 { return t.sequences.Load()<<32 + t.outstanding.Load() })
	if err != nil {
		c.seqs.mu.Unlock()
		return seqPlan{}, err
	}
	release() // Start pins the route's target itself
	r = &seqRoute{key: k, t: t, ttl: defaultSequenceIdle, lastUsed: time.Now(), open: true}
	if c.seqs.m == nil {
		c.seqs.m = map[seqKey]*seqRoute{}
	}
	c.seqs.m[k] = r
	t.sequences.Add(1)
	c.seqs.mu.Unlock()
	c.setTTL(ctx, r)
	c.share(ctx, r)
	return seqPlan{r: r, fresh: true}, nil
}

// setTTL makes r live as long as its target remembers the sequence.
func (c *Client) setTTL(ctx context.Context, r *seqRoute) {
	if cfg, err := r.t.modelConfig(ctx, r.key.model, r.key.version); err == nil {
		if us := cfg.GetSequenceBatching().GetMaxSequenceIdleMicroseconds(); us > 0 {
			c.seqs.mu.Lock()
			r.ttl = time.Duration(us) * time.Microsecond
			c.seqs.mu.Unlock()
		}
	}
}

// String names k in a SequenceStore.
func (k seqKey) String() string { return k.model + "/" + k.version + "/" + k.id }

// share notes r's target in the SequenceStore, if any, for as long as
// the target remembers the sequence. A store that fails leaves the
// sequence to this client alone: it is not the request's failure.
func (c *Client) share(ctx context.Context, r *seqRoute) {
	if c.opts.Sequences == nil {
		return
	}
	c.seqs.mu.Lock()
	ttl := r.ttl
	c.seqs.mu.Unlock()
	if err := c.opts.Sequences.PutSequence(ctx, r.key.String(), r.t.addr, ttl); err != nil {
		c.opts.Logger.Warn("sequence route not shared: the store failed", "model", r.key.model, "sequence", displayID(r.key.id), "err", err)
	}
}

// sharedRoute is the route of sequence k that the SequenceStore names,
// found false when it names none (or fails). A target that is gone
// loses the sequence.
func (c *Client) sharedRoute(ctx context.Context, k seqKey, end bool) (seqPlan, bool, error) {
	addr, err := c.opts.Sequences.SequenceTarget(ctx, k.String())
	if err != nil || addr == "" {
		if err != nil {
			c.opts.Logger.Warn("sequence route not read: the store failed", "model", k.model, "sequence", displayID(k.id), "err", err)
		}
		return seqPlan{}, false, nil
	}
	var t *target
	for _, x := range c.targetList() {
		if x.addr == addr && !x.removed.Load() {
			t = x
		}
	}
	if t == nil || t.down.Load() {
		return seqPlan{}, true, newError(KindSequenceLost, codes.Unavailable,
			"sequence "+displayID(k.id)+" of model '"+k.model+"' was lost: its target "+addr+" is gone; its state is gone, start it again")
	}
	c.seqs.mu.Lock()
	if r := c.seqs.m[k]; r != nil { // raced with another request of it
		c.seqs.mu.Unlock()
		return seqPlan{r: r, end: end}, true, nil
	}
	r := &seqRoute{key: k, t: t, ttl: defaultSequenceIdle, lastUsed: time.Now(), open: true}
	if c.seqs.m == nil {
		c.seqs.m = map[seqKey]*seqRoute{}
	}
	c.seqs.m[k] = r
	t.sequences.Add(1)
	c.seqs.mu.Unlock()
	c.setTTL(ctx, r)
	if !end {
		c.share(ctx, r) // renewed while it is used
	}
	return seqPlan{r: r, end: end}, true, nil
}

// place puts cl, a request of p's sequence, on the route's stream, or on
// its target as any request when the route has none yet (its START) or
// uses one stream per request. The START's pooled stream becomes the
// route's. A pinned stream that is gone loses the sequence.
func (p seqPlan) place(cl *Call) error {
	r := p.r
	if err := r.t.c.seqs.bind(r, cl); err != nil {
		return err
	}
	if r.st == nil {
		if err := r.t.place(cl); err != nil {
			return err
		}
		if p.fresh && cl.cancelMode() != CancelStream {
			cl.mu.Lock()
			st := cl.st
			cl.mu.Unlock()
			r.t.c.seqs.pin(r, st)
		}
		return nil
	}
	if r.st.add(cl) {
		return nil
	}
	if err := cl.placeErr(); err != nil {
		return err
	}
	if r.st.closed.Load() {
		return r.t.c.seqs.lose(r, newError(KindUnavailable, codes.Unavailable, "stream to "+r.t.addr+" ended"))
	}
	return newError(KindRejected, codes.ResourceExhausted, "the stream of sequence "+r.key.id+" is at its limit of requests")
}

// placed finishes sequenceRoute's work when Start returns, with the
// request placed (err nil) or not: an END drops the route, and a START
// whose request was not placed leaves none behind.
func (p seqPlan) placed(c *Client, err error) {
	if p.r == nil {
		return
	}
	c.seqs.mu.Lock()
	defer c.seqs.mu.Unlock()
	if err != nil {
		if p.fresh {
			c.seqs.dropLocked(p.r)
		}
		return
	}
	if p.end {
		c.seqs.dropLocked(p.r)
	}
}

// bind makes cl a request of r's sequence, unless the sequence is lost.
func (s *seqRoutes) bind(r *seqRoute, cl *Call) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.lost != nil {
		return r.lost
	}
	r.inflight++
	r.lastUsed = time.Now()
	cl.seq = r
	return nil
}

// pin makes st the route's stream: the stream is not closed for idleness
// while the sequence is open.
func (s *seqRoutes) pin(r *seqRoute, st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == nil || !r.open {
		return
	}
	r.st = st
	st.seqs.Add(1)
}

// dropLocked forgets r and gives back what it held.
func (s *seqRoutes) dropLocked(r *seqRoute) {
	if s.m[r.key] == r {
		delete(s.m, r.key)
	}
	s.releaseLocked(r)
}

func (s *seqRoutes) releaseLocked(r *seqRoute) {
	if !r.open {
		return
	}
	r.open = false
	r.t.sequences.Add(-1)
	if r.st != nil {
		r.st.seqs.Add(-1)
	}
}

// lose marks r's sequence lost (its stream or target went away, why) and
// returns the error its requests end with from now on.
func (s *seqRoutes) lose(r *seqRoute, why *Error) *Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.lost == nil {
		r.lost = newError(KindSequenceLost, codes.Unavailable,
			"sequence "+displayID(r.key.id)+" of model '"+r.key.model+"' was lost: "+why.Message+"; its state is gone, start it again")
	}
	s.releaseLocked(r)
	return r.lost
}

func displayID(id string) string {
	if len(id) > 2 && id[:2] == "s:" {
		return id[2:]
	}
	return id
}

// ended is called when cl, a request of r's sequence, ends with err: a
// cancelled request cancels its sequence (the target cancels the
// sequence's queued requests), so the route goes.
func (s *seqRoutes) ended(r *seqRoute, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.inflight--
	r.lastUsed = time.Now()
	if e, ok := AsError(err); ok && (e.Kind == KindCancelled || e.Kind == KindDeadline) {
		s.dropLocked(r)
	}
}

// sweep drops the routes unused for their model's idle limit.
func (s *seqRoutes) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.m {
		if r.inflight == 0 && now.Sub(r.lastUsed) > r.ttl {
			s.dropLocked(r)
		}
	}
}

// OpenSequences is the number of sequences with a live route: started
// here and not ended, cancelled, lost or expired yet.
func (c *Client) OpenSequences() int {
	c.seqs.mu.Lock()
	defer c.seqs.mu.Unlock()
	n := 0
	for _, r := range c.seqs.m {
		if r.open {
			n++
		}
	}
	return n
}

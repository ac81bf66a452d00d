package upstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Client multiplexes requests onto pooled ModelStreamInfer streams to its
// targets. Its methods are safe for concurrent use. Close stops it.
type Client struct {
	opts     Options
	idPrefix string
	seq      atomic.Uint64
	streamID atomic.Uint64
	rr       atomic.Uint64 // rotates ties between equally loaded targets
	ctr      counters
	seqs     seqRoutes // open sequences and where their requests go
	lim      queueLimits
	// errStalled ends the calls whose consumer stalled.
	errStalled *Error

	// root is the parent of every stream's context; Close cancels it.
	root       context.Context
	cancelRoot context.CancelFunc

	// targets is the current target set. Only the maintenance goroutine
	// replaces it (whole: copy on write) when dns names re-resolve or
	// removed targets are reaped; everyone else loads it.
	targets atomic.Pointer[[]*target]
	// names are the "dns:///" entries of New's list; resolved closes after
	// their first resolution (at once when there are none).
	names    []string
	resolved chan struct{}

	mu     sync.Mutex // guards closed and wg.Add against Close
	closed bool
	wg     sync.WaitGroup // maintenance goroutine and every stream's run

	unregister func() // the metrics callback

	// testHookPicked, set only by tests, runs in Start between choosing a
	// target and placing the request on it.
	testHookPicked func(*target)
	// canned, set only by NewCanned, answers every Start instead of a
	// target.
	canned Answer
}

// New returns a Client for targets: "host:port" addresses, unix sockets
// ("unix:PATH", "unix:///ABSOLUTE_PATH", gRPC's naming), or
// "dns:///host:port" names whose every resolved address becomes a target
// (resolved again every Options.ResolveInterval). A malformed target
// fails New. It does no I/O: targets
// are connected lazily, and a name is resolved in the background. opts may
// be nil.
func New(targets []string, opts *Options) (*Client, error) {
	if len(targets) == 0 {
		return nil, errors.New("upstream: no targets")
	}
	o := opts.withDefaults()
	if o.Transport != TransportGRPC && o.Transport != TransportH2 {
		return nil, fmt.Errorf("upstream: unknown transport %q (want %s or %s)", o.Transport, TransportGRPC, TransportH2)
	}
	if len(o.DialOptions) > 0 && o.Transport != TransportGRPC {
		return nil, fmt.Errorf("upstream: DialOptions need transport %s: transport %s's connections cannot honour them", TransportGRPC, o.Transport)
	}
	c := &Client{opts: o, idPrefix: newIDPrefix(), resolved: make(chan struct{})}
	c.lim = queueLimits{own: int64(o.QueueBytes), bud: o.Memory, stall: max(o.StallTimeout, 0), now: monoClock()}
	c.errStalled = stallError(c.lim.stall)
	c.root, c.cancelRoot = context.WithCancel(context.Background())
	var ts []*target
	seen := map[string]bool{}
	for _, a := range targets {
		a = strings.TrimSpace(a)
		if name, ok := strings.CutPrefix(a, "dns:///"); ok {
			if _, _, err := splitHostPort(name); err != nil {
				return nil, err
			}
			c.names = append(c.names, name)
			continue
		}
		if a == "" || seen[a] {
			continue
		}
		seen[a] = true
		t, err := newTarget(c, a, "")
		if err != nil {
			for _, t := range ts {
				t.close()
			}
			return nil, err
		}
		ts = append(ts, t)
	}
	c.targets.Store(&ts)
	if len(c.names) == 0 {
		close(c.resolved)
	}
	unregister, err := c.registerMetrics()
	if err != nil {
		for _, t := range ts {
			t.close()
		}
		return nil, fmt.Errorf("upstream: metrics: %w", err)
	}
	c.unregister = unregister
	c.wg.Add(1)
	go c.maintain()
	return c, nil
}

// Close ends every call (KindUnavailable, "client closed"), stops every
// goroutine of the client, waits for them and closes the connections.
// Later calls to Start fail. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.unregister()
	c.cancelRoot()
	c.wg.Wait()
	for _, t := range c.targetList() {
		t.close()
	}
	return nil
}

// goStream runs f as a goroutine owned by the client; false if closed.
func (c *Client) goStream(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Client) targetList() []*target {
	if p := c.targets.Load(); p != nil {
		return *p
	}
	return nil
}

// Start sends req upstream and returns the handle of its responses. Start
// takes ownership of req: it overwrites req.Id with a unique upstream id
// (Call.ID; responses carry the caller's original id again) and adds
// triton_enable_empty_final_response=true when the model is decoupled or its
// config cannot be read. req must not be read, changed or reused
// afterwards: its inputs are dropped once it has delivered a response.
//
// ctx bounds the whole call, not just Start: when it is done the call ends
// (KindDeadline or KindCancelled) and is cancelled upstream. Start itself
// blocks only to learn a target's capabilities and the model's config,
// which are cached (Options.MetadataTTL).
func (c *Client) Start(ctx context.Context, req *pb.ModelInferRequest) (_ *Call, err error) {
	if c.isClosed() {
		return nil, errClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, ctxError(ctx)
	}
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	if c.canned != nil {
		return c.startCanned(ctx, req)
	}
	plan, err := c.sequenceRoute(ctx, req)
	if err != nil {
		return nil, err
	}
	defer func() { plan.placed(c, err) }()
	var t *target
	var release func()
	if plan.r != nil {
		t, release = plan.r.t, plan.r.t.unpin
		if !t.pin() {
			return nil, c.seqs.lose(plan.r, newError(KindUnavailable, codes.Unavailable, "target "+t.addr+" left"))
		}
		if t.down.Load() && !plan.fresh && plan.r.st == nil {
			// A route another client started (Options.Sequences) to a
			// target whose health checks get no answer: nothing here
			// ever reached it, and nothing will.
			t.unpin()
			return nil, c.seqs.lose(plan.r, newError(KindUnavailable, codes.Unavailable, "target "+t.addr+" is down"))
		}
	} else if t, release, err = c.pickTarget(ctx, nil); err != nil {
		return nil, err
	}
	defer release()
	if t.down.Load() {
		return nil, errNoHealthy
	}
	if c.testHookPicked != nil {
		c.testHookPicked(t)
	}
	decoupled := true
	if cfg, err := t.modelConfig(ctx, req.GetModelName(), req.GetModelVersion()); err == nil {
		decoupled = cfg.GetModelTransactionPolicy().GetDecoupled()
	} else if ctx.Err() != nil {
		return nil, ctxError(ctx)
	} else if err == errNoHealthy {
		return nil, err // a silent target, never asked about this model
	}
	cl := &Call{
		c:         c,
		req:       req,
		origID:    req.GetId(),
		decoupled: decoupled,
		auto:      c.opts.Cancel == CancelAuto,
		q:         newRespQueue(),
		done:      make(chan struct{}),
		span:      trace.SpanFromContext(ctx),
	}
	mode := c.opts.Cancel
	if cl.auto {
		mode = CancelStream
		if t.inband(ctx) {
			mode = CancelInband
		} else if ctx.Err() != nil {
			return nil, ctxError(ctx)
		}
	}
	cl.mode.Store(int32(mode))
	cl.id, cl.key = c.newID()
	req.Id = cl.id
	c.injectParams(ctx, req)
	if mode == CancelStream {
		cl.md = c.traceMetadata(ctx)
	}
	if cl.span.IsRecording() {
		cl.span.SetAttributes(semconv.ServerAddress(t.addr), attribute.String("streamgate.upstream.cancel_mode", mode.String()))
	}
	if decoupled {
		if req.Parameters == nil {
			req.Parameters = map[string]*pb.InferParameter{}
		}
		req.Parameters["triton_enable_empty_final_response"] = &pb.InferParameter{
			ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true},
		}
	}
	if plan.r != nil {
		if err = plan.place(cl); err != nil {
			cl.finish(err, true) // counts it out of the sequence
		}
	} else {
		err = t.place(cl)
	}
	if err != nil {
		return nil, err
	}
	c.ctr.started.Add(1)
	cl.watch(ctx)
	cl.watchIdle(c.opts.idleTimeout(req.GetModelName()))
	return cl, nil
}

// pickTarget waits for the first resolution of the dns names (or ctx),
// then picks a target as pick does.
func (c *Client) pickTarget(ctx context.Context, avoid *target) (t *target, release func(), err error) {
	select {
	case <-c.resolved:
	default:
		select {
		case <-c.resolved:
		case <-ctx.Done():
			return nil, nil, ctxError(ctx)
		}
	}
	return c.pick(avoid)
}

// pick returns the admitted target with the fewest outstanding requests,
// preferring healthy ones, then (with health checks on) healthy ones no
// check has reached yet, then ejected ones that still answer (not ready,
// or a stream broke), then ones whose health checks get no answer
// (down), and, when another exists, not avoid. Every target is a
// candidate: metadata calls answer from the cache of a down one, and an
// ejected one that answers is tried again at once; requests are not
// placed on a down target (Start and failover refuse them). The target is pinned
// (reap does not close it) until release is called. pick never blocks:
// the readers' failover uses it.
func (c *Client) pick(avoid *target) (t *target, release func(), err error) {
	return c.pickBy(avoid, func(t *target) int64 { return t.outstanding.Load() })
}

// pickBy is pick with load(t) in place of the outstanding requests.
func (c *Client) pickBy(avoid *target, load func(*target) int64) (t *target, release func(), err error) {
	ts := c.targetList()
	n := len(ts)
	if n == 0 {
		return nil, nil, newError(KindUnavailable, codes.Unavailable, "no upstream targets")
	}
	start := int(c.rr.Add(1) % uint64(n))
	var retired map[*target]bool // reaped while we looked; try the next best
	checks := c.opts.HealthInterval > 0
	for {
		var best *target
		bestRank := 0
		for i := range n {
			t := ts[(start+i)%n]
			if t.removed.Load() || retired[t] {
				continue
			}
			// rank: healthy, checked and not avoided first, then
			// outstanding requests.
			rank := 0
			switch {
			case t.down.Load():
				rank += 6
			case !t.healthy.Load():
				rank += 4
			case checks && !t.checked.Load():
				rank += 2
			}
			if t == avoid {
				rank++
			}
			if best == nil || rank < bestRank || (rank == bestRank && load(t) < load(best)) {
				best, bestRank = t, rank
			}
		}
		if best == nil {
			return nil, nil, newError(KindUnavailable, codes.Unavailable, "no upstream targets")
		}
		if best.pin() {
			return best, best.unpin, nil
		}
		if retired == nil {
			retired = map[*target]bool{}
		}
		retired[best] = true
	}
}

// newID is a fresh upstream request id and its routing key: the
// Client's prefix, then the key in base 36.
func (c *Client) newID() (string, uint64) {
	k := c.seq.Add(1)
	return c.idPrefix + strconv.FormatUint(k, 36), k
}

// keyOf is the routing key of id, a response's request id, the inverse
// of newID: 0, no call's, for an id newID did not make (another
// client's, or none), whose response routes nowhere. Routing by the number rather
// than by the id's text spares the reader hashing and comparing strings
// whose bytes no other response touched: under paced traffic each
// lookup's key compare was a cache miss.
func (c *Client) keyOf(id []byte) uint64 {
	p := c.idPrefix
	if len(id) <= len(p) || len(id) > len(p)+13 || string(id[:len(p)]) != p || id[len(p)] == '0' {
		return 0
	}
	var k uint64
	for _, d := range id[len(p):] {
		switch {
		case '0' <= d && d <= '9':
			d -= '0'
		case 'a' <= d && d <= 'z':
			d -= 'a' - 10
		default:
			return 0
		}
		hi, lo := bits.Mul64(k, 36)
		if hi != 0 || lo+uint64(d) < lo {
			return 0 // past 2^64: not one of ours
		}
		k = lo + uint64(d)
	}
	return k
}

func newIDPrefix() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		b = [6]byte{byte(time.Now().UnixNano())}
	}
	return "sg-" + hex.EncodeToString(b[:]) + "-"
}

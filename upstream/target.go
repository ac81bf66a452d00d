package upstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream/rawsock"
)

// target is one server: one shared grpc.ClientConn (which multiplexes all
// of its streams on one HTTP/2 connection and reconnects by itself), its
// stream pool, health and cached information.
type target struct {
	c    *Client
	addr string
	name string // the dns name it was resolved from, "" if listed
	conn *grpc.ClientConn
	rpc  pb.GRPCInferenceServiceClient
	h2   *h2Options // ModelStreamInfer's own connections (TransportH2; under mu); nil: on conn

	outstanding atomic.Int64 // calls placed on this target's streams
	sequences   atomic.Int64 // open sequences routed to this target (sequence.go)
	healthy     atomic.Bool  // admitted by health checks
	// checked: a health check (or ServerReady) got an answer from t, or
	// went unanswered. With health checks on, pick prefers every checked
	// healthy target to an unchecked one: right after start, before the
	// first check, a ready client must not send its requests to a target
	// nothing has heard from (an address where no engine listens yet).
	checked    atomic.Bool
	silent     atomic.Int32 // consecutive health checks that got no answer
	lastAnswer atomic.Int64 // when it last answered a ServerReady (unix ns)
	down       atomic.Bool  // silent long enough (unanswered): no new requests
	// epoch counts health checks begun; heard is the latest epoch in which
	// one of its streams received a response (stream.heard): a check that
	// times out while responses flow finds a busy target, not a dead one.
	epoch, heard atomic.Uint64
	removed      atomic.Bool  // gone from dns: no new calls, closed when drained
	breaks       atomic.Int32 // consecutive stream failures, for backoff
	breakGen     atomic.Int64 // bumped by each counted failure; see noteBreak

	info infoCache

	mu        sync.Mutex
	streams   []*stream // pooled streams, in order of creation
	dedicated map[*stream]struct{}
	draining  map[*stream]struct{} // out of the pool, finishing their calls
	checking  chan struct{}        // closed when the recheck in flight ends; nil when none
	pins      int                  // callers about to use t (see pin)
	retired   bool                 // reaped: its connection is closed for good
}

// HTTP/2 flow-control windows of every target connection (see newTarget).
const (
	streamWindow = 4 << 20
	connWindow   = 16 << 20
)

func newTarget(c *Client, addr, name string) (*target, error) {
	o := &c.opts
	a, err := parseAddress(addr)
	if err != nil {
		return nil, fmt.Errorf("upstream: target %q: %w", addr, err)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(transportCredentials(o.TLS, name)),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(newCodec()),
			grpc.MaxCallRecvMsgSize(o.MaxMessageBytes),
			grpc.MaxCallSendMsgSize(o.MaxMessageBytes),
		),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  o.StreamBackoff / 10,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   5 * o.StreamBackoff,
			},
			MinConnectTimeout: 20 * time.Second,
		}),
		// Static flow-control windows: grpc-go's default, a window that
		// grows by BDP estimation, samples every data frame and pings
		// the target to measure it, work per received response that a
		// relay of small messages pays for nothing. The stream's reader
		// never blocks (it queues every response for its call), so a
		// window only bounds what grpc-go buffers between reads; these
		// are as large as the estimate grows on a fast link.
		grpc.WithStaticStreamWindowSize(streamWindow),
		grpc.WithStaticConnWindowSize(connWindow),
	}
	if o.KeepaliveTime > 0 {
		dial = append(dial, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:    o.KeepaliveTime,
			Timeout: o.KeepaliveTimeout,
		}))
	}
	dial = append(dial, grpc.WithChainUnaryInterceptor(c.injectUnary))
	dial = append(dial, o.DialOptions...)
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("upstream: target %q: %w", addr, err)
	}
	t := &target{
		c:         c,
		addr:      addr,
		name:      name,
		conn:      conn,
		rpc:       pb.NewGRPCInferenceServiceClient(conn),
		dedicated: map[*stream]struct{}{},
		draining:  map[*stream]struct{}{},
	}
	if o.Transport == TransportH2 {
		var cfg *tls.Config
		if o.TLS != nil {
			cfg = namedTLS(o.TLS, name)
		}
		authority := targetAuthority(a, cfg)
		t.h2 = &h2Options{
			addr:      addr,
			authority: authority,
			tls:       h2TLS(cfg, authority),
			maxRecv:   o.MaxMessageBytes,
			maxSend:   o.MaxMessageBytes,
			dialTime:  20 * time.Second, // grpc-go's MinConnectTimeout above
		}
		if o.KeepaliveTime > 0 { // at least 10s, as grpc-go (see Options)
			t.h2.keepalive, t.h2.kaTimeout = max(o.KeepaliveTime, 10*time.Second), o.KeepaliveTimeout
			t.h2.pingGap = tritonPingGap
			t.h2.tooManyPings = t.slowPings
		}
	}
	t.info.init(o.MetadataTTL)
	t.healthy.Store(true) // until a check or a stream says otherwise
	t.lastAnswer.Store(time.Now().UnixNano())
	if t.h2 == nil {
		go t.watchConn()
	}
	return t, nil
}

// watchConn drains the pooled streams on t's grpc-go connection when it
// leaves READY, until the connection is closed: after a graceful GOAWAY
// (Triton's --grpc-max-connection-age, a server stopping) the old
// connection's streams carry on, but a pooled stream lives as long as
// requests keep coming, so it would hold the old connection, taking new
// requests, until the server's grace ends and cuts it off. Drained
// streams finish their requests and half-close; new ones open on the new
// connection. (h2 connections tell their stream themselves: goingAway.)
func (t *target) watchConn() {
	state := t.conn.GetState()
	for state != connectivity.Shutdown && t.conn.WaitForStateChange(context.Background(), state) {
		prev := state
		state = t.conn.GetState()
		if prev == connectivity.Ready && state != connectivity.Ready && state != connectivity.Shutdown {
			t.mu.Lock()
			ss := slices.Clone(t.streams)
			t.mu.Unlock()
			for _, s := range ss {
				s.goingAway()
			}
		}
	}
}

// transportCredentials secures a target's connection with cfg, or leaves
// it plaintext when cfg is nil (see namedTLS).
func transportCredentials(cfg *tls.Config, name string) credentials.TransportCredentials {
	if cfg == nil {
		return rawCredentials{insecure.NewCredentials()}
	}
	return rawCredentials{credentials.NewTLS(namedTLS(cfg, name))}
}

// rawCredentials hands the connection grpc-go dialled to the handshake,
// and so to grpc-go's transport, reading and writing with raw system
// calls (rawsock), as the h2 transport's connections do. grpc-go's own
// dialer (its proxy and keepalive settings) stays.
type rawCredentials struct {
	credentials.TransportCredentials
}

func (c rawCredentials) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, authority, rawsock.Wrap(conn))
}

func (c rawCredentials) Clone() credentials.TransportCredentials {
	return rawCredentials{c.TransportCredentials.Clone()}
}

// targetAuthority is the :authority grpc-go sends to the target at a
// with TLS configuration cfg (nil: plaintext): the server name cfg
// sets, else a's.
func targetAuthority(a address, cfg *tls.Config) string {
	if cfg != nil && cfg.ServerName != "" {
		return cfg.ServerName
	}
	return a.authority
}

// namedTLS is cfg for a target resolved from the dns name name ("" if
// listed): such a target is checked against the name's host, unless cfg
// names the server. cfg itself is never changed.
func namedTLS(cfg *tls.Config, name string) *tls.Config {
	if host, _, err := splitHostPort(name); err == nil && cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	return cfg
}

func (t *target) close() { t.conn.Close() }

// openStream opens a ModelStreamInfer RPC that lives until ctx ends: on
// a connection of its own with TransportH2, unless dedicated to one
// request (CancelStream), otherwise on the target's grpc-go connection. A
// dedicated stream lasts one request: a connection, or a TLS handshake,
// per request would cost more than grpc-go's multiplexing. goingAway is
// called when the server sends a graceful GOAWAY on an h2 connection.
func (t *target) openStream(ctx context.Context, dedicated bool, busy func() bool, goingAway func()) (streamRPC, error) {
	if t.h2 != nil && !dedicated {
		t.mu.Lock()
		o := *t.h2
		t.mu.Unlock()
		o.goingAway = goingAway
		return dialH2(ctx, o, busy)
	}
	return t.rpc.ModelStreamInfer(ctx)
}

// slowPings doubles the keepalive time and the ping gap of t's new h2
// connections, gRPC's rule for a client whose server closed a connection
// with GOAWAY "too_many_pings": its ping policy is stricter than grpc
// core's default.
func (t *target) slowPings() {
	t.mu.Lock()
	t.h2.keepalive *= 2
	t.h2.pingGap *= 2
	ka, gap := t.h2.keepalive, t.h2.pingGap
	t.mu.Unlock()
	t.c.opts.Logger.Warn("upstream: target refused our keepalive pings (GOAWAY too_many_pings): its new connections are pinged less often",
		"target", t.addr, "keepalive", ka, "ping_gap", gap)
}

// pin keeps reap from closing t until unpin: it is held from choosing t
// until the request placed on it counts in outstanding (or the metadata
// call on it returns). False when t was reaped already.
func (t *target) pin() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.retired {
		return false
	}
	t.pins++
	return true
}

func (t *target) unpin() {
	t.mu.Lock()
	t.pins--
	t.mu.Unlock()
}

// retire marks t, gone from dns, as closed for good if it carries no
// requests and nobody holds a pin; false otherwise.
func (t *target) retire() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.outstanding.Load() != 0 || t.pins != 0 {
		return false
	}
	t.retired = true
	return true
}

// place puts cl on a stream of t: a dedicated new stream for
// CancelStream, otherwise the least-loaded pooled stream, opening a new one
// while every open stream carries StreamFill requests or more and the pool
// is below its cap.
func (t *target) place(cl *Call) error {
	if cl.cancelMode() == CancelStream {
		s := t.newStream(true)
		if cl.md != nil { // the call's trace context, for the target to read
			s.ctx = metadata.NewOutgoingContext(s.ctx, cl.md)
		}
		if !s.add(cl) {
			s.cancelCtx()
			if err := cl.placeErr(); err != nil {
				return err
			}
			return newError(KindRejected, codes.Internal, "dedicated stream refused the request")
		}
		if !t.startStream(s) {
			s.remove(cl)
			return errClosed
		}
		return nil
	}
	perStream := t.c.opts.MaxRequestsPerStream
	fill := int32(t.c.opts.StreamFill)
	for range 8 { // a chosen stream may close or fill before add
		t.mu.Lock()
		var best *stream
		for _, s := range t.streams {
			if l := s.load.Load(); l < int32(perStream) && !s.closed.Load() && (best == nil || l < best.load.Load()) {
				best = s
			}
		}
		fresh := false
		if (best == nil || best.load.Load() >= fill) && len(t.streams) < t.c.opts.MaxStreamsPerTarget {
			best, fresh = t.newStream(false), true
			t.streams = append(t.streams, best)
		}
		t.mu.Unlock()
		if best == nil {
			return newError(KindRejected, codes.ResourceExhausted,
				fmt.Sprintf("target %s is at its limit of %d streams of %d requests", t.addr, t.c.opts.MaxStreamsPerTarget, perStream))
		}
		added := best.add(cl)
		if fresh && !t.startStream(best) {
			t.forget(best)
			return errClosed
		}
		if added {
			return nil
		}
		if err := cl.placeErr(); err != nil {
			return err
		}
	}
	return newError(KindRejected, codes.ResourceExhausted, "no stream accepted the request")
}

func (t *target) newStream(dedicated bool) *stream {
	s := &stream{
		t:         t,
		id:        t.c.streamID.Add(1),
		dedicated: dedicated,
		calls:     map[uint64]*Call{},
		wake:      make(chan struct{}, 1),
		idleSince: time.Now(),
		gen:       t.breakGen.Load(),
	}
	s.ctx, s.cancelCtx = context.WithCancel(t.c.root)
	return s
}

// startStream starts s's goroutines; false when the client is closed.
func (t *target) startStream(s *stream) bool {
	if s.dedicated {
		t.mu.Lock()
		t.dedicated[s] = struct{}{}
		t.mu.Unlock()
	}
	if t.c.goStream(s.run) {
		return true
	}
	// Never started: end it as if it broke, failing what it holds.
	s.closeWith(errClosed)
	return false
}

// forget drops s from the pool: it has ended.
func (t *target) forget(s *stream) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := slices.Index(t.streams, s); i >= 0 {
		t.streams = slices.Delete(t.streams, i, i+1)
	}
	delete(t.dedicated, s)
	delete(t.draining, s)
}

// drained moves s, draining, out of the pool until it ends (forget).
func (t *target) drained(s *stream) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := slices.Index(t.streams, s); i >= 0 {
		t.streams = slices.Delete(t.streams, i, i+1)
	}
	s.mu.Lock()
	dead := s.state == stateDead
	s.mu.Unlock()
	if !dead {
		t.draining[s] = struct{}{}
	}
}

// openDelay is how long a new stream waits before opening: zero normally,
// growing from StreamBackoff/10 to StreamBackoff while streams keep
// breaking.
func (t *target) openDelay() time.Duration {
	n := t.breaks.Load()
	if n <= 0 {
		return 0
	}
	max := t.c.opts.StreamBackoff
	d := max / 10
	for i := int32(1); i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// closeIdle closes pooled streams that carried nothing for the idle
// timeout.
func (t *target) closeIdle(now time.Time) {
	idle := t.c.opts.IdleStreamTimeout
	if idle <= 0 {
		return
	}
	t.mu.Lock()
	var keep []*stream
	for _, s := range t.streams {
		if s.closeIfIdle(now, idle) {
			continue
		}
		keep = append(keep, s)
	}
	t.streams = keep
	t.mu.Unlock()
}

// drainStreams drains every pooled stream of t.
func (t *target) drainStreams() {
	t.mu.Lock()
	ss := slices.Clone(t.streams)
	t.mu.Unlock()
	for _, s := range ss {
		s.drain()
	}
}

// eject marks t unhealthy. Health checks re-admit it; without them a
// stream to it that delivers a response does (see readLoop).
func (t *target) eject(why string) {
	if t.healthy.Swap(false) {
		t.c.opts.Logger.Warn("upstream target ejected", "target", t.addr, "reason", why)
	}
}

// admit marks t healthy. A target coming back gets new streams without
// backoff.
func (t *target) admit() {
	if !t.healthy.Swap(true) {
		t.breaks.Store(0)
		t.c.opts.Logger.Info("upstream target re-admitted", "target", t.addr)
	}
}

// A target is down once downAfter health checks in a row got no answer
// and it has answered nothing for downSilence: one or two slow answers on
// a busy machine refuse nothing.
const (
	downAfter   = 2
	downSilence = time.Second
)

// answered notes that t answered a ServerReady, ready or not.
func (t *target) answered() {
	t.checked.Store(true)
	t.lastAnswer.Store(time.Now().UnixNano())
	t.silent.Store(0)
	t.down.Store(false)
}

// unanswered notes a health check that got no answer. A target that
// goes down has its streams ended at once: they delivered nothing during
// the checks that went unanswered (check counts a check as answered when
// they did), so their requests fail over, or end with KindUnavailable,
// within the time it takes to find the target down (downAfter checks and
// downSilence) rather than keepalive's.
func (t *target) unanswered() {
	t.checked.Store(true)
	quiet := time.Since(time.Unix(0, t.lastAnswer.Load()))
	if t.silent.Add(1) >= downAfter && quiet >= downSilence && !t.down.Swap(true) {
		t.c.opts.Logger.Warn("upstream target down: it answers nothing; ending its streams", "target", t.addr)
		t.mu.Lock()
		ss := slices.Clone(t.streams)
		for s := range t.dedicated {
			ss = append(ss, s)
		}
		for s := range t.draining {
			ss = append(ss, s)
		}
		t.mu.Unlock()
		why := newError(KindUnavailable, codes.Unavailable, "target "+t.addr+" answers nothing")
		for _, s := range ss {
			s.closeWith(why)
		}
	}
}

// silentNow reports whether t is not worth asking now: it is down, or
// ejected with its last health check unanswered and nothing heard from it
// for downSilence (a hung target is ejected by its first missed check,
// and down only after downAfter of them). An ejected target that answers
// (not ready, or a stream broke), or one check missed by a few
// milliseconds on a busy machine, is still asked.
func (t *target) silentNow() bool {
	if t.down.Load() {
		return true
	}
	return !t.healthy.Load() && t.silent.Load() > 0 &&
		time.Since(time.Unix(0, t.lastAnswer.Load())) >= downSilence
}

// ready notes that t answered ServerReady with true: it is up and
// admitted.
func (t *target) ready() {
	t.answered()
	t.admit()
}

// noteBreak counts the failure of a stream created in generation gen
// toward backoff. Streams that fail together (a connection dropping) were
// created in the same generation and count once; the streams replacing them
// belong to the next one.
func (t *target) noteBreak(gen int64) {
	if t.breakGen.CompareAndSwap(gen, gen+1) {
		t.breaks.Add(1)
	}
}

// hear notes that a stream of t received a response: the reader keeps
// seen, the last epoch it noted, so that it writes t.heard once per
// health check at most.
func (t *target) hear(seen *uint64) {
	e := t.epoch.Load()
	if *seen == e {
		return
	}
	*seen = e
	for {
		h := t.heard.Load()
		if h >= e || t.heard.CompareAndSwap(h, e) {
			return
		}
	}
}

// check runs one health check.
func (t *target) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, t.c.opts.HealthTimeout)
	defer cancel()
	epoch := t.epoch.Add(1)
	r, err := t.rpc.ServerReady(ctx, &pb.ServerReadyRequest{})
	switch {
	case err == nil && r.GetReady():
		t.ready()
		return
	case status.Code(err) == codes.DeadlineExceeded && t.heard.Load() >= epoch:
		// No answer in time, but its streams delivered responses
		// meanwhile: a server too busy to answer promptly (on a saturated
		// machine, its collector and ours compete for the CPU) is not
		// refused, ejected nor drained for it.
		t.answered()
		t.c.opts.Logger.Debug("upstream health check timed out while the target's streams delivered", "target", t.addr)
		return
	case err == nil:
		// It answers: it refuses what it cannot serve itself (a Triton
		// with one model stalled serves the others).
		t.answered()
		t.eject("server not ready")
	default:
		// No answer (refused, or none within HealthTimeout).
		t.unanswered()
		t.eject("ServerReady: " + err.Error())
	}
	// Not ready, or no new RPC gets through (a server that sent GOAWAY to
	// stop gracefully refuses new RPCs while its open streams carry on):
	// let the requests on its streams finish and half-close the streams,
	// so that a graceful stop need not wait for them. New requests get new
	// streams.
	t.drainStreams()
}

// recheck runs one health check of t now, sharing it with every caller
// that arrives while it runs, and returns when it has ended (or ctx has).
func (t *target) recheck(ctx context.Context) {
	t.mu.Lock()
	done := t.checking
	if done == nil {
		done = make(chan struct{})
		t.checking = done
		t.mu.Unlock()
		t.check(ctx)
		t.mu.Lock()
		t.checking = nil
		t.mu.Unlock()
		close(done)
		return
	}
	t.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func splitHostPort(name string) (string, string, error) {
	h, p, err := net.SplitHostPort(name)
	if err != nil || h == "" || p == "" {
		return "", "", fmt.Errorf("upstream: target %q: want dns:///host:port", "dns:///"+name)
	}
	return h, p, nil
}

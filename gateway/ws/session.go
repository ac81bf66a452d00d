package ws

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/streamgate/streamgate/upstream/budget"
)

// Handler runs one request. It passes each data payload (one JSON value,
// the same object the matching SSE event carries) to emit, in order; emit
// never waits for the client (a socket too far behind is closed) and
// fails once the request or the socket ends. Handler returns nil when the request completed, or
// the error that ended it. It must return soon after ctx is done.
// A Handler that calls req.Later may return before the request ends
// (Request.Later).
type Handler func(ctx context.Context, req *Request, emit func(data []byte) error) error

// Options configures a Session. Nil or zero fields take the defaults.
type Options struct {
	// MaxInFlight is how many requests may run at once on one socket;
	// more are refused with code too_many_requests. Default 64.
	MaxInFlight int
	// ReadLimit is the largest client frame, in bytes; a larger one
	// closes the socket with 1009. Default 1 MiB.
	ReadLimit int64
	// QueueBytes bounds the frames waiting for the socket's writer, in
	// bytes of frames: a client that falls this far behind has its socket
	// closed with 1008 at once ("reader too slow"), with every request on
	// it. Default 4 MiB.
	QueueBytes int64
	// Memory is a budget shared with other queues (the gateway gives the
	// one its upstream queues borrow from): a socket's waiting frames
	// beyond its first 64 KiB are borrowed from it, and a socket that
	// cannot borrow is closed with 1008 ("server out of memory for slow
	// readers"). Default nil: only QueueBytes bounds a socket.
	Memory *budget.Budget
	// WriteTimeout bounds one write to the network (a batch of frames);
	// past it the connection is dropped. Default 30s.
	WriteTimeout time.Duration
	// PingInterval is the time between pings; a pong must come back
	// within PingTimeout or the connection is dropped. Defaults 30s and
	// 15s; a negative PingInterval disables pings.
	PingInterval, PingTimeout time.Duration
	// ErrorInfo turns a Handler's error into the code and message of the
	// request's error frame. Default: "internal", "internal error".
	ErrorInfo func(err error) (code, message string)

	// MaxSequences is how many sequences may be open at once on one
	// socket (they count toward MaxInFlight too); more are refused with
	// code too_many_sequences. Default 32.
	MaxSequences int
	// MaxChunkBytes bounds one chunk of a sequence: a sequence frame's
	// body or a binary frame's bytes. A larger chunk ends its sequence
	// with code chunk_too_large. Default 64 KiB.
	MaxChunkBytes int
	// ChunkRate is how many chunks per second one socket may send, all
	// its sequences together, in bursts of up to a second's worth (at
	// least one chunk). A chunk beyond it ends its sequence with code
	// too_many_chunks. Default 100; negative means no limit.
	ChunkRate float64
	// SequenceQueue is how many chunks of one sequence may wait while its
	// previous chunk runs; one more ends the sequence with code
	// too_many_chunks (the reader never waits for a sequence). Default 32.
	SequenceQueue int
	// SequenceIdle ends a sequence whose client sends no chunk for this
	// long, with code sequence_idle; the Handler may shorten it (to stay
	// ahead of the model's own idle limit). Default 30s; negative means
	// no limit but the Handler's.
	SequenceIdle time.Duration
}

// ownQueue is how much of a socket's send queue is not borrowed from
// Options.Memory.
const ownQueue = 64 << 10

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 64
	}
	if c.ReadLimit <= 0 {
		c.ReadLimit = 1 << 20
	}
	if c.QueueBytes <= 0 {
		c.QueueBytes = 4 << 20
	}
	def(&c.WriteTimeout, 30*time.Second)
	def(&c.PingInterval, 30*time.Second)
	def(&c.PingTimeout, 15*time.Second)
	if c.ErrorInfo == nil {
		c.ErrorInfo = func(error) (string, string) { return "internal", "internal error" }
	}
	if c.MaxSequences <= 0 {
		c.MaxSequences = 32
	}
	if c.MaxChunkBytes <= 0 {
		c.MaxChunkBytes = 64 << 10
	}
	if c.ChunkRate == 0 {
		c.ChunkRate = 100
	}
	if c.SequenceQueue <= 0 {
		c.SequenceQueue = 32
	}
	def(&c.SequenceIdle, 30*time.Second)
	return c
}

// ErrCancelled is the cause of a request's context after a cancel frame.
// A Handler that returns it (for a request cancelled some other way) ends
// the request with a done frame, reason "cancelled".
var ErrCancelled = errors.New("cancelled by the client")

// Session serves one socket. Run serves it; Drain and Stop may be called
// from any goroutine, at any time, any number of times.
//
// Goroutines: Run reads frames in the caller's goroutine and owns one
// writer, one pinger and one goroutine per request while its Handler
// runs; all of them have exited, and every request has ended (Later
// included), when Run returns.
//
// Frames are framed in place in one buffer per socket (output), and the
// writer sends everything waiting with one network write. Sending
// allocates nothing.
type Session struct {
	conn *Conn
	h    Handler
	opts Options

	requests sync.WaitGroup // the requests not ended yet
	closed   chan struct{}  // closed when the session is shutting down

	chunks chunkBucket // only the reader uses it

	mu        sync.Mutex
	active    map[string]*running
	sequences int // active entries that are sequences
	draining  bool
	stopOnce  sync.Once
	closeWhy  struct {
		code   websocket.StatusCode
		reason string
		flush  bool // write the frames already queued before the close frame
	}
}

// running is one active request.
type running struct {
	cancel context.CancelCauseFunc
	seq    *Sequence // its input, for a sequence.start request
}

// NewSession returns a session for c, which must have been accepted (with
// Accept) with Subprotocol.
func NewSession(c *Conn, h Handler, opts *Options) *Session {
	o := opts.withDefaults()
	c.ws.SetReadLimit(o.ReadLimit)
	c.out.limit, c.out.mem, c.out.timeout = o.QueueBytes, o.Memory, o.WriteTimeout
	return &Session{
		conn:   c,
		h:      h,
		opts:   o,
		closed: make(chan struct{}),
		active: map[string]*running{},
		chunks: chunkBucket{rate: o.ChunkRate},
	}
}

// Drain refuses new requests (code unavailable) and closes the socket with
// 1001 once the running ones have finished.
func (s *Session) Drain() {
	s.mu.Lock()
	s.draining = true
	idle := len(s.active) == 0
	s.mu.Unlock()
	if idle {
		s.close(websocket.StatusGoingAway, "server shutting down", true)
	}
}

// Stop closes the socket with 1001 now, cancelling running requests; the
// frames still queued are dropped. Cancelling the context given to Run
// closes the connection at once, without a close frame.
func (s *Session) Stop() { s.close(websocket.StatusGoingAway, "server shutting down", false) }

// close shuts the session down once: the writer sends the close frame,
// after the frames already queued for it if flush. Otherwise they are
// dropped there and then: a writer inside a batch writes that batch
// (a frame begun must end before the close frame), then the close frame.
func (s *Session) close(code websocket.StatusCode, reason string, flush bool) {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.closeWhy.code, s.closeWhy.reason, s.closeWhy.flush = code, reason, flush
		s.mu.Unlock()
		if !flush {
			s.conn.out.close(true)
		}
		close(s.closed)
	})
}

// Run serves the socket until it closes: the client closed it, Stop or
// Drain ended it, a slow reader or failed ping dropped it, or ctx ended.
func (s *Session) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		s.close(websocket.StatusGoingAway, "server shutting down", false)
		s.requests.Wait()
		wg.Wait()
		s.conn.CloseNow()
		s.conn.out.release()
	}()
	wg.Go(func() { s.writeLoop(ctx) })
	if s.opts.PingInterval > 0 {
		wg.Go(func() { s.pingLoop(ctx) })
	}
	// Closing the session makes the writer close the connection, which
	// ends the blocking Read below.
	for {
		typ, data, err := s.conn.ws.Read(ctx)
		if err != nil {
			return err
		}
		if typ != websocket.MessageText {
			s.handleBinary(ctx, data)
			continue
		}
		if !utf8.Valid(data) { // RFC 6455 section 8.1: fail the connection
			s.close(websocket.StatusInvalidFramePayloadData, "text frame is not valid UTF-8", false)
			continue
		}
		s.handleFrame(ctx, data)
	}
}

func (s *Session) handleFrame(ctx context.Context, data []byte) {
	req, fe := ParseFrame(data)
	if fe != nil {
		s.refuseFrame(ctx, fe)
		return
	}
	switch req.Type {
	case TypeCancel:
		s.mu.Lock()
		r, ok := s.active[req.ID]
		if ok {
			r.cancel(ErrCancelled)
		}
		s.mu.Unlock()
		if !ok { // never started, or ended already (its terminal is sent or on its way)
			s.enqueue(RefusalFrame(req.ID, CodeUnknownID, "no request with id "+req.ID+" is running"))
		}
		return
	case TypeSequenceData, TypeSequenceEnd:
		s.addChunk(ctx, req.ID, Chunk{Body: req.Body, End: req.Type == TypeSequenceEnd})
		return
	}
	seq := req.Type == TypeSequenceStart
	s.mu.Lock()
	var refuse []byte
	switch {
	case s.active[req.ID] != nil:
		refuse = RefusalFrame(req.ID, CodeDuplicateID, "request id "+req.ID+" is already active")
	case s.draining:
		refuse = ErrorFrame(req.ID, CodeUnavailable, "server is shutting down")
	case len(s.active) >= s.opts.MaxInFlight:
		refuse = ErrorFrame(req.ID, CodeTooManyRequests, "too many requests in flight on this socket")
	case seq && s.sequences >= s.opts.MaxSequences:
		refuse = ErrorFrame(req.ID, CodeTooManySequences, "too many open sequences on this socket (at most "+strconv.Itoa(s.opts.MaxSequences)+")")
	case seq && len(req.Body) > s.opts.MaxChunkBytes:
		refuse = ErrorFrame(req.ID, CodeChunkTooLarge, s.chunkTooLarge())
	case seq && !s.chunks.take(time.Now()):
		refuse = ErrorFrame(req.ID, CodeTooManyChunks, s.tooManyChunks())
	}
	if refuse != nil {
		s.mu.Unlock()
		s.enqueue(refuse)
		return
	}
	rctx, cancel := context.WithCancelCause(ctx)
	req.cancel = cancel
	r := &running{cancel: cancel}
	if seq {
		r.seq = &Sequence{chunks: make(chan Chunk, s.opts.SequenceQueue), idle: max(s.opts.SequenceIdle, 0)}
		req.Sequence = r.seq
		s.sequences++
	}
	s.active[req.ID] = r
	s.mu.Unlock()
	s.requests.Add(1) // done when the request ends
	go s.serve(ctx, rctx, cancel, req)
}

func (s *Session) chunkTooLarge() string {
	return "a chunk holds at most " + strconv.Itoa(s.opts.MaxChunkBytes) + " bytes"
}

func (s *Session) tooManyChunks() string {
	return "more than " + strconv.FormatFloat(s.opts.ChunkRate, 'g', -1, 64) + " chunks per second on this socket"
}

// handleBinary routes a binary frame's chunk to its sequence.
func (s *Session) handleBinary(ctx context.Context, data []byte) {
	id, c, fe := ParseBinary(data)
	if fe != nil {
		s.refuseFrame(ctx, fe)
		return
	}
	s.addChunk(ctx, id, c)
}

// refuseFrame answers a frame the session refuses. An error naming a
// running id would read as its terminal, so a refusal names it in its
// message and as error.id instead (RefusalFrame).
func (s *Session) refuseFrame(ctx context.Context, fe *FrameError) {
	s.mu.Lock()
	_, busy := s.active[fe.ID]
	s.mu.Unlock()
	f := ErrorFrame(fe.ID, fe.Code, fe.Message)
	if busy {
		f = RefusalFrame(fe.ID, fe.Code, "request "+fe.ID+": "+fe.Message)
	}
	s.enqueue(f)
}

// addChunk queues c for the open sequence id, without waiting: a chunk
// that breaks a limit ends its sequence instead (the cause becomes its
// error frame). A chunk for no open sequence gets an error frame of its
// own, naming no id.
func (s *Session) addChunk(ctx context.Context, id string, c Chunk) {
	s.mu.Lock()
	r := s.active[id]
	var refuse string
	switch {
	case r == nil:
		refuse = "no open sequence " + id
	case r.seq == nil:
		refuse = "request " + id + " is not a sequence"
	case r.seq.ended:
		refuse = "sequence " + id + " has already ended"
	}
	if refuse != "" {
		s.mu.Unlock()
		s.enqueue(ErrorFrame("", CodeUnknownSequence, refuse))
		return
	}
	var end *FrameError
	switch {
	case c.Size() > s.opts.MaxChunkBytes:
		end = &FrameError{ID: id, Code: CodeChunkTooLarge, Message: s.chunkTooLarge()}
	case !s.chunks.take(time.Now()):
		end = &FrameError{ID: id, Code: CodeTooManyChunks, Message: s.tooManyChunks()}
	default:
		select {
		case r.seq.chunks <- c:
			r.seq.ended = c.End
		default:
			end = &FrameError{ID: id, Code: CodeTooManyChunks, Message: "more than " + strconv.Itoa(s.opts.SequenceQueue) + " chunks of the sequence wait for the model"}
		}
	}
	if end != nil {
		r.seq.ended = true // nothing more is taken for it
		r.cancel(end)
	}
	s.mu.Unlock()
}

// serve runs one request and sends its terminal frame (end), or leaves
// that to the function Later gave its Handler.
func (s *Session) serve(sctx, ctx context.Context, cancel context.CancelCauseFunc, req *Request) {
	emit := func(data []byte) error {
		// Err first: one load, where Cause looks the context chain up.
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		seq, stream := req.seq, req.announce
		req.announce = ""
		err := s.push(len(data)+len(req.ID)+len(stream)+60, func(b []byte) []byte {
			if stream != "" {
				return AppendStreamDataFrame(b, req.ID, seq, stream, data)
			}
			return AppendDataFrame(b, req.ID, seq, data)
		})
		req.seq++
		return err
	}
	req.end = func(err error) { s.end(sctx, ctx, cancel, req, err) }
	err := s.h(ctx, req, emit)
	if !req.later {
		s.end(sctx, ctx, cancel, req, err)
	}
}

// end ends a request whose Handler returned err: its terminal frame.
func (s *Session) end(sctx, ctx context.Context, cancel context.CancelCauseFunc, req *Request, err error) {
	cause := context.Cause(ctx)
	cancel(nil)

	s.mu.Lock()
	delete(s.active, req.ID) // before the terminal: the client may reuse the id once it sees it
	if req.Sequence != nil {
		s.sequences--
	}
	idle := s.draining && len(s.active) == 0
	s.mu.Unlock()

	var term []byte
	var fe *FrameError
	switch {
	case errors.Is(cause, ErrCancelled), errors.Is(err, ErrCancelled):
		term = DoneFrame(req.ID, ReasonCancelled)
	case errors.As(cause, &fe) && sctx.Err() == nil:
		// The session ended it (a sequence's chunk broke a limit).
		term = ErrorFrame(req.ID, fe.Code, fe.Message)
	case err == nil:
		term = DoneFrame(req.ID, ReasonFinal)
	case sctx.Err() != nil:
		// The socket is going away; nobody will read a terminal.
	case errors.As(err, &fe):
		term = ErrorFrame(req.ID, fe.Code, fe.Message)
	default:
		code, msg := s.opts.ErrorInfo(err)
		term = ErrorFrame(req.ID, code, msg)
	}
	if term != nil {
		s.enqueue(term)
	}
	if idle {
		s.close(websocket.StatusGoingAway, "server shutting down", true)
	}
	s.requests.Done()
}

package resume

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/streamgate/streamgate/gateway/store"
	"github.com/streamgate/streamgate/upstream/budget"
)

// Options configures a Manager. A nil *Options, and every zero field,
// means the default stated on the field.
type Options struct {
	// Grace is how long a stream runs on once its live client has left
	// and no reader follows it, before its cancel function is called with
	// ErrAbandoned. Default 30s.
	Grace time.Duration
	// TTL is how long a stream's log lives after its last write.
	// Default 10m.
	TTL time.Duration
	// Lease is how long a producer's lease lasts unless renewed; it is
	// renewed every Lease/3 at least, and retried soon after a failed
	// write. A reader learns that a producer died within about twice
	// Lease: the lease must stay gone for a whole Lease, so that a
	// producer whose store hung for longer than the lease (its lease
	// expired meanwhile) is not taken for dead. Default 5s.
	Lease time.Duration
	// OpTimeout bounds each store operation. Default 2s.
	OpTimeout time.Duration
	// FlushInterval is how long a producer gathers flushed events before
	// it writes them to the store in one round trip: a stream costs the
	// store about one write per interval however fast its events come,
	// and readers following it live (not its live client) see its events
	// up to this late. A replica that dies loses at most about this much
	// of its streams' logs. Once a stream's live client has left
	// (Producer.Detach) its batches go at once, so that a client resuming
	// finds what it missed. Negative: write each flushed batch at once.
	// Default 150ms: at 20ms between tokens, about 0.16 round trips per
	// token for streams of a second (BenchmarkLogCost).
	FlushInterval time.Duration
	// BatchBytes: a producer writes at once, without waiting for
	// FlushInterval, once this many bytes are pending. Default 64 KiB.
	BatchBytes int
	// MaxPending bounds the bytes of one stream's events waiting to be
	// written while the store is slow or down; beyond it the stream's log
	// is given up: the live client streams on, the stream is no longer
	// resumable (its lease runs out, so readers get ErrLost), and the
	// reason is logged. Default 4 MiB.
	MaxPending int
	// Memory, when set, is the budget every stream's pending bytes are
	// taken from until they are written (the gateway's --queue-memory,
	// shared with the relay queues): when it is spent, a stream that
	// needs more gives its log up as beyond MaxPending. Default: none.
	Memory *budget.Budget
	// Logger receives store failures. Default: discard.
	Logger *slog.Logger
	// StoreError is called once for each failed store operation, with
	// its name ("append", "read", "attend", "cancel", "watch", "open").
	// Default: none.
	StoreError func(op string)
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Grace <= 0 {
		c.Grace = 30 * time.Second
	}
	if c.TTL <= 0 {
		c.TTL = 10 * time.Minute
	}
	if c.Lease <= 0 {
		c.Lease = 5 * time.Second
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 2 * time.Second
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = 150 * time.Millisecond
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = 64 << 10
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 4 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.StoreError == nil {
		c.StoreError = func(string) {}
	}
	return c
}

var (
	// ErrNotFound: no such stream, or not one the caller may read.
	ErrNotFound = errors.New("no such stream")
	// ErrLost: the stream's producer is gone without ending it.
	ErrLost = errors.New("the stream was lost: the replica producing it is gone")
	// ErrCancelled is the cause a Producer is cancelled with when
	// Manager.Cancel cancels its stream.
	ErrCancelled = errors.New("stream cancelled")
	// ErrAbandoned is the cause a Producer is cancelled with when its
	// client left and nobody resumed it within Options.Grace.
	ErrAbandoned = errors.New("stream abandoned: nobody resumed it within its grace period")
)

// End kinds: how a stream ended (store.Event.End).
const (
	EndFinal     = "final"
	EndError     = "error"
	EndCancelled = "cancelled"
)

// Manager makes and reads resumable streams. Its methods may be called
// concurrently.
type Manager struct {
	st     store.Streams
	opts   Options
	holder string // this replica, as lease holder

	mu        sync.Mutex
	producers map[string]*Producer
	watchStop context.CancelFunc // the cancel listener, while producers run
	watchDone chan struct{}
}

// New returns a Manager on st.
func New(st store.Streams, opts *Options) *Manager {
	return &Manager{st: st, opts: opts.withDefaults(), holder: newID(), producers: map[string]*Producer{}}
}

// Grace is the Manager's Options.Grace.
func (m *Manager) Grace() time.Duration { return m.opts.Grace }

// newID is a random stream id: 22 characters of base64url.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ValidID reports whether sid can name a stream: 1 to 64 characters of
// base64url's alphabet.
func ValidID(sid string) bool {
	if len(sid) == 0 || len(sid) > 64 {
		return false
	}
	for _, c := range []byte(sid) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// opCtx bounds one store operation.
func (m *Manager) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.opts.OpTimeout)
}

// failed counts and logs a failed store operation.
func (m *Manager) failed(op, sid string, err error) {
	m.opts.StoreError(op)
	m.opts.Logger.Warn("resumable stream store failed", "op", op, "stream", sid, "err", err)
}

// Cancel cancels stream sid, which must belong to owner: the replica
// producing it stops it at once. It returns ErrNotFound for a stream
// that does not exist or is not owner's, store.ErrUnavailable when the
// store cannot be reached. Cancelling a stream that has ended does
// nothing.
func (m *Manager) Cancel(ctx context.Context, sid, owner string) error {
	if _, err := m.meta(ctx, sid, owner); err != nil {
		return err
	}
	ctx, cancel := m.opCtx(ctx)
	defer cancel()
	err := m.st.CancelStream(ctx, sid)
	if errors.Is(err, store.ErrNotFound) {
		return ErrNotFound
	}
	if err != nil {
		m.failed("cancel", sid, err)
	}
	return err
}

// meta is sid's meta when owner may use it.
func (m *Manager) meta(ctx context.Context, sid, owner string) (store.StreamMeta, error) {
	if !ValidID(sid) {
		return store.StreamMeta{}, ErrNotFound
	}
	ctx, cancel := m.opCtx(ctx)
	defer cancel()
	meta, err := m.st.StreamMeta(ctx, sid)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return meta, ErrNotFound
	case err != nil:
		m.failed("open", sid, err)
		return meta, err
	case meta.Owner != owner:
		return meta, ErrNotFound
	}
	return meta, nil
}

// register adds p, starting the cancel listener for the first producer.
func (m *Manager) register(p *Producer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.producers[p.sid] = p
	if m.watchStop == nil {
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		m.watchStop, m.watchDone = stop, done
		go func() {
			defer close(done)
			m.watch(ctx)
		}()
	}
}

// unregister removes p, stopping the cancel listener (and waiting for it)
// after the last producer.
func (m *Manager) unregister(p *Producer) {
	m.mu.Lock()
	delete(m.producers, p.sid)
	var stop context.CancelFunc
	var done chan struct{}
	if len(m.producers) == 0 && m.watchStop != nil {
		stop, done = m.watchStop, m.watchDone
		m.watchStop, m.watchDone = nil, nil
	}
	m.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// watch listens for cancels until ctx is done, listening again after a
// failure (the store is down) every second.
func (m *Manager) watch(ctx context.Context) {
	for {
		err := m.st.WatchCancels(ctx, func() {}, m.cancelled)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m.failed("watch", "", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// cancelled stops the stream sid if this replica produces it.
func (m *Manager) cancelled(sid string) {
	m.mu.Lock()
	p := m.producers[sid]
	m.mu.Unlock()
	if p != nil {
		p.cancel(ErrCancelled)
	}
}

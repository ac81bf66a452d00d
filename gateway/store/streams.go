package store

import (
	"context"
	"errors"
	"time"
)

// Streams is the part of Store for resumable streams: each stream is a
// log of events (ids 1, 2, 3 …) written by the one replica that produces
// it, read by any replica, with a lease that tells readers the producer
// is alive and a cancel flag any replica may raise.
//
// The log knows nothing of wire formats: an event's Data is what the
// gateway chose to store (an SSE event's data), and the stream's
// StreamMeta says how to read it back.
type Streams interface {
	// AppendStream writes one batch of a producing stream sid in one
	// round trip: the stream's meta on the first batch (a.Meta), the
	// events (ids consecutive, after those already written; an id
	// already written is not written again) and, with a.Renew, the lease
	// renewed for a.Holder and the expiry of the stream pushed to a.TTL
	// from now; with a.Renew it reports whether the stream has been
	// cancelled and whether a reader follows it. A batch that ends with
	// an end event releases the lease and sets the expiry, renewing or
	// not.
	AppendStream(ctx context.Context, sid string, a Append) (AppendResult, error)

	// StreamMeta is the meta of stream sid; ErrNotFound when there is no
	// such stream (never created, or expired).
	StreamMeta(ctx context.Context, sid string) (StreamMeta, error)

	// ReadStream returns the events of sid after id after, in order, at
	// most max (0: no limit), waiting up to wait for the first one when
	// there is none yet. Live is false only when there was no event to
	// return at first and the producer's lease is gone: then Events holds
	// everything that was written after after, and no more will come
	// unless it ends with an end event. When sid has ended and after is
	// its end event's id or later (a reader resuming past the end),
	// Events is the end event alone: the stream ended there.
	ReadStream(ctx context.Context, sid string, after uint64, max int, wait time.Duration) (Read, error)

	// AttendStream notes that a reader follows sid, for d: the producer
	// sees it (AppendResult.Attended) and does not cancel the stream for
	// lack of a client.
	AttendStream(ctx context.Context, sid string, d time.Duration) error

	// CancelStream raises sid's cancel flag and tells the replica
	// producing it at once (WatchCancels).
	CancelStream(ctx context.Context, sid string) error

	// WatchCancels calls fn with the sid of each stream CancelStream
	// cancels, on any replica, until ctx is done. It calls ready once it
	// listens. It returns nil when ctx is done, an error when it could not
	// listen (ErrUnavailable) or stopped listening.
	WatchCancels(ctx context.Context, ready func(), fn func(sid string)) error
}

// MaxStreamEvents is how many events a stream's log keeps at least
// (Redis keeps as many entries, each of one event or more, trimming older
// ones with XADD MAXLEN ~): a reader that asks for trimmed events gets an
// error, never a gap.
const MaxStreamEvents = 100_000

// StreamMeta describes a stream: who may read it and how.
type StreamMeta struct {
	// Owner is the id of the API key that created the stream; "" on an
	// open gateway.
	Owner string
	// Format names the wire format of the events, set by the producer
	// ("openai", "triton"...); readers write the events in it.
	Format string
}

// Event is one entry of a stream's log.
type Event struct {
	// ID is the event's number: 1, 2, 3 … with no gaps.
	ID uint64
	// Data is the event's payload. On an end event (End set) it is
	// optional detail of the end (an error's code and message).
	Data []byte
	// End is set on the log's last entry only, which is no event of the
	// stream but says how it ended: "final", "error", "cancelled".
	End string
}

// Append is one batch of a producing stream (AppendStream).
type Append struct {
	// Meta describes the stream; set on its first batch (which creates
	// the stream) only.
	Meta *StreamMeta
	// Events to append, ids consecutive. The last may be an end event.
	Events []Event
	// Renew renews the lease and the expiry and asks for the
	// AppendResult: the producer's heartbeat, every few seconds and on
	// the first batch. The batches in between carry events only.
	Renew bool
	// Holder names the producing replica. Its lease on the stream is
	// renewed for Lease, or released when Events ends with an end event.
	Holder string
	Lease  time.Duration
	// TTL is how long the stream lives after this write.
	TTL time.Duration
}

// AppendResult is what the producer learns from a write with Renew.
type AppendResult struct {
	// Cancelled: CancelStream was called for the stream.
	Cancelled bool
	// Attended: a reader noted itself with AttendStream and its time has
	// not run out.
	Attended bool
}

// Read is the answer of ReadStream.
type Read struct {
	Events []Event
	// Live: the producer's lease is held (or the last event is an end).
	Live bool
}

// ErrTrimmed: the events asked for are no longer in the log.
var ErrTrimmed = errors.New("stream events trimmed from the log")

// ended reports whether events end with an end event.
func ended(events []Event) bool {
	return len(events) > 0 && events[len(events)-1].End != ""
}

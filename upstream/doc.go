// Package upstream is the gRPC client side of the inference API: it carries
// many client requests over a small pool of bidirectional ModelStreamInfer
// streams to one or more targets (streamgate's engine or a real Triton) and
// routes every response back to its request by id.
//
// Start with New (targets plus *Options, nil = defaults), then Client.Start,
// which places one ModelInferRequest and returns a *Call; read its responses
// in order with Call.Recv until io.EOF or an *Error, and stop it early with
// Call.Cancel or by cancelling the context given to Start. Client.Close ends
// everything. A response Recv returns is valid until the next Recv on its
// Call: the Call reuses its memory (see Memory below).
//
// # How a request travels
//
// Start gives the request a unique id, sets triton_enable_empty_final_response
// on decoupled models (so every end is visible, even after zero responses),
// and places it on the least-loaded open stream of the least-outstanding
// healthy target, opening a new stream lazily, once every open one carries
// Options.StreamFill requests, up to Options.MaxStreamsPerTarget. Each stream has exactly two goroutines: a
// sender, which owns Send, and a reader, which owns Recv and routes each
// response into its request's queue without ever blocking. A request never
// fails for being behind, only when its client took nothing for
// Options.StallTimeout while responses waited (KindTooSlow), or when its
// queue could not grow because the memory budget is spent (KindBudget);
// either way it fails alone and is cancelled upstream.
//
// # Memory
//
// Relaying a response allocates nothing in this package (TestDeliverAllocs,
// BenchmarkDeliver). The default TransportH2 (Options.Transport) reads the
// pooled streams without grpc-go: each stream has an HTTP/2 connection of
// its own, whose frames its reader reads and assembles into the reused
// buffer itself, allocating nothing per message either (h2read.go,
// TestH2RecvAllocs). grpc-go's transport (TransportGRPC, and dedicated
// streams) still allocates a few small objects per message below its
// 1 KiB pooling threshold.
//
//   - The reader does not decode: the Client's codec (codec.go) hands it
//     each ModelStreamInferResponse's wire bytes in one buffer it reuses,
//     and scanHeader reads the id, error and final flag to route them.
//   - A request's queue (respQueue) keeps the bytes, about 100 a response,
//     back to back in one buffer taken from per-size pools. Each request
//     may hold Options.QueueBytes of its own; beyond that it borrows from
//     Options.Memory, a budget the gateway shares with its WebSocket send
//     queues (package budget).
//   - Call.TryRecv decodes the next message into the Call's frame (a
//     pooled ModelInferResponse whose strings, slices, maps and structs are
//     reused, frame.go), and hands the frame back whenever the consumer
//     waits, so a held stream keeps no decoded response.
//   - A request that has delivered a response keeps no inputs: it will not
//     be re-sent.
//
// # Cancellation
//
// Triton cannot cancel one request on a shared stream. With CancelAuto a
// target that advertises the "streamgate_cancel" extension gets an in-band
// cancel message on the shared stream; any other target gets one stream per
// request, and cancelling cancels that RPC. See CancelMode.
//
// # Failures
//
// When a stream breaks, its requests that have delivered nothing yet are
// re-sent once on another stream (another target when there is one); the
// others end with KindUnavailable.
//
// An in-band error ends its request with KindModel and the error's class
// as Error.Code: the class streamgate's engine sends with every in-band
// error (proto/errclass), or, from a target that sends none (a real
// Triton), the class Triton's documented texts imply. A request refused as
// UNAVAILABLE before it delivered anything (a full queue, a draining
// target) is retried once on another target; the refusing target is first
// asked whether it is still ready, and ejected with its streams drained if
// not. A real Triton's "server is shutting down" text ejects it at once. New streams to a target whose
// streams keep breaking wait with exponential backoff. Targets are
// health-checked with ServerReady, first when the Client starts, then
// every HealthInterval, and ejected and re-admitted. Until its first check
// has ended a target is unchecked: requests and metadata calls go to it
// only when no checked healthy target exists, so a ready client does not
// send them to an address where nothing listens yet. A target that
// fails its check has its streams drained (no new requests, half-closed
// once empty) so that its graceful stop does not wait for them. One whose
// checks got no answer at all twice in a row (connection refused, or no
// reply within HealthTimeout), and nothing for a second at least, is
// down: while every target is down Start fails at once
// with KindUnavailable instead of waiting on a dead or hung target.
// Before that, from the first check without answer (and a second without
// a word from it), the target is silent: it is not asked metadata it has
// not answered before, so the metadata call, and Start for a model it was
// never asked about, fail at once with KindUnavailable. A target that
// answers "not ready", or was ejected only because a stream broke, is
// still tried: it refuses what it cannot serve itself.
//
// Nothing waits on a hung target for long: a request that receives
// nothing for Options.IdleTimeout (per model: ModelIdleTimeouts) ends with
// KindIdleTimeout and is cancelled upstream; metadata calls are bounded by
// MetadataTimeout and fall back to the last answer, which a down target's
// metadata calls get at once; and keepalive pings close a connection that
// has gone silent (Options.KeepaliveTime, which explains how this stays
// within Triton's ping policy).
//
// # Sequences
//
// A request whose parameters carry a sequence_id belongs to a sequence of
// a stateful model (sequence.go): its START goes to the target with the
// fewest open sequences, every later request of it to the same target
// (and, with in-band cancel, the same pooled stream, kept open while the
// sequence is), and none of them is ever failed over or retried
// elsewhere: when the target or stream goes away the call, and every later
// request of the sequence until a new START, ends with KindSequenceLost.
// The route ends with the END request, a cancelled request, or the
// model's max_sequence_idle_microseconds without a request.
//
// # Goroutines
//
// A Client owns one maintenance goroutine (health checks, idle stream
// closing, dns re-resolution, reaping targets that left dns), two
// goroutines per open stream, and one per refused request while its
// target is rechecked and it is retried. Close stops and waits for all of
// them. A call's idle watch is a timer (time.AfterFunc), not a goroutine:
// it runs briefly every quarter of the idle timeout and is stopped when
// the call ends. Client and Call methods are safe for concurrent use, except that
// one Call's Recv must not be called from two goroutines at once. A
// consumer need not wait in a goroutine either: Call.Notify has the
// stream's reader (or whatever ended the call) tell it, without blocking,
// when a response may be ready or the call has ended, and it takes them
// with TryRecv (the gateway's WebSocket requests wait this way).
//
// # Locks
//
// Outermost first: Call.mu before stream.mu before respQueue.mu, and
// target.mu before stream.mu. No goroutine holds a Call's and a target's
// mutex at once; Client.mu and the metadata cache's mutex are leaves.
// Nothing blocks under a lock: the only channel operations there are the
// non-blocking wake of a stream's sender and closing a Call's done.
// Counters and the fields placement scans (a stream's load and closed, a
// target's outstanding, healthy and removed) are atomics, read without
// locks.
//
// # A stream's state
//
// state (under stream.mu) is the life of one ModelStreamInfer RPC:
//
//	state         entered when                           takes calls  then
//	stateNew      created by place                       yes          run opens the RPC: stateOpen
//	stateOpen     the RPC is open                        yes          the sender sends sendq in order
//	stateClosing  idle too long (closeIfIdle), or its    no           once it has no calls: an open RPC
//	              target drains (drain)                               is half-closed, an unopened one
//	                                                                  abandoned
//	stateDead     closeWith: the RPC ended or failed     no           its calls were failed over; final
//
// The other fields qualify it:
//   - closed (atomic) mirrors state > stateOpen, so that place can skip
//     closing streams without locking them.
//   - selfClosed is set when we end the stream on purpose (idle, drained,
//     or its dedicated call cancelled): its end is then no failure, so it
//     neither counts toward backoff nor ejects the target.
//   - skipped holds the in-band calls that ended before their request was
//     sent: the sender drops their queued cancel rather than cancel a
//     request the target never saw.
//   - gen is the target's break generation when the stream was created:
//     streams that fail together (one connection dropping) count as one
//     break toward backoff, and their replacements belong to the next
//     generation.
package upstream

// Package backend defines what a model implementation provides to the engine
// and what the engine gives it: a decoded Request, a Responder for streamed
// responses, and the model's parsed configuration.
//
// A Backend is registered by name (config.pbtxt `backend:` field) with a
// Factory. The engine's scheduler calls Execute once per request on one of the
// model's instances; see Backend for the contract.
package backend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// Request is one validated inference request.
type Request struct {
	ID           string
	ModelName    string
	ModelVersion string
	// Inputs by name, already checked against the model's config (names,
	// datatypes, shapes, byte sizes).
	Inputs map[string]*tensor.Tensor
	// Parameters are the request parameters other than the ones the engine
	// interprets itself (triton_*, sequence_*, priority, timeout, streamgate_*).
	Parameters map[string]*pb.InferParameter
}

// Response is one response of a request: output tensors (the engine drops
// outputs the client did not request) and response parameters.
type Response struct {
	Outputs    []*tensor.Tensor
	Parameters map[string]*pb.InferParameter
}

// Responder is how a running request talks back.
//
// Send delivers one non-final data response of a decoupled model. It blocks
// while the client's stream is backed up and returns an error once ctx is
// done or the request was cancelled; the backend should then stop and return.
// Release frees the model instance early, so the scheduler may start the next
// request while this one keeps sending (Triton's repeat WAIT). Both are safe
// to call from the request's goroutine only.
type Responder interface {
	Send(ctx context.Context, r *Response) error
	Release()
}

// Holder is implemented by Responders that can keep the model instance
// busy past the end of Execute: HoldUntil releases the instance at t (or
// earlier through Release), not when Execute returns. Triton's repeat
// backend blocks its instance for WAIT ms whether or not the request is
// done by then.
type Holder interface {
	HoldUntil(t time.Time)
}

// Backend is one loaded model. Execute runs req on one model instance and
// returns when the request is complete. Its results:
//   - (final, nil): final (a data response with the final flag), or a
//     flags-only final when final is nil;
//   - (_, err): one error response with the final flag, text err.Error().
//
// A non-decoupled model must not call Send and must return its one response
// as final. ctx is cancelled when the client cancels the request (RPC cancel
// or in-band streamgate_cancel) or the server stops; backends that honour
// cancellation check ctx before each response and return (nil, nil) or the
// data they have.
type Backend interface {
	Execute(ctx context.Context, req *Request, r Responder) (*Response, error)
}

// Batch is what one execution of a BatchBackend gets: the requests the
// scheduler put together (in queue order) and the model instance they run
// on.
type Batch struct {
	// Instance is the index of the model instance, 0-based, counting the
	// instances of the config's instance_group entries in order.
	Instance int
	Requests []*Request
}

// Result is one request's outcome in a batch: its one response, or its
// error (sent as an error response with the final flag).
type Result struct {
	Response *Response
	Err      error
}

// BatchBackend is implemented by backends that execute several requests in
// one call, as Triton hands a backend's execute function a batch of
// requests. The engine's dynamic batcher (config dynamic_batching with
// max_batch_size > 0) needs it, and uses it for every execution of such a
// backend, a batch of one included.
//
// ExecuteBatch runs b on its instance, which stays busy until it returns,
// and returns one Result per request, in order. Each request gets exactly
// its one (final) response: there is no Responder. ctx is done once every
// request of the batch is cancelled, or the server stops.
type BatchBackend interface {
	Backend
	ExecuteBatch(ctx context.Context, b *Batch) []Result
}

// Closer is implemented by backends that hold resources to release at
// unload.
type Closer interface {
	Close() error
}

// Config is what a Factory gets: the model's parsed configuration, the
// directory it was loaded from ("" for built-in models), and where to
// report metrics.
type Config struct {
	Model *pb.ModelConfig
	Dir   string
	// Metrics receives the measurements of a backend with a scheduler of
	// its own. Nil means nowhere (a backend built outside an engine).
	Metrics Metrics
}

// Metrics is what a backend that schedules its own work (batching, KV
// caches: llama2) reports; the engine records it for the model. Methods
// are safe for concurrent use, cheap, and never allocate: call them from
// the scheduler's loop.
type Metrics interface {
	// Step reports one batched forward pass: the sequences in it and the
	// prompt and generated tokens it processed.
	Step(sequences, promptTokens, generatedTokens int)
	// KVSlots reports the KV caches in use and how many there are.
	KVSlots(used, total int)
}

// NoMetrics reports nowhere.
type NoMetrics struct{}

func (NoMetrics) Step(sequences, promptTokens, generatedTokens int) {}
func (NoMetrics) KVSlots(used, total int)                           {}

// Factory validates cfg and builds a backend. Errors name the config field
// at fault; the engine prefixes the file name.
type Factory func(cfg Config) (Backend, error)

// ErrCancelled is returned by Responder.Send once the request is cancelled.
var ErrCancelled = errors.New("request cancelled")

// Param returns the string value of config parameter key, or def.
func Param(cfg *pb.ModelConfig, key, def string) string {
	if p, ok := cfg.GetParameters()[key]; ok {
		return p.GetStringValue()
	}
	return def
}

// MillisParam reads config parameter key as a non-negative whole number
// of milliseconds; 0 when absent.
func MillisParam(cfg *pb.ModelConfig, key string) (time.Duration, error) {
	v := Param(cfg, key, "")
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 32)
	if err != nil || ms < 0 {
		return 0, fmt.Errorf("parameters[%s]: want a non-negative integer, got %q", key, v)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Sleep waits for d or until ctx is done and reports whether the full
// duration passed with ctx still live. d <= 0 only checks ctx.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

package core

import (
	"context"
	"io"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
)

// relayer relays one call's responses through its translator into its
// sink, a batch at a time; it keeps the state between batches.
type relayer struct {
	c   *upstream.Call
	tr  Translator
	out Sink
	// wait: the relay runs where it may wait for the client (flush);
	// owed: a flush without wait did not say done; observed: ob needs
	// to see no more responses (observation.response); begun: pending
	// went out.
	wait, owed, observed, begun bool

	ob      *observation // sees the responses it needs
	pending [][]byte     // tr.begin's payloads, until the first response
}

func (r *relayer) send(ps [][]byte) error {
	for _, p := range ps {
		if err := r.out.send(p); err != nil {
			return err
		}
	}
	return nil
}

func (r *relayer) sendPending() error {
	if r.begun { // no look at pending per response
		return nil
	}
	r.begun = true
	err := r.send(r.pending)
	r.pending = nil
	return err
}

// step relays the responses ready now, if any, without waiting (batch);
// relayed says there were. Where it may wait, it also delivers what an
// earlier flush left behind, with the batch if there is one.
func (r *relayer) step() (relayed, ended bool, err error) {
	resp, ok, err := r.recv()
	if !ok {
		if r.owed && r.wait {
			err := r.flush()
			return true, err != nil, err
		}
		return false, false, nil
	}
	ended, err = r.batch(resp, err)
	return true, ended, err
}

// ending says that the call has ended: all that is left of it is
// queued, and one step relays it (nothing more can come to coalesce).
func (r *relayer) ending() bool {
	select {
	case <-r.c.Done():
		return true
	default:
		return false
	}
}

// recv takes the call's next response if one is ready (ok), or its end
// (err: io.EOF when it completed).
func (r *relayer) recv() (resp *pb.ModelInferResponse, ok bool, err error) {
	resp, ok, err = r.c.TryRecv()
	if resp != nil && !r.observed {
		r.observed = !r.ob.response()
	}
	return resp, ok, err
}

// batch relays one result of the call (resp, or its end: err) and every
// response already queued after it, then flushes. ended says that relay
// is over, with err (nil: the call completed and its payloads are out).
// Errors are the call's, the translator's, or ErrClientGone when out
// could not write; the payloads before them may still be buffered in
// out, for its in-band error to follow.
func (r *relayer) batch(resp *pb.ModelInferResponse, err error) (ended bool, _ error) {
	if err == nil || err == io.EOF {
		if err := r.sendPending(); err != nil {
			return true, err
		}
	}
	for {
		if err == io.EOF {
			ps, terr := r.tr.End()
			if terr != nil {
				return true, terr
			}
			if err := r.send(ps); err != nil {
				return true, err
			}
			return true, r.flushLast()
		}
		if err != nil {
			return true, err
		}
		ps, terr := r.tr.Next(resp)
		if terr != nil {
			return true, terr
		}
		if err := r.send(ps); err != nil {
			return true, err
		}
		var ok bool
		if resp, ok, err = r.recv(); !ok {
			break
		}
	}
	err = r.flush()
	return err != nil, err
}

// flush flushes out, waiting for the client or not (wait), and notes
// whether something stayed behind (owed).
func (r *relayer) flush() error {
	done, err := r.out.flush(r.wait)
	r.owed = !done
	return err
}

// flushLast flushes the call's last batch, after its clean end: out
// keeps it for the response's end if it can (Sink.flushLast), else it
// is flushed as any other.
func (r *relayer) flushLast() error {
	if !r.owed && r.out.flushLast() {
		return nil
	}
	return r.flush()
}

// Relay is one call's relay stepped by hand, as a request's flight steps
// it between wakes, without admission or a finish: for benchmarks and
// tests of the surfaces' translators and sinks.
type Relay struct{ r relayer }

// NewRelay starts j's call with start, observed as serve observes it (the
// upstream span, the GenAI metrics), and returns its relay through j's
// translator into out. It steps where it may wait for the client.
func (s *Server) NewRelay(ctx context.Context, j *Job, out Sink, start func(context.Context, *pb.ModelInferRequest) (*upstream.Call, error)) (*Relay, error) {
	ob := s.observe(ctx, j)
	c, err := start(ob.ctx, j.Req)
	if err != nil {
		return nil, err
	}
	return &Relay{relayer{c: c, ob: ob, tr: j.Tr, out: out, pending: j.Tr.Begin(), wait: true}}, nil
}

// Step relays the responses ready now, if any, without waiting; ended
// says the call has ended, with err (nil: it completed).
func (r *Relay) Step() (ended bool, err error) {
	_, ended, err = r.r.step()
	return ended, err
}

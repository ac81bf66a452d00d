package openaiapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/jobs"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/resume"
	"github.com/streamgate/streamgate/gateway/store"
)

// OpenAI's Responses API over text models: POST /v1/responses runs on the
// one request lifecycle (serve) like chat completions, its translator
// (responseEvents) giving the Response object or its semantic events.
// A stored response (store, OpenAI's default) is written to the Store
// when it starts and when it ends, before its client hears of the end, so
// that it can be read (GET /v1/responses/{id}), continued
// (previous_response_id), cancelled and deleted, by its owner only, from
// any replica, for Options.ResponseTTL. A background response runs on
// when its client leaves.

// saveResponse writes resp, created by the caller of ctx, to the store:
// its first record, or (update) a later one, which is not written when
// the record has been deleted meanwhile. The first record must fit in the
// key's storage budget and the gateway's cap (chargeStorage).
func (s *API) saveResponse(ctx context.Context, resp *openai.Response, data *jobs.ResponseData, update bool) error {
	d, err := json.Marshal(data)
	if err != nil {
		return err
	}
	rec := store.StoredResponse{Owner: core.CallerKey(ctx), Object: resp.JSON(), Data: d}
	if err := s.chargeStorage(ctx, resp.ID, int64(len(rec.Object)+len(rec.Data)), !update); err != nil {
		return err
	}
	if update {
		err = s.Opts.Store.UpdateResponse(ctx, resp.ID, rec, s.Opts.ResponseTTL)
		if errors.Is(err, store.ErrNoResponse) {
			return nil // deleted: it stays so
		}
		return s.ResponseStoreError(ctx, err)
	}
	return s.ResponseStoreError(ctx, s.Opts.Store.PutResponse(ctx, resp.ID, rec, s.Opts.ResponseTTL))
}

// CreateResponse serves POST /v1/responses.
func (s *API) CreateResponse(w http.ResponseWriter, r *http.Request) error {
	body, err := s.ReadBody(w, r)
	if err != nil {
		return err
	}
	rr, err := openai.ParseResponses(body)
	if err != nil {
		return err
	}
	history, err := s.History(r.Context(), rr)
	if err != nil {
		return err
	}
	// A background response's log holds its events, whatever its client
	// asked for.
	j, tr, err := s.ResponseJob(r.Context(), rr, history, streamForm(rr.Stream || rr.Background))
	if err != nil {
		return err
	}
	var sse *core.SSESink
	var out core.Sink = &core.BodySink{W: w}
	if rr.Stream {
		sse = s.NewSSESink(w, r, tr.FailedEvent, false)
		sse.Named = true
		out = sse
	}
	if !rr.Store {
		return s.Serve(r.Context(), r.RemoteAddr, j, out)
	}

	// Stored: written now (queued or in_progress) and at its end, by the
	// translator before the client hears of it.
	ctx := r.Context()
	if rr.Background { // it ends on its own, on a cancel, or by Drain
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	handedOff := false // to the goroutine of a background response answered at once
	defer func() {
		if !handedOff {
			cancel(nil)
		}
	}()
	data := &jobs.ResponseData{Input: rr.Input, Previous: rr.PreviousResponseID}
	saveCtx := context.WithoutCancel(ctx) // the end is stored however the request ended
	tr.Save = func(resp *openai.Response) {
		_ = s.saveResponse(saveCtx, resp, data, true) // a failure is counted and logged
	}
	if !rr.Background {
		if err := s.saveResponse(ctx, tr.Response(), data, false); err != nil {
			return err
		}
		done := s.running.add(tr.Response().ID, cancel)
		defer done()
		err = s.Serve(ctx, r.RemoteAddr, j, out)
		tr.Finish(ctx, err)
		return err
	}

	// Background: its events go to a resumable stream's log (package
	// resume), which GET /v1/responses/{id}?stream=true reads from any
	// replica and POST .../cancel cancels from any replica. Nobody
	// reading it is no reason to stop: it runs to its end.
	var logged core.LoggedSink = &core.LogSink{}
	if rr.Stream {
		logged = sse
	}
	p := s.StartLog(ctx, core.FormatResponses, logged, func(cause error) {
		if !errors.Is(cause, resume.ErrAbandoned) {
			cancel(cause)
		}
	})
	data.Stream = p.ID()
	if err := s.saveResponse(ctx, tr.Response(), data, false); err != nil {
		p.Close(resume.EndError, core.EndDetail(core.Classify(err)))
		return err
	}
	<-p.Created() // a read or cancel of the id we answer finds its stream
	done := s.running.add(tr.Response().ID, cancel)
	run := func() error {
		defer done()
		err := s.Serve(ctx, r.RemoteAddr, j, logged)
		tr.Finish(ctx, err) // stored before the log's end tells readers
		s.EndLog(p, ctx, err, logged, tr.FailedEvent)
		return err
	}
	if rr.Stream {
		err := run()
		if errors.Is(err, core.ErrClientGone) && sse.ClientLeft() {
			return nil
		}
		return err
	}
	// The answer is the queued response; the run goes on without a
	// client, registered for Drain until its end is stored.
	remove, ok := s.AddStream(&core.LiveStream{Hard: func() { cancel(core.ErrDraining) }})
	if !ok {
		done()
		p.Close(resume.EndError, core.EndDetail(core.Classify(core.ErrDraining)))
		return core.ErrDraining
	}
	core.WriteJSON(w, http.StatusOK, tr.Response().JSON())
	handedOff = true
	go func() {
		defer remove()
		defer cancel(nil)
		_ = run()
	}()
	return nil
}

// GetResponse serves GET /v1/responses/{id}: the stored object, or with
// ?stream=true a background response's events after starting_after (a
// sequence number; or after the SSE id in Last-Event-ID), then the live
// ones until its end, read from its log on any replica.
func (s *API) GetResponse(w http.ResponseWriter, r *http.Request) error {
	id := core.URLParam(r, "id")
	resp, data, err := s.LoadResponse(r.Context(), id, "")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	stream, err := queryBool(q.Get("stream"), "stream")
	if err != nil {
		return err
	}
	if !stream {
		if q.Has("starting_after") {
			return &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: "starting_after",
				Msg: "starting_after is only allowed with stream=true."}
		}
		core.WriteJSON(w, http.StatusOK, resp.JSON())
		return nil
	}
	if data.Stream == "" {
		return &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: "stream",
			Msg: "Only background responses can be streamed again: this one was created without background."}
	}
	after, err := core.ParseLastEventID(r.Header.Get(core.HeaderLastEvent), "")
	if err != nil {
		return err
	}
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			return &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: "starting_after",
				Msg: "starting_after must be the sequence_number of an event (a whole number), not '" + core.Truncate(v, 64) + "'"}
		}
		after = n + 1 // the event with sequence_number n is the log's n+1st
	}
	return s.FollowStream(w, r, data.Stream, after)
}

// queryBool reads a boolean query parameter: "true", "false" or absent.
func queryBool(v, name string) (bool, error) {
	switch v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: name,
		Msg: name + " must be true or false, not '" + core.Truncate(v, 64) + "'"}
}

// stop stops response id, which has not ended as resp says, wherever it
// runs: here at once, on another replica through its stream's cancel;
// then it waits (until ctx is done) for its end to be stored and returns
// the Response as stored.
func (s *API) stop(ctx context.Context, id string, resp *openai.Response, data *jobs.ResponseData) (*openai.Response, error) {
	if s.running.cancel(ctx, id) {
		resp, _, err := s.LoadResponse(ctx, id, "")
		return resp, err
	}
	if data.Stream == "" || ended(resp.Status) {
		return resp, nil
	}
	if err := s.Resume.Cancel(ctx, data.Stream, core.CallerKey(ctx)); err != nil && !errors.Is(err, resume.ErrNotFound) {
		return nil, err
	}
	// Bounded: a replica that died with the response leaves it as it was.
	wait, cancel := context.WithTimeout(ctx, stopWait)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		resp, _, err := s.LoadResponse(ctx, id, "")
		if err != nil || ended(resp.Status) {
			return resp, err
		}
		select {
		case <-wait.Done():
			return resp, nil // still running as far as the store knows
		case <-t.C:
		}
	}
}

// stopWait bounds how long a cancel or delete waits for a response that
// runs on another replica to store its end.
const stopWait = 10 * time.Second

// ended reports whether a response with status has ended.
func ended(status string) bool {
	switch status {
	case openai.StatusQueued, openai.StatusInProgress:
		return false
	}
	return true
}

// DeleteResponse serves DELETE /v1/responses/{id}. A response still
// running is cancelled first.
func (s *API) DeleteResponse(w http.ResponseWriter, r *http.Request) error {
	id := core.URLParam(r, "id")
	resp, data, err := s.LoadResponse(r.Context(), id, "")
	if err != nil {
		return err
	}
	if _, err := s.stop(r.Context(), id, resp, data); err != nil {
		return err
	}
	err = s.Opts.Store.DeleteResponse(r.Context(), id)
	if errors.Is(err, store.ErrNoResponse) {
		return jobs.ResponseNotFound(id, "")
	}
	if err != nil {
		return s.ResponseStoreError(r.Context(), err)
	}
	s.releaseStorage(r.Context(), id)
	core.WriteJSON(w, http.StatusOK, jsonOf(struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
	}{id, "response", true}))
	return nil
}

// CancelResponse serves POST /v1/responses/{id}/cancel: a background
// response still running, on any replica, is stopped upstream and stored
// as cancelled; the answer is the Response as stored then. Cancelling one
// that has ended answers it as it is.
func (s *API) CancelResponse(w http.ResponseWriter, r *http.Request) error {
	id := core.URLParam(r, "id")
	resp, data, err := s.LoadResponse(r.Context(), id, "")
	if err != nil {
		return err
	}
	if !resp.Background {
		return &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_request", Param: "response_id",
			Msg: "Only responses created with background set to true can be cancelled."}
	}
	if resp, err = s.stop(r.Context(), id, resp, data); err != nil {
		return err
	}
	core.WriteJSON(w, http.StatusOK, resp.JSON())
	return nil
}

// jsonOf is v's JSON; v is one of the gateway's own types, which always
// marshal.
func jsonOf(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("gateway: marshal: " + err.Error())
	}
	return b
}

// runningResponses are the stored responses running on this replica, for
// cancel.
type runningResponses struct {
	mu sync.Mutex
	m  map[string]*runningResponse
}

type runningResponse struct {
	cancel context.CancelCauseFunc
	ended  chan struct{} // closed once the end is stored
}

// add registers response id running with cancel; done unregisters it once
// its end is stored.
func (rr *runningResponses) add(id string, cancel context.CancelCauseFunc) (done func()) {
	e := &runningResponse{cancel: cancel, ended: make(chan struct{})}
	rr.mu.Lock()
	rr.m[id] = e
	rr.mu.Unlock()
	return func() {
		rr.mu.Lock()
		delete(rr.m, id)
		rr.mu.Unlock()
		close(e.ended)
	}
}

// cancel stops response id if it runs here and waits until its end is
// stored (or ctx is done); it reports whether it ran here.
func (rr *runningResponses) cancel(ctx context.Context, id string) bool {
	rr.mu.Lock()
	e := rr.m[id]
	rr.mu.Unlock()
	if e == nil {
		return false
	}
	e.cancel(resume.ErrCancelled)
	select {
	case <-e.ended:
	case <-ctx.Done():
	}
	return true
}

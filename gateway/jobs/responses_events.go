package jobs

// How a Responses request's output becomes events: the translator
// (ResponseEvents) and the sink of a background response (LogSink).

import (
	"context"
	"errors"
	"strings"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/resume"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// ResponseEvents turns a text model's responses into a Response: its
// semantic events (streams) or the object itself (one body).
type ResponseEvents struct {
	r      *openai.Responder
	stream bool
	// Save, if set, stores the Response at its end, before the payloads
	// that tell the client.
	Save func(*openai.Response)

	text strings.Builder
	// tools parses the answer's function calls (nil without tools);
	// calls are those found so far, callID makes their items' ids.
	tools   *openai.ToolParser
	calls   []openai.ToolCall
	callID  func() string
	live    []openai.OutputMessage // the calls streamed as generated (tools.Live)
	event   []byte                 // the last delta event, reused
	nextOut [1][]byte              // what next returns: event
	ended   bool                   // the Response has its end
	failed  []byte                 // the response.failed event, once made
	textReader
}

func (t *ResponseEvents) Begin() [][]byte {
	t.textReader.begin()
	if !t.stream {
		return nil
	}
	ps := t.r.Start()
	if t.r.Resp.Background && t.Save != nil {
		t.Save(t.r.Resp) // queued no more: in_progress
	}
	return ps
}

func (t *ResponseEvents) Next(resp *pb.ModelInferResponse) ([][]byte, error) {
	delta, err := t.read(resp)
	if err != nil || len(delta) == 0 {
		return nil, err
	}
	if t.tools != nil {
		var calls []openai.ToolCall
		delta, calls = t.tools.Feed(delta)
		t.calls = append(t.calls, calls...)
		if t.tools.Live && t.tools.Format == openai.ToolFormatGuided {
			return t.callEvents(t.tools.Deltas()), nil
		}
		if len(delta) == 0 {
			return nil, nil
		}
	}
	t.text.Write(delta)
	if !t.stream {
		return nil, nil
	}
	t.event = t.r.AppendDelta(t.event[:0], delta)
	t.nextOut[0] = t.event
	if open := t.r.Open(); open != nil { // a Lazy message's first text
		return append(open, t.event), nil
	}
	return t.nextOut[:], nil
}

func (t *ResponseEvents) End() ([][]byte, error) {
	tail := t.tail()
	if t.tools != nil {
		content, calls := t.tools.Feed([]byte(tail))
		rest, more := t.tools.Finish()
		tail = string(append(content, rest...))
		t.calls = append(append(t.calls, calls...), more...)
	}
	t.text.WriteString(tail)
	in, out := t.tokens()
	t.r.Resp.Finish(t.r.ItemID, t.text.String(), t.reason, openai.NewUsage(in, out))
	if t.live != nil {
		for i := range t.live {
			if t.live[i].Status == openai.StatusInProgress { // cut off
				t.live[i].Status = openai.StatusIncomplete
			}
		}
		t.r.Resp.AddItems(t.live)
	} else {
		t.r.Resp.AddCalls(t.calls, t.callID)
	}
	t.stored()
	if !t.stream {
		return [][]byte{t.r.Resp.JSON()}, nil
	}
	var ps [][]byte
	if tail != "" {
		ps = append(ps, t.r.Open()...)
		ps = append(ps, t.r.AppendDelta(nil, []byte(tail)))
	}
	return append(ps, t.r.End()...), nil
}

// Response is the Response the translator keeps.
func (t *ResponseEvents) Response() *openai.Response { return t.r.Resp }

// callEvents are the events of calls streamed as they are generated:
// each call's item added, its arguments' deltas, and its done events.
// The output holds only calls, so call i is output item i.
func (t *ResponseEvents) callEvents(deltas []openai.CallDelta) [][]byte {
	var out [][]byte
	for _, d := range deltas {
		if d.ID != "" {
			t.live = append(t.live, openai.CallItem(t.callID(), openai.StatusInProgress, openai.ToolCall{ID: d.ID, Name: d.Name}))
			out = append(out, t.r.CallAdded(d.Index, t.live[d.Index]))
		}
		item := &t.live[d.Index]
		if d.Arguments != "" {
			item.Arguments += d.Arguments
			out = append(out, t.r.CallDelta(d.Index, item.ID, d.Arguments))
		}
		if d.Done {
			item.Status = openai.StatusCompleted
			out = append(out, t.r.CallDone(d.Index, *item)...)
		}
	}
	return out
}

// stored marks the Response ended and saves it.
func (t *ResponseEvents) stored() {
	t.ended = true
	if t.Save != nil {
		t.Save(t.r.Resp)
	}
}

// fail ends the Response with status (failed or cancelled) and, when it
// failed, e; the text so far is kept.
func (t *ResponseEvents) fail(status string, e *core.HTTPError) {
	resp := t.r.Resp
	if t.text.Len() > 0 {
		resp.Finish(t.r.ItemID, t.text.String(), "length", nil)
		resp.IncompleteDetails = nil
	}
	if status == openai.StatusCancelled {
		resp.Status = status
	} else {
		resp.Fail(e.Code, e.Msg)
	}
	t.stored()
}

// FailedEvent is the stream's in-band error (an errorFormat): the
// response.failed event, never a cut connection.
func (t *ResponseEvents) FailedEvent(e *core.HTTPError) []byte {
	if t.failed == nil { // once: a resumable stream's log and its live client get the same event
		t.fail(openai.StatusFailed, e)
		t.failed = t.r.Failed()
	}
	return t.failed
}

// Finish stores the end of a stored response whose request ended with
// err (serve's) under ctx, if the translator has not: cancelled when its
// cancel ended it, failed otherwise.
func (t *ResponseEvents) Finish(ctx context.Context, err error) {
	if t.ended {
		return
	}
	if err == nil {
		err = core.ErrClientGone
	}
	if errors.Is(context.Cause(ctx), resume.ErrCancelled) || errors.Is(err, core.ErrClientGone) {
		t.fail(openai.StatusCancelled, nil)
		return
	}
	t.FailedEvent(core.Classify(err))
}

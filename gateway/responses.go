package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/textmodel"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// OpenAI's Responses API over text models: POST /v1/responses runs on the
// one request lifecycle (serve) like chat completions, its translator
// (responseEvents) giving the Response object or its semantic events.

// responseJob turns a Responses API request into a job whose payloads
// take form f, and the translator that keeps its Response.
func (s *Server) responseJob(ctx context.Context, rr *openai.ResponsesRequest, f form) (*job, *responseEvents, error) {
	ad, err := s.textModel(ctx, rr.Model)
	if err != nil {
		return nil, nil, err
	}
	prompt, err := s.templateFor(rr.Model).Render(rr.Messages(nil))
	if err != nil {
		return nil, nil, &httpError{Status: http.StatusBadRequest, Code: "invalid_value", Param: "input", Msg: err.Error()}
	}
	req, err := ad.Request(rr.Model, "", prompt, rr.Params)
	if err != nil {
		return nil, nil, err
	}
	resp := openai.NewResponse(s.ids.next("resp"), s.opts.Now().Unix(), rr)
	tr := &responseEvents{ad: ad, stream: f != formBody,
		r: &openai.Responder{Resp: resp, ItemID: s.ids.next("msg")}}
	return &job{req: req, tr: tr, op: opChat}, tr, nil
}

// createResponse serves POST /v1/responses.
func (s *Server) createResponse(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	rr, err := openai.ParseResponses(body)
	if err != nil {
		return err
	}
	j, tr, err := s.responseJob(r.Context(), rr, streamForm(rr.Stream))
	if err != nil {
		return err
	}
	if !rr.Stream {
		return s.serve(r.Context(), r.RemoteAddr, j, &bodySink{w: w})
	}
	out := s.newSSESink(w, r, tr.failedEvent, false)
	out.named = true
	return s.serve(r.Context(), r.RemoteAddr, j, out)
}

// responseEvents turns a text model's responses into a Response: its
// semantic events (streams) or the object itself (one body).
type responseEvents struct {
	ad     textmodel.Adapter
	r      *openai.Responder
	stream bool

	join    textmodel.Joiner
	text    strings.Builder
	delta   []byte    // the text of the last response, reused
	event   []byte    // the last delta event, reused
	nextOut [1][]byte // what next returns: event
	tally
}

func (t *responseEvents) begin() [][]byte {
	t.tally.begin()
	if !t.stream {
		return nil
	}
	return t.r.Start()
}

func (t *responseEvents) next(resp *pb.ModelInferResponse) ([][]byte, error) {
	p, err := t.ad.Decode(resp)
	if err != nil {
		return nil, err
	}
	t.add(p)
	t.delta = t.join.Append(t.delta[:0], p.Text)
	if len(t.delta) == 0 {
		return nil, nil
	}
	t.text.Write(t.delta)
	if !t.stream {
		return nil, nil
	}
	t.event = t.r.AppendDelta(t.event[:0], t.delta)
	t.nextOut[0] = t.event
	return t.nextOut[:], nil
}

func (t *responseEvents) end() ([][]byte, error) {
	tail := t.join.Flush()
	t.text.WriteString(tail)
	in, out := t.tokens()
	t.r.Resp.Finish(t.r.ItemID, t.text.String(), t.reason, openai.NewUsage(in, out))
	if !t.stream {
		return [][]byte{t.r.Resp.JSON()}, nil
	}
	var ps [][]byte
	if tail != "" {
		ps = append(ps, t.r.AppendDelta(nil, []byte(tail)))
	}
	return append(ps, t.r.End()...), nil
}

// fail ends the Response as failed with e, keeping the text so far.
func (t *responseEvents) fail(e *httpError) {
	resp := t.r.Resp
	if t.text.Len() > 0 {
		resp.Finish(t.r.ItemID, t.text.String(), "length", nil)
		resp.IncompleteDetails = nil
	}
	resp.Fail(e.Code, e.Msg)
}

// failedEvent is the stream's in-band error (an errorFormat): the
// response.failed event, never a cut connection.
func (t *responseEvents) failedEvent(e *httpError) []byte {
	t.fail(e)
	return t.r.Failed()
}

package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/store"
)

// A Responses API request's job, and the stored responses it continues
// (previous_response_id) or refers to (item_reference): read here,
// written by the /v1 surface (openaiapi).

// ResponseData is what the gateway stores of a response beside its
// object (store.StoredResponse.Data).
type ResponseData struct {
	// Input is the response's own input items, as messages.
	Input []openai.ChatMessage `json:"input"`
	// Previous is the response it continues (previous_response_id),
	// whose record holds the conversation before it: a chain stores each
	// turn once.
	Previous string `json:"previous,omitempty"`
	// History is the conversation it continues, as records written
	// before Previous kept it (read, never written).
	History []openai.ChatMessage `json:"history,omitempty"`
	// Stream is the id of a background response's resumable stream.
	Stream string `json:"stream,omitempty"`
}

// turn is what this response adds to its conversation: the history an
// old record kept, the input, the answer.
func (d *ResponseData) turn(answer string, calls []openai.ToolCall) []openai.ChatMessage {
	out := append(append([]openai.ChatMessage{}, d.History...), d.Input...)
	return append(out, openai.ChatMessage{Role: "assistant", Content: answer, ToolCalls: calls})
}

func ResponseNotFound(id, param string) *core.HTTPError {
	e := &core.HTTPError{Status: http.StatusNotFound, Code: "response_not_found", Param: param,
		Msg: "Response with id '" + id + "' not found."}
	if param == "previous_response_id" {
		e.Msg = "Previous response with id '" + id + "' not found."
	}
	return e
}

// ResponseStoreError is err, a failure of the Store's Responses, counted
// and logged; classify answers it (503 when the store is down).
func (s *Builder) ResponseStoreError(ctx context.Context, err error) error {
	if err != nil {
		s.StoreError(ctx, "responses", err)
	}
	return err
}

// LoadResponse reads stored response id for the caller: 404 (naming
// param) when there is none or it is another API key's.
func (s *Builder) LoadResponse(ctx context.Context, id, param string) (*openai.Response, *ResponseData, error) {
	rec, err := s.Opts.Store.GetResponse(ctx, id)
	if errors.Is(err, store.ErrNoResponse) || err == nil && rec.Owner != core.CallerKey(ctx) {
		return nil, nil, ResponseNotFound(id, param)
	}
	if err != nil {
		return nil, nil, s.ResponseStoreError(ctx, err)
	}
	resp := &openai.Response{}
	data := &ResponseData{}
	if err := json.Unmarshal(rec.Object, resp); err != nil {
		return nil, nil, err
	}
	if len(rec.Data) > 0 {
		if err := json.Unmarshal(rec.Data, data); err != nil {
			return nil, nil, err
		}
	}
	return resp, data, nil
}

// ResponseJob turns a Responses API request into a job whose payloads
// take form f, and the translator that keeps its Response. history is the
// conversation it continues.
func (s *Builder) ResponseJob(ctx context.Context, rr *openai.ResponsesRequest, history []openai.ChatMessage, f core.Form) (*core.Job, *ResponseEvents, error) {
	ad, err := s.TextModel(ctx, &rr.Model)
	if err != nil {
		return nil, nil, err
	}
	cr := rr.Chat()
	toolGuide, err := cr.ToolGuide()
	if err != nil {
		return nil, nil, err
	}
	switch {
	case toolGuide != nil:
		if err := s.checkGuided(ctx, rr.Model, "tool_choice", rr.ToolChoice, "'auto' or 'none'"); err != nil {
			return nil, nil, err
		}
		rr.Params.Guided = toolGuide
	case rr.Params.Guided != nil:
		if err := s.checkGuided(ctx, rr.Model, "text.format", rr.Format, "'text'"); err != nil {
			return nil, nil, err
		}
	}
	tools := rr.Tools
	if rr.ToolChoice == openai.ToolChoiceNone {
		tools = nil
	}
	prompt, format, err := s.chatPrompt(ctx, rr.Model, rr.Messages(history), tools, "input")
	if err != nil {
		return nil, nil, err
	}
	if toolGuide != nil {
		format = openai.ToolFormatGuided
	}
	req, err := ad.Request(rr.Model, "", prompt, rr.Params)
	if err != nil {
		return nil, nil, err
	}
	resp := openai.NewResponse(s.IDs.Next("resp"), s.Opts.Now().Unix(), rr)
	tr := &ResponseEvents{textReader: textReader{ad: ad}, stream: f != core.FormBody,
		r: &openai.Responder{Resp: resp, ItemID: messageItemID(resp.ID), Lazy: len(tools) > 0}}
	if len(tools) > 0 {
		tr.tools = &openai.ToolParser{Format: format, IDPrefix: "call_" + strings.TrimPrefix(resp.ID, "resp-") + "_", Single: !cr.ParallelToolCalls,
			Live: tr.stream}
		for _, t := range tools {
			tr.tools.Tools = append(tr.tools.Tools, t.Name)
		}
		tr.callID = func() string { return s.IDs.Next("fc") }
	}
	return &core.Job{Req: req, Tr: tr, Op: core.OpChat,
		Tokens: core.EstimateTokens(prompt, rr.Params.MaxTokens), Prompt: core.PromptTokens(prompt)}, tr, nil
}

// maxChain bounds the responses one conversation chains.
const maxChain = 1000

// ResponsesJob validates a Responses API request run on another surface
// (a WebSocket frame) into a job of form f, continuing the conversation
// it names (previous_response_id).
func (s *Builder) ResponsesJob(ctx context.Context, rr *openai.ResponsesRequest, f core.Form) (*core.Job, error) {
	history, err := s.History(ctx, rr)
	if err != nil {
		return nil, err
	}
	j, _, err := s.ResponseJob(ctx, rr, history, f)
	return j, err
}

// History is the conversation a request continues: that of its
// previous_response_id, if any, read turn by turn back along the chain of
// responses (each record names the one it continues). The conversation
// with the request's input must fit in Options.MaxBodyBytes, as a request
// that sent it all would: a chain of responses cannot grow without bound.
// A response of the chain that is gone (deleted, expired) is 404.
func (s *Builder) History(ctx context.Context, rr *openai.ResponsesRequest) ([]openai.ChatMessage, error) {
	if err := s.resolveReferences(ctx, rr.Input); err != nil {
		return nil, err
	}
	size := int64(0)
	for _, m := range rr.Input {
		size += int64(len(m.Content))
	}
	var turns [][]openai.ChatMessage // the latest first
	for id := rr.PreviousResponseID; id != ""; {
		if len(turns) == maxChain {
			return nil, &core.HTTPError{Status: http.StatusBadRequest, Code: "context_length_exceeded", Param: "previous_response_id",
				Msg: fmt.Sprintf("The conversation of previous_response_id '%s' chains more than %d responses: start a new conversation.",
					core.Truncate(rr.PreviousResponseID, 64), maxChain)}
		}
		prev, data, err := s.LoadResponse(ctx, id, "previous_response_id")
		if err != nil {
			return nil, err
		}
		turn := data.turn(prev.OutputText(), prev.Calls())
		for _, m := range turn {
			size += int64(len(m.Content))
		}
		if size > s.Opts.MaxBodyBytes {
			return nil, &core.HTTPError{Status: http.StatusBadRequest, Code: "context_length_exceeded", Param: "previous_response_id",
				Msg: fmt.Sprintf("The conversation of previous_response_id '%s' with this input holds more than the %d bytes of text a request may send (--max-body): start a new conversation.",
					core.Truncate(rr.PreviousResponseID, 64), s.Opts.MaxBodyBytes)}
		}
		turns = append(turns, turn)
		id = data.Previous
	}
	slices.Reverse(turns)
	return slices.Concat(turns...), nil
}

// messageItemID is the id of the message item of response id: the
// response's id under another prefix, so that an item_reference to it
// finds the response.
func messageItemID(id string) string { return "msg-" + strings.TrimPrefix(id, "resp-") }

// resolveReferences fills in the text of the input's item_reference
// items: each names the message item of a stored response of the caller
// (messageItemID), whose text it stands for; another id is 404.
func (s *Builder) resolveReferences(ctx context.Context, input []openai.ChatMessage) error {
	for i := range input {
		ref := input[i].Ref
		if ref == "" {
			continue
		}
		param := fmt.Sprintf("input[%d].id", i)
		notFound := &core.HTTPError{Status: http.StatusNotFound, Code: "not_found", Param: param,
			Msg: fmt.Sprintf("Item with id '%s' not found (%s: an item_reference names the message item of a stored response).", core.Truncate(ref, 64), param)}
		rest, ok := strings.CutPrefix(ref, "msg-")
		if !ok || rest == "" || strings.Contains(rest, "-") {
			return notFound
		}
		prev, _, err := s.LoadResponse(ctx, "resp-"+rest, param)
		var he *core.HTTPError
		if errors.As(err, &he) && he.Status == http.StatusNotFound {
			return notFound
		}
		if err != nil {
			return err
		}
		input[i].Content = prev.OutputText()
	}
	return nil
}

// Package openaiapi serves the OpenAI-compatible /v1 routes: chat
// completions, completions, the Responses API (with stored and background
// responses) and the models list, over text models that follow the vLLM
// or TensorRT-LLM conventions. Its requests live the core's one life
// (core.Server.Serve).
package openaiapi

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/textmodel"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// API is the /v1 surface, on the gateway's core. Its chat templates come
// from the core's Options (ChatTemplate, ChatTemplates) and the models'
// own configs.
type API struct {
	*core.Server
	templates map[string]*openai.Template
	template  *openai.Template
	jinja     jinjaTemplates   // models' own chat templates (chatprompt.go)
	running   runningResponses // stored responses running here
}

// New returns the surface on c. It panics if a chat template of c's
// Options does not parse (a wiring error).
func New(c *core.Server) *API {
	s := &API{
		Server:    c,
		template:  openai.MustParseTemplate("default", c.Opts.ChatTemplate),
		templates: map[string]*openai.Template{},
		running:   runningResponses{m: map[string]*runningResponse{}},
	}
	for model, src := range c.Opts.ChatTemplates {
		s.templates[model] = openai.MustParseTemplate(model, src)
	}
	return s
}

// The OpenAI-compatible /v1 routes: chat completions and completions over
// any text model (through the adapter its metadata selects), and the
// models list.

// textModel finds the model *model names and its adapter. A name that
// differs from a served model's only in case names that model: *model
// becomes its name. An unknown model is OpenAI's 404, with the nearest
// name when one is near.
func (s *API) textModel(ctx context.Context, model *string) (textmodel.Adapter, error) {
	md, err := s.Inspect.ModelMetadata(ctx, *model, "")
	if err != nil && core.Classify(err).Status == http.StatusNotFound {
		if alt := s.NearestModel(ctx, *model); strings.EqualFold(alt, *model) {
			*model = alt
			md, err = s.Inspect.ModelMetadata(ctx, alt, "")
		}
	}
	if err != nil {
		err = s.NotLoaded(ctx, *model, err)
		if e := core.Classify(err); e.Status == http.StatusNotFound && e.Code != core.CodeNotLoaded {
			return nil, &core.HTTPError{Status: http.StatusNotFound, Code: "model_not_found", Param: "model",
				Msg: "The model '" + *model + "' does not exist" + s.DidYouMean(ctx, *model), Err: err}
		}
		return nil, err
	}
	return textmodel.Select(md)
}

// ChatJob turns a chat completions request into a job whose payloads take
// form f.
func (s *API) ChatJob(ctx context.Context, cr *openai.ChatRequest, f core.Form) (*core.Job, error) {
	ad, err := s.textModel(ctx, &cr.Model)
	if err != nil {
		return nil, err
	}
	toolGuide, err := cr.ToolGuide()
	if err != nil {
		return nil, err
	}
	switch {
	case toolGuide != nil:
		if err := s.checkGuided(ctx, cr.Model, "tool_choice", cr.ToolChoice, "'auto' or 'none'"); err != nil {
			return nil, err
		}
		cr.Params.Guided = toolGuide
	case cr.Guided != nil:
		if err := s.checkGuided(ctx, cr.Model, "response_format", cr.ResponseFormat, "'text'"); err != nil {
			return nil, err
		}
		cr.Params.Guided = cr.Guided
	}
	tools := cr.Tools
	if cr.ToolChoice == openai.ToolChoiceNone {
		tools = nil
	}
	prompt, format, err := s.chatPrompt(ctx, cr.Model, cr.Messages, tools, "messages")
	if err != nil {
		return nil, err
	}
	req, err := ad.Request(cr.Model, "", prompt, cr.Params)
	if err != nil {
		return nil, err
	}
	ch := &openai.Chunker{ID: s.IDs.Next("chatcmpl"), Created: s.Opts.Now().Unix(), Model: cr.Model, Chat: true, IncludeUsage: cr.IncludeUsage}
	tr := newTextEvents(ad, ch, f, "")
	if toolGuide != nil {
		format = openai.ToolFormatGuided
	}
	if len(tools) > 0 {
		tr.tools = &openai.ToolParser{Format: format, IDPrefix: "call_" + strings.TrimPrefix(ch.ID, "chatcmpl-") + "_", Single: !cr.ParallelToolCalls,
			Live: tr.stream}
		for _, t := range tools {
			tr.tools.Tools = append(tr.tools.Tools, t.Name)
		}
	}
	return &core.Job{Req: req, Tr: tr, Op: core.OpChat,
		Tokens: core.EstimateTokens(prompt, cr.Params.MaxTokens), Prompt: core.PromptTokens(prompt)}, nil
}

// checkGuided refuses a request that needs guided decoding (a required or
// named tool choice, or a JSON response format: param's value) when
// model's config does not say that it honours guided_decoding's json kind
// (the config parameter guided_decoding, a comma-separated list of vLLM's
// kinds: the engine's text models set it to "json"). Without it, the
// output would be unvalidated, so the client is told instead.
func (s *API) checkGuided(ctx context.Context, model, param, value, instead string) error {
	cfg, err := s.ModelConfig(ctx, model, "")
	if err != nil && status.Code(err) != codes.Unimplemented {
		return err
	}
	for _, k := range strings.Split(cfg.GetParameters()[paramGuidedDecoding].GetStringValue(), ",") {
		if strings.TrimSpace(k) == "json" {
			return nil
		}
	}
	return &core.HTTPError{Status: http.StatusBadRequest, Code: "unsupported_value", Param: param,
		Msg: "Unsupported value: '" + param + "' " + value + " needs constrained decoding, which model '" + model +
			"' does not offer on this server (its config has no parameter guided_decoding listing json); use " + instead + "."}
}

// CompletionJob turns a completions request into a job whose payloads
// take form f.
func (s *API) CompletionJob(ctx context.Context, cr *openai.CompletionRequest, f core.Form) (*core.Job, error) {
	ad, err := s.textModel(ctx, &cr.Model)
	if err != nil {
		return nil, err
	}
	req, err := ad.Request(cr.Model, "", cr.Prompt, cr.Params)
	if err != nil {
		return nil, err
	}
	ch := &openai.Chunker{ID: s.IDs.Next("cmpl"), Created: s.Opts.Now().Unix(), Model: cr.Model, IncludeUsage: cr.IncludeUsage}
	echo := ""
	if cr.Echo {
		echo = cr.Prompt
	}
	return &core.Job{Req: req, Tr: newTextEvents(ad, ch, f, echo), Op: core.OpCompletion,
		Tokens: core.EstimateTokens(cr.Prompt, cr.Params.MaxTokens), Prompt: core.PromptTokens(cr.Prompt)}, nil
}

// serveOpenAI runs j: as an event stream when the client asked for one,
// otherwise as one JSON body.
func (s *API) serveOpenAI(w http.ResponseWriter, r *http.Request, j *core.Job, stream bool) error {
	if stream {
		return s.ServeSSE(w, r, j, core.OpenAIErrors, core.FormatOpenAI, false)
	}
	return s.Serve(r.Context(), r.RemoteAddr, j, &core.BodySink{W: w})
}

// streamForm is the form of an OpenAI request's payloads over HTTP.
func streamForm(stream bool) core.Form {
	if stream {
		return core.FormSSE
	}
	return core.FormBody
}

// ChatCompletions serves POST /v1/chat/completions.
func (s *API) ChatCompletions(w http.ResponseWriter, r *http.Request) error {
	body, err := s.ReadBody(w, r)
	if err != nil {
		return err
	}
	cr, err := openai.ParseChat(body)
	if err != nil {
		return err
	}
	j, err := s.ChatJob(r.Context(), cr, streamForm(cr.Stream))
	if err != nil {
		return err
	}
	return s.serveOpenAI(w, r, j, cr.Stream)
}

// Completions serves POST /v1/completions.
func (s *API) Completions(w http.ResponseWriter, r *http.Request) error {
	body, err := s.ReadBody(w, r)
	if err != nil {
		return err
	}
	cr, err := openai.ParseCompletion(body)
	if err != nil {
		return err
	}
	j, err := s.CompletionJob(r.Context(), cr, streamForm(cr.Stream))
	if err != nil {
		return err
	}
	return s.serveOpenAI(w, r, j, cr.Stream)
}

// ListModels lists the ready models that follow a text convention.
func (s *API) ListModels(w http.ResponseWriter, r *http.Request) error {
	index, err := s.Inspect.RepositoryIndex(r.Context())
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var models []openai.Model
	for _, m := range index {
		name := m.GetName()
		if seen[name] || (m.GetState() != "" && !strings.EqualFold(m.GetState(), "READY")) || core.ModelAllowed(r.Context(), name) != nil {
			continue
		}
		seen[name] = true
		if _, err := s.textModel(r.Context(), &name); err != nil {
			continue
		}
		models = append(models, openai.NewModel(name))
	}
	sort.Slice(models, func(i, j int) bool { return models[i].ID < models[j].ID })
	core.WriteJSON(w, http.StatusOK, openai.ModelList(models))
	return nil
}

// GetModel serves GET /v1/models/{id}.
func (s *API) GetModel(w http.ResponseWriter, r *http.Request) error {
	id := core.URLParam(r, "id")
	if err := core.ModelAllowed(r.Context(), id); err != nil {
		return err
	}
	if _, err := s.textModel(r.Context(), &id); err != nil {
		if errors.Is(err, textmodel.ErrNotText) {
			err = &core.HTTPError{Status: http.StatusNotFound, Code: "model_not_found", Param: "model", Msg: "The model '" + id + "' is not a text model", Err: err}
		}
		return err
	}
	core.WriteJSON(w, http.StatusOK, openai.ModelObject(openai.NewModel(id)))
	return nil
}

// textEvents turns a text model's responses into OpenAI chunks (stream) or
// one completion object.
type textEvents struct {
	ch     *openai.Chunker
	stream bool   // chunks, not one completion object
	done   bool   // end the chunks with [DONE] (event streams)
	echo   string // completions with echo: the prompt, sent first
	// tools, set where the request has tools, parses the output's calls.
	tools *openai.ToolParser
	calls []openai.ToolCall // the calls found (bodies: all of them)

	text    strings.Builder
	event   []byte    // the last chunk, reused
	nextOut [1][]byte // what next returns: event
	textReader
}

// textReader reads a text model's responses for a translator: the text
// of each (whole UTF-8 characters only), and what they tell of the finish
// reason and the tokens. Its begin must be called first.
type textReader struct {
	ad      textmodel.Adapter
	join    textmodel.Joiner
	delta   []byte // the text of the last response, reused
	reason  string
	in, out int
	pieces  int
}

func (t *textReader) begin() { t.in, t.out = -1, -1 }

// read decodes resp and returns its text, possibly empty, valid until the
// next read.
func (t *textReader) read(resp *pb.ModelInferResponse) ([]byte, error) {
	p, err := t.ad.Decode(resp)
	if err != nil {
		return nil, err
	}
	if p.FinishReason != "" {
		t.reason = p.FinishReason
	}
	if p.InputTokens >= 0 {
		t.in = p.InputTokens
	}
	if p.OutputTokens >= 0 {
		t.out = p.OutputTokens
	}
	if len(p.Text) > 0 {
		t.pieces++
	}
	t.delta = t.join.Append(t.delta[:0], p.Text)
	return t.delta, nil
}

// tail is the text held back at the end (an incomplete character).
func (t *textReader) tail() string { return t.join.Flush() }

// tokens is the input and output tokens; a model that does not count its
// output is taken as one token per response with text.
func (t *textReader) tokens() (in, out int) {
	if t.out < 0 {
		return max(t.in, 0), t.pieces
	}
	return max(t.in, 0), t.out
}

// The text translators report the model's usage, which the core settles
// a key's tokens and records the GenAI metrics with.
var (
	_ core.UsageReporter = (*textEvents)(nil)
	_ core.UsageReporter = (*responseEvents)(nil)
)

// Outcome is the finish reason the model gave ("" if none) and the
// request's token counts (UsageReporter).
func (t *textReader) Outcome() (reason string, in, out int) {
	_, out = t.tokens()
	return t.reason, t.in, out
}

func newTextEvents(ad textmodel.Adapter, ch *openai.Chunker, f core.Form, echo string) *textEvents {
	return &textEvents{textReader: textReader{ad: ad}, ch: ch, stream: f != core.FormBody, done: f == core.FormSSE, echo: echo}
}

func (t *textEvents) Begin() [][]byte {
	t.textReader.begin()
	if !t.stream {
		t.text.WriteString(t.echo)
		return nil
	}
	var out [][]byte
	if t.ch.Chat {
		out = append(out, t.ch.Role())
	}
	if t.echo != "" {
		out = append(out, t.ch.Delta(t.echo))
	}
	return out
}

func (t *textEvents) Next(resp *pb.ModelInferResponse) ([][]byte, error) {
	delta, err := t.read(resp)
	if err != nil || len(delta) == 0 {
		return nil, err
	}
	if !t.stream {
		t.text.Write(delta)
		return nil, nil
	}
	if t.tools != nil {
		content, calls := t.tools.Feed(delta)
		return t.toolChunks(content, calls), nil
	}
	t.event = t.ch.AppendDelta(t.event[:0], delta)
	t.nextOut[0] = t.event
	return t.nextOut[:], nil
}

func (t *textEvents) usage() openai.Usage {
	in, out := t.tokens()
	return openai.Usage{PromptTokens: in, CompletionTokens: out, TotalTokens: in + out}
}

func (t *textEvents) End() ([][]byte, error) {
	tail := t.tail()
	reason := t.reason
	if reason == "" {
		reason = "stop"
	}
	if !t.stream {
		t.text.WriteString(tail)
		text := t.text.String()
		if t.tools != nil {
			content, calls := t.tools.Feed([]byte(text))
			rest, more := t.tools.Finish()
			text, t.calls = string(append(content, rest...)), append(calls, more...)
			if len(t.calls) > 0 && reason == "stop" {
				reason = "tool_calls"
			}
			return [][]byte{t.ch.ChatCompletion(text, t.calls, reason, t.usage())}, nil
		}
		return [][]byte{t.ch.Completion(text, reason, t.usage())}, nil
	}
	var out [][]byte
	if t.tools != nil {
		content, calls := t.tools.Feed([]byte(tail))
		out = append(out, t.toolChunks(content, calls)...)
		content, calls = t.tools.Finish()
		out = append(out, t.toolChunks(content, calls)...)
		if len(t.calls) > 0 && reason == "stop" {
			reason = "tool_calls"
		}
	} else if tail != "" {
		out = append(out, t.ch.Delta(tail))
	}
	out = append(out, t.ch.Finish(reason))
	if t.ch.IncludeUsage {
		out = append(out, t.ch.UsageChunk(t.usage()))
	}
	if t.done {
		out = append(out, []byte(openai.Done))
	}
	return out, nil
}

// toolChunks are the chunks of content and calls that a tool parser let
// through.
func (t *textEvents) toolChunks(content []byte, calls []openai.ToolCall) [][]byte {
	var out [][]byte
	if len(content) > 0 {
		out = append(out, t.ch.AppendDelta(nil, content))
	}
	if t.tools.Live && t.tools.Format == openai.ToolFormatGuided { // calls stream as generated
		out = append(out, t.ch.CallDeltas(t.tools.Deltas())...)
	} else if len(calls) > 0 {
		out = append(out, t.ch.ToolCallDeltas(calls, len(t.calls))...)
	}
	t.calls = append(t.calls, calls...)
	return out
}

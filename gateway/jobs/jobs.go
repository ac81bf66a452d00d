// Package jobs builds a request's core.Job (its ModelInferRequest and the
// translator of its responses) from a /v2 generate body or a /v1 chat,
// completions or responses request: the builders every surface that takes
// those bodies shares (the HTTP routes of openaiapi and tritonapi, and the
// frames of wsapi), called directly. It knows the models' chat templates
// and reads the stored responses a Responses request continues.
package jobs

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/textmodel"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Builder builds jobs on the gateway's core. Its chat templates come
// from the core's Options (ChatTemplate, ChatTemplates) and the models'
// own configs.
type Builder struct {
	*core.Server
	templates map[string]*openai.Template
	template  *openai.Template
	jinja     jinjaTemplates // models' own chat templates (chatprompt.go)
	adapters  sync.Map       // model name → selected: TextModel's last Select
}

// selected is the adapter Select gave for a model's metadata md (the
// upstream's cached answer, shared until it is fetched again).
type selected struct {
	md  *pb.ModelMetadataResponse
	ad  textmodel.Adapter
	err error
}

// New returns the builder on c. It panics if a chat template of c's
// Options does not parse (a wiring error).
func New(c *core.Server) *Builder {
	s := &Builder{
		Server:    c,
		template:  openai.MustParseTemplate("default", c.Opts.ChatTemplate),
		templates: map[string]*openai.Template{},
	}
	for model, src := range c.Opts.ChatTemplates {
		s.templates[model] = openai.MustParseTemplate(model, src)
	}
	return s
}

// TextModel finds the model *model names and its adapter. A name that
// differs from a served model's only in case names that model: *model
// becomes its name. An unknown model is OpenAI's 404, with the nearest
// name when one is near.
func (s *Builder) TextModel(ctx context.Context, model *string) (textmodel.Adapter, error) {
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
	return s.adapter(*model, md)
}

// adapter is textmodel.Select(md) for model, selected again only when
// the upstream's metadata of model is a new answer: a request does not
// pay for a map of the model's inputs and an adapter of its own.
func (s *Builder) adapter(model string, md *pb.ModelMetadataResponse) (textmodel.Adapter, error) {
	if v, ok := s.adapters.Load(model); ok && v.(*selected).md == md {
		return v.(*selected).ad, v.(*selected).err
	}
	ad, err := textmodel.Select(md)
	s.adapters.Store(model, &selected{md: md, ad: ad, err: err})
	return ad, err
}

// ChatJob turns a chat completions request into a job whose payloads take
// form f.
func (s *Builder) ChatJob(ctx context.Context, cr *openai.ChatRequest, f core.Form) (*core.Job, error) {
	ad, err := s.TextModel(ctx, &cr.Model)
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
func (s *Builder) checkGuided(ctx context.Context, model, param, value, instead string) error {
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
func (s *Builder) CompletionJob(ctx context.Context, cr *openai.CompletionRequest, f core.Form) (*core.Job, error) {
	ad, err := s.TextModel(ctx, &cr.Model)
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

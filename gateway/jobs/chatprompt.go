package jobs

import (
	"context"
	"net/http"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/gateway/chattemplate"
	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/openai"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// Model config parameters that carry a model's chat template, as Triton's
// OpenAI frontend reads them: a model whose config has chat_template gets
// its /v1 chat prompts rendered by that Jinja template, with bos_token and
// eos_token, and the generation prompt on.
const (
	paramChatTemplate = "chat_template"
	paramBOSToken     = "bos_token"
	paramEOSToken     = "eos_token"
	// paramToolParser names the format the model writes tool calls in
	// (hermes, llama3 or mistral), where its chat template does not tell.
	paramToolParser = "tool_parser"
	// paramGuidedDecoding lists the kinds of vLLM's guided_decoding the
	// model's sampling_parameters honour ("json": JSON schemas and
	// json_object).
	paramGuidedDecoding = "guided_decoding"
)

// jinjaTemplates caches parsed model chat templates by model name; an
// entry is replaced when the model's config brings another source.
type jinjaTemplates struct {
	mu sync.Mutex
	m  map[string]parsedTemplate
}

type parsedTemplate struct {
	src  string
	tmpl *chattemplate.Template
	err  error
}

func (c *jinjaTemplates) get(model, src string) (*chattemplate.Template, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.m[model]; ok && p.src == src {
		return p.tmpl, p.err
	}
	t, err := chattemplate.Parse(src)
	if c.m == nil {
		c.m = map[string]parsedTemplate{}
	}
	c.m[model] = parsedTemplate{src: src, tmpl: t, err: err}
	return t, err
}

// chatPrompt renders the prompt of a conversation for model: with its
// template in Options.ChatTemplates if it has one there, else with the
// chat template its config carries (chat_template), else with
// Options.ChatTemplate. param names the request field at fault when the
// template refuses the conversation. tools go to a Jinja template's tools
// variable; a Go template does not render them. format is the format the
// model writes tool calls in: its config's tool_parser, else the one its
// Jinja template asks for, else Hermes'.
func (s *Builder) chatPrompt(ctx context.Context, model string, msgs []openai.ChatMessage, tools []openai.Tool, param string) (prompt string, format openai.ToolFormat, err error) {
	format = openai.ToolFormatHermes
	if t, ok := s.templates[model]; ok {
		prompt, err = renderGo(t, msgs, param)
		return prompt, format, err
	}
	cfg, err := s.ModelConfig(ctx, model, "")
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			prompt, err = renderGo(s.template, msgs, param) // an upstream without model configs
			return prompt, format, err
		}
		return "", format, err
	}
	params := cfg.GetParameters()
	src := params[paramChatTemplate].GetStringValue()
	if src != "" {
		format = openai.TemplateToolFormat(src)
	}
	if v := params[paramToolParser].GetStringValue(); v != "" {
		f, ok := openai.ParseToolFormat(v)
		if !ok {
			return "", format, &core.HTTPError{Status: http.StatusInternalServerError, Code: "chat_template_error",
				Msg: "The tool_parser '" + v + "' of model '" + model + "' is not one of hermes, llama3, mistral."}
		}
		format = f
	}
	if src == "" {
		prompt, err = renderGo(s.template, msgs, param)
		return prompt, format, err
	}
	prompt, err = s.renderJinja(model, src, params, msgs, tools, param)
	return prompt, format, err
}

// renderJinja renders a conversation with the Jinja chat template src of
// model.
func (s *Builder) renderJinja(model, src string, params map[string]*pb.ModelParameter, msgs []openai.ChatMessage, tools []openai.Tool, param string) (string, error) {
	tmpl, err := s.jinja.get(model, src)
	if err != nil {
		return "", &core.HTTPError{Status: http.StatusInternalServerError, Code: "chat_template_error",
			Msg: "The chat template of model '" + model + "' cannot be used: " + err.Error()}
	}
	in := chattemplate.Input{
		Messages:            make([]chattemplate.Message, len(msgs)),
		BOSToken:            params[paramBOSToken].GetStringValue(),
		EOSToken:            params[paramEOSToken].GetStringValue(),
		AddGenerationPrompt: true,
		Now:                 s.Opts.Now(),
	}
	for _, t := range tools {
		v, err := chattemplate.FromJSON(t.Raw)
		if err != nil {
			return "", &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: "tools", Msg: "Invalid tool '" + t.Name + "': " + err.Error()}
		}
		in.Tools = append(in.Tools, v)
	}
	for i, m := range msgs {
		tm := chattemplate.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID,
			NoContent: m.Role == "assistant" && m.Content == "" && len(m.ToolCalls) > 0}
		for _, c := range m.ToolCalls {
			args, err := chattemplate.FromJSON([]byte(c.Arguments))
			if err != nil {
				return "", &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: param,
					Msg: "Invalid arguments of tool call '" + c.ID + "': " + err.Error()}
			}
			tm.ToolCalls = append(tm.ToolCalls, chattemplate.ToolCall{ID: c.ID, Name: c.Name, Arguments: args})
		}
		in.Messages[i] = tm
	}
	prompt, err := tmpl.Render(in)
	if err != nil && !chattemplate.IsRaised(err) && retryWithEmptyContent(in.Messages) {
		// Some templates (Qwen3's) treat every assistant content as a
		// string; the SDKs send null beside tool_calls. Such a template
		// gets "" there, as it would from a client that sent "".
		prompt, err = tmpl.Render(in)
	}
	switch {
	case chattemplate.IsRaised(err): // the template refuses this conversation
		return "", &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: param,
			Msg: "The chat template of model '" + model + "' refused the conversation: " + err.Error()}
	case err != nil:
		return "", &core.HTTPError{Status: http.StatusInternalServerError, Code: "chat_template_error",
			Msg: "The chat template of model '" + model + "' failed: " + err.Error()}
	}
	return prompt, nil
}

// retryWithEmptyContent gives the assistant messages that carry only tool
// calls an empty content instead of none, reporting whether any did.
func retryWithEmptyContent(msgs []chattemplate.Message) bool {
	changed := false
	for i := range msgs {
		if msgs[i].NoContent {
			msgs[i].NoContent = false
			changed = true
		}
	}
	return changed
}

// renderGo renders msgs with a Go text/template chat template.
func renderGo(t *openai.Template, msgs []openai.ChatMessage, param string) (string, error) {
	prompt, err := t.Render(msgs)
	if err != nil {
		return "", &core.HTTPError{Status: http.StatusBadRequest, Code: "invalid_value", Param: param, Msg: err.Error()}
	}
	return prompt, nil
}

package gateway

import (
	"context"
	"net/http"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/streamgate/streamgate/gateway/chattemplate"
	"github.com/streamgate/streamgate/gateway/openai"
)

// Model config parameters that carry a model's chat template, as Triton's
// OpenAI frontend reads them: a model whose config has chat_template gets
// its /v1 chat prompts rendered by that Jinja template, with bos_token and
// eos_token, and the generation prompt on.
const (
	paramChatTemplate = "chat_template"
	paramBOSToken     = "bos_token"
	paramEOSToken     = "eos_token"
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
// template refuses the conversation.
func (s *Server) chatPrompt(ctx context.Context, model string, msgs []openai.ChatMessage, param string) (string, error) {
	if t, ok := s.templates[model]; ok {
		return renderGo(t, msgs, param)
	}
	cfg, err := s.modelConfig(ctx, model, "")
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return renderGo(s.template, msgs, param) // an upstream without model configs
		}
		return "", err
	}
	params := cfg.GetParameters()
	src := params[paramChatTemplate].GetStringValue()
	if src == "" {
		return renderGo(s.template, msgs, param)
	}
	tmpl, err := s.jinja.get(model, src)
	if err != nil {
		return "", &httpError{Status: http.StatusInternalServerError, Code: "chat_template_error",
			Msg: "The chat template of model '" + model + "' cannot be used: " + err.Error()}
	}
	in := chattemplate.Input{
		Messages:            make([]chattemplate.Message, len(msgs)),
		BOSToken:            params[paramBOSToken].GetStringValue(),
		EOSToken:            params[paramEOSToken].GetStringValue(),
		AddGenerationPrompt: true,
		Now:                 s.opts.Now(),
	}
	for i, m := range msgs {
		in.Messages[i] = chattemplate.Message{Role: m.Role, Content: m.Content}
	}
	prompt, err := tmpl.Render(in)
	switch {
	case chattemplate.IsRaised(err): // the template refuses this conversation
		return "", &httpError{Status: http.StatusBadRequest, Code: "invalid_value", Param: param,
			Msg: "The chat template of model '" + model + "' refused the conversation: " + err.Error()}
	case err != nil:
		return "", &httpError{Status: http.StatusInternalServerError, Code: "chat_template_error",
			Msg: "The chat template of model '" + model + "' failed: " + err.Error()}
	}
	return prompt, nil
}

// renderGo renders msgs with a Go text/template chat template.
func renderGo(t *openai.Template, msgs []openai.ChatMessage, param string) (string, error) {
	prompt, err := t.Render(msgs)
	if err != nil {
		return "", &httpError{Status: http.StatusBadRequest, Code: "invalid_value", Param: param, Msg: err.Error()}
	}
	return prompt, nil
}

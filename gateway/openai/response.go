package openai

import (
	"encoding/json"
	"strconv"

	"github.com/streamgate/streamgate/gateway/internal/jsonstr"
)

// Usage is token accounting.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Chunker builds the response objects of one request. Chat selects the
// chat format ("chat.completion[.chunk]") over the completions one
// ("text_completion").
type Chunker struct {
	ID           string
	Created      int64
	Model        string
	Chat         bool
	IncludeUsage bool

	head        []byte // every chunk's JSON up to its choice's "index":0 (prefixes)
	deltaPrefix []byte // Delta's JSON up to its content: head and more (prefixes)
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        *chatDelta `json:"delta,omitempty"`
	Text         *string    `json:"text,omitempty"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []chunkChoice   `json:"choices"`
	Usage   json.RawMessage `json:"usage,omitempty"`
}

func (c *Chunker) chunk(choices []chunkChoice) chunk {
	obj := "text_completion"
	if c.Chat {
		obj = "chat.completion.chunk"
	}
	ch := chunk{ID: c.ID, Object: obj, Created: c.Created, Model: c.Model, Choices: choices}
	if c.IncludeUsage {
		ch.Usage = json.RawMessage("null")
	}
	return ch
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("openai: marshal: " + err.Error()) // only our own types are marshalled
	}
	return b
}

// Role is the first chunk of a chat stream: the assistant role with empty
// content. Completions streams have no role chunk.
func (c *Chunker) Role() []byte { return c.AppendRole(make([]byte, 0, 256)) }

// AppendRole appends Role() to dst.
func (c *Chunker) AppendRole(dst []byte) []byte {
	b := append(c.appendHead(dst), `"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
	return c.appendEnd(b)
}

// appendHead appends the JSON every chunk of one choice starts with, up
// to the choice's index: the bytes encoding/json writes for chunk
// (TestChunksMatchMarshal).
func (c *Chunker) appendHead(dst []byte) []byte {
	c.prefixes()
	return append(dst, c.head...)
}

// prefixes builds head and deltaPrefix, once, in one buffer: the head,
// then what a content delta adds to it.
func (c *Chunker) prefixes() {
	if c.head != nil {
		return
	}
	obj := "text_completion"
	delta := `"text":`
	if c.Chat {
		obj, delta = "chat.completion.chunk", `"delta":{"content":`
	}
	// Room for every byte but the escapes that the id and model rarely
	// have.
	p := make([]byte, 0, len(c.ID)+len(c.Model)+len(obj)+len(delta)+96)
	p = append(p, `{"id":`...)
	p = jsonstr.Append(p, c.ID)
	p = append(p, `,"object":"`+obj+`","created":`...)
	p = strconv.AppendInt(p, c.Created, 10)
	p = append(p, `,"model":`...)
	p = jsonstr.Append(p, c.Model)
	p = append(p, `,"choices":[{"index":0,`...)
	c.head = p[:len(p):len(p)]
	c.deltaPrefix = append(p, delta...)
}

// appendEnd appends what ends a chunk of one choice after its choices.
func (c *Chunker) appendEnd(b []byte) []byte {
	if c.IncludeUsage {
		b = append(b, `,"usage":null`...)
	}
	return append(b, '}')
}

// Delta is one content chunk. It is the hot path of every streamed text
// response, so it appends the JSON directly (the same bytes
// encoding/json writes for the chunk, see TestDeltaMatchesMarshal).
func (c *Chunker) Delta(text string) []byte {
	return c.AppendDelta(make([]byte, 0, len(text)+256), []byte(text))
}

// AppendDelta appends Delta(text) to dst, for callers that reuse one
// buffer per stream.
func (c *Chunker) AppendDelta(dst, text []byte) []byte {
	c.prefixes()
	b := append(dst, c.deltaPrefix...)
	b = jsonstr.AppendBytes(b, text)
	if c.Chat {
		b = append(b, '}')
	}
	b = append(b, `,"logprobs":null,"finish_reason":null}]`...)
	return c.appendEnd(b)
}

// Finish is the chunk carrying finish_reason ("stop" or "length") and an
// empty delta.
func (c *Chunker) Finish(reason string) []byte { return c.AppendFinish(make([]byte, 0, 256), reason) }

// AppendFinish appends Finish(reason) to dst.
func (c *Chunker) AppendFinish(dst []byte, reason string) []byte {
	b := c.appendHead(dst)
	if c.Chat {
		b = append(b, `"delta":{}`...)
	} else {
		b = append(b, `"text":""`...)
	}
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = jsonstr.Append(b, reason)
	return c.appendEnd(append(b, `}]`...))
}

// UsageChunk is the last chunk when stream_options.include_usage is set:
// no choices, the usage.
func (c *Chunker) UsageChunk(u Usage) []byte {
	ch := c.chunk([]chunkChoice{})
	ch.Usage = mustJSON(u)
	return mustJSON(ch)
}

// Done is the stream's last data line.
const Done = "[DONE]"

type message struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	Refusal   *string        `json:"refusal"`
	ToolCalls []toolCallJSON `json:"tool_calls,omitempty"`
}

type functionJSON struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type toolCallJSON struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function functionJSON `json:"function"`
}

// ToolCallDeltas are the chunks that stream calls, numbered from index:
// for each, one with its index, id, type and name (empty arguments), then
// one with its arguments, as OpenAI streams them.
func (c *Chunker) ToolCallDeltas(calls []ToolCall, index int) [][]byte {
	var out [][]byte
	for i, call := range calls {
		n := index + i
		head := toolCallJSON{Index: &n, ID: call.ID, Type: "function", Function: functionJSON{Name: call.Name}}
		args := toolCallJSON{Index: &n, Function: functionJSON{Arguments: call.Arguments}}
		out = append(out, c.toolCallChunk(head), c.toolCallChunk(args))
	}
	return out
}

// CallDeltas are the chunks that stream calls as they are generated
// (ToolParser.Deltas): a call's first with its index, id, type and name,
// the others with its index and their piece of its arguments.
func (c *Chunker) CallDeltas(deltas []CallDelta) [][]byte {
	var out [][]byte
	for _, d := range deltas {
		if d.Name == "" && d.Arguments == "" {
			continue
		}
		tc := toolCallJSON{Index: &d.Index, ID: d.ID, Function: functionJSON{Name: d.Name, Arguments: d.Arguments}}
		if d.ID != "" {
			tc.Type = "function"
		}
		out = append(out, c.toolCallChunk(tc))
	}
	return out
}

func (c *Chunker) toolCallChunk(tc toolCallJSON) []byte {
	b := c.appendHead(make([]byte, 0, 256))
	b = append(b, `"delta":{"tool_calls":[`...)
	b = append(b, mustJSON(tc)...)
	b = append(b, `]},"logprobs":null,"finish_reason":null}]`...)
	return c.appendEnd(b)
}

// ChatCompletion is the whole response of a non-streaming chat request
// that may have called tools: content null where it is empty and there
// are calls.
func (c *Chunker) ChatCompletion(text string, calls []ToolCall, reason string, u Usage) []byte {
	m := &message{Role: "assistant", Content: &text}
	if len(calls) > 0 && text == "" {
		m.Content = nil
	}
	for _, call := range calls {
		m.ToolCalls = append(m.ToolCalls, toolCallJSON{ID: call.ID, Type: "function", Function: functionJSON{Name: call.Name, Arguments: call.Arguments}})
	}
	return mustJSON(completion{ID: c.ID, Object: "chat.completion", Created: c.Created, Model: c.Model,
		Choices: []choice{{Message: m, FinishReason: reason}}, Usage: u})
}

type choice struct {
	Index        int      `json:"index"`
	Message      *message `json:"message,omitempty"`
	Text         *string  `json:"text,omitempty"`
	Logprobs     any      `json:"logprobs"`
	FinishReason string   `json:"finish_reason"`
}

type completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   Usage    `json:"usage"`
}

// Completion is the whole response of a non-streaming request.
func (c *Chunker) Completion(text, reason string, u Usage) []byte {
	if c.Chat {
		return c.ChatCompletion(text, nil, reason, u)
	}
	return mustJSON(completion{ID: c.ID, Object: "text_completion", Created: c.Created, Model: c.Model,
		Choices: []choice{{Text: &text, FinishReason: reason}}, Usage: u})
}

// ErrorObject is the body of an error: {"error": ErrorObject}.
type ErrorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// ErrorBody renders {"error":{"message","type","param","code"}}; empty
// param and code become null.
func ErrorBody(message, typ, param, code string) []byte {
	e := ErrorObject{Message: message, Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return mustJSON(struct {
		Error ErrorObject `json:"error"`
	}{e})
}

// Model is one entry of the models list.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// NewModel describes a served model.
func NewModel(id string) Model {
	return Model{ID: id, Object: "model", OwnedBy: "streamgate"}
}

// ModelList renders {"object":"list","data":[...]}.
func ModelList(models []Model) []byte {
	if models == nil {
		models = []Model{}
	}
	return mustJSON(struct {
		Object string  `json:"object"`
		Data   []Model `json:"data"`
	}{"list", models})
}

// ModelObject renders one model.
func ModelObject(m Model) []byte { return mustJSON(m) }

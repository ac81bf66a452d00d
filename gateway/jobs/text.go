package jobs

import (
	"strings"

	"github.com/streamgate/streamgate/gateway/core"
	"github.com/streamgate/streamgate/gateway/openai"
	"github.com/streamgate/streamgate/gateway/textmodel"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

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
	if t.join.Whole(p.Text) {
		return p.Text, nil // resp's, which stays until the next read
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
	_ core.UsageReporter = (*ResponseEvents)(nil)
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
	if t.echo == "" {
		if !t.ch.Chat {
			return nil
		}
		// The role chunk waits in the event buffer, which the first
		// response's chunk reuses once the relay has sent it.
		t.event = t.ch.AppendRole(t.event[:0])
		t.nextOut[0] = t.event
		return t.nextOut[:]
	}
	var out [][]byte
	if t.ch.Chat {
		out = append(out, t.ch.Role())
	}
	return append(out, t.ch.Delta(t.echo))
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

// doneData is the [DONE] event's data, shared: sinks only copy payloads.
var doneData = []byte(openai.Done)

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
	out := make([][]byte, 0, 3)
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
	if len(out) == 0 { // the event buffer's last chunk is out: reuse it
		t.event = t.ch.AppendFinish(t.event[:0], reason)
		out = append(out, t.event)
	} else {
		out = append(out, t.ch.Finish(reason))
	}
	if t.ch.IncludeUsage {
		out = append(out, t.ch.UsageChunk(t.usage()))
	}
	if t.done {
		out = append(out, doneData)
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

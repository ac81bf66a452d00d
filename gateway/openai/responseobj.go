package openai

import (
	"encoding/json"
	"strconv"

	"github.com/streamgate/streamgate/gateway/internal/jsonstr"
)

// Response statuses.
const (
	StatusQueued     = "queued"
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusIncomplete = "incomplete"
	StatusFailed     = "failed"
	StatusCancelled  = "cancelled"
)

// Response is OpenAI's Response object, for text output.
type Response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Background         bool               `json:"background"`
	Error              *ResponseError     `json:"error"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []OutputMessage    `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Reasoning          reasoning          `json:"reasoning"`
	Store              bool               `json:"store"`
	Temperature        float64            `json:"temperature"`
	Text               textConfig         `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              []json.RawMessage  `json:"tools"`
	TopP               float64            `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *ResponseUsage     `json:"usage"`
	User               *string            `json:"user"`
	Metadata           map[string]string  `json:"metadata"`
}

type reasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

type textConfig struct {
	Format struct {
		Type string `json:"type"`
	} `json:"format"`
}

// ResponseError is a failed response's error.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteDetails says why a response is incomplete.
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// OutputMessage is an output item of a response: the message (Type
// "message") or a function call (Type "function_call", with CallID, Name
// and Arguments instead of Role and Content).
type OutputMessage struct {
	Type      string       `json:"type"`
	ID        string       `json:"id"`
	Status    string       `json:"status"`
	Role      string       `json:"role,omitempty"`
	Content   []OutputText `json:"content,omitempty"`
	CallID    string       `json:"call_id,omitempty"`
	Name      string       `json:"name,omitempty"`
	Arguments string       `json:"arguments,omitempty"`
}

type messageItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []OutputText `json:"content"`
}

type functionCallItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// MarshalJSON writes the fields of the item's type, all of them (a
// message's content even when empty, a call's arguments even when "").
func (m OutputMessage) MarshalJSON() ([]byte, error) {
	if m.Type == "function_call" {
		return json.Marshal(functionCallItem{Type: m.Type, ID: m.ID, CallID: m.CallID, Name: m.Name, Arguments: m.Arguments, Status: m.Status})
	}
	content := m.Content
	if content == nil {
		content = []OutputText{}
	}
	return json.Marshal(messageItem{Type: m.Type, ID: m.ID, Status: m.Status, Role: m.Role, Content: content})
}

// OutputText is an output_text content part.
type OutputText struct {
	Type        string     `json:"type"`
	Text        string     `json:"text"`
	Annotations []struct{} `json:"annotations"`
	Logprobs    []struct{} `json:"logprobs"`
}

// ResponseUsage is a response's token accounting.
type ResponseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// NewUsage is the usage of in input and out output tokens.
func NewUsage(in, out int) *ResponseUsage {
	return &ResponseUsage{InputTokens: in, OutputTokens: out, TotalTokens: in + out}
}

// NewResponse is the object of a response to r, not yet started
// (status queued with background, else in_progress, no output).
func NewResponse(id string, createdAt int64, r *ResponsesRequest) *Response {
	resp := &Response{
		ID: id, Object: "response", CreatedAt: createdAt, Status: StatusInProgress, Background: r.Background,
		Instructions: r.Instructions, MaxOutputTokens: r.Params.MaxTokens, Model: r.Model,
		Output: []OutputMessage{}, ParallelToolCalls: true, Store: r.Store, Temperature: 1, ToolChoice: json.RawMessage(`"auto"`),
		Tools: []json.RawMessage{}, TopP: 1, Truncation: "disabled", User: r.User, Metadata: r.Metadata,
	}
	if r.Background {
		resp.Status = StatusQueued
	}
	if resp.Metadata == nil {
		resp.Metadata = map[string]string{}
	}
	if r.RawTools != nil {
		resp.Tools = r.RawTools
	}
	if r.RawToolChoice != nil {
		resp.ToolChoice = r.RawToolChoice
	}
	if r.Tools != nil {
		resp.ParallelToolCalls = r.ParallelToolCalls
	}
	resp.Text.Format.Type = FormatText
	if r.Format != "" {
		resp.Text.Format.Type = r.Format
	}
	if r.PreviousResponseID != "" {
		p := r.PreviousResponseID
		resp.PreviousResponseID = &p
	}
	if t := r.Params.Temperature; t != nil {
		resp.Temperature = *t
	}
	if p := r.Params.TopP; p != nil {
		resp.TopP = *p
	}
	return resp
}

// Finish sets resp's end: its one message with text, its usage, and a
// status from the model's finish reason ("length" makes it incomplete).
func (resp *Response) Finish(itemID, text, finishReason string, u *ResponseUsage) {
	resp.Status = StatusCompleted
	item := OutputMessage{Type: "message", ID: itemID, Status: StatusCompleted, Role: "assistant",
		Content: []OutputText{newOutputText(text)}}
	if finishReason == "length" {
		resp.Status = StatusIncomplete
		resp.IncompleteDetails = &IncompleteDetails{Reason: "max_output_tokens"}
		item.Status = StatusIncomplete
	}
	resp.Output = []OutputMessage{item}
	resp.Usage = u
}

// AddCalls appends calls as function_call items, with ids from itemID;
// the message goes when it is empty (the answer is only calls).
func (resp *Response) AddCalls(calls []ToolCall, itemID func() string) {
	items := make([]OutputMessage, len(calls))
	for i, c := range calls {
		status := StatusCompleted
		if c.Partial {
			status = StatusIncomplete
		}
		items[i] = CallItem(itemID(), status, c)
	}
	resp.AddItems(items)
}

// CallItem is the function_call item id of call.
func CallItem(id, status string, c ToolCall) OutputMessage {
	return OutputMessage{Type: "function_call", ID: id, Status: status, CallID: c.ID, Name: c.Name, Arguments: c.Arguments}
}

// AddItems appends function_call items; the message goes when it is
// empty (the answer is only calls).
func (resp *Response) AddItems(items []OutputMessage) {
	if len(items) == 0 {
		return
	}
	if len(resp.Output) == 1 && resp.Output[0].Type == "message" && resp.OutputText() == "" {
		resp.Output = resp.Output[:0]
	}
	resp.Output = append(resp.Output, items...)
}

// Calls is the function calls of resp's output.
func (resp *Response) Calls() []ToolCall {
	var out []ToolCall
	for _, m := range resp.Output {
		if m.Type == "function_call" {
			out = append(out, ToolCall{ID: m.CallID, Name: m.Name, Arguments: m.Arguments})
		}
	}
	return out
}

// Fail sets resp's end as failed with code and message.
func (resp *Response) Fail(code, message string) {
	resp.Status = StatusFailed
	resp.Error = &ResponseError{Code: code, Message: message}
}

// OutputText is the text of resp's output.
func (resp *Response) OutputText() string {
	var s string
	for _, m := range resp.Output {
		for _, c := range m.Content {
			s += c.Text
		}
	}
	return s
}

// JSON is resp's JSON.
func (resp *Response) JSON() []byte { return mustJSON(resp) }

func newOutputText(text string) OutputText {
	return OutputText{Type: "output_text", Text: text, Annotations: []struct{}{}, Logprobs: []struct{}{}}
}

// Responder builds the semantic events of one streamed response, each
// with the next sequence_number from 0. Every event's JSON starts with its
// "type", the event's name.
type Responder struct {
	Resp   *Response
	ItemID string
	// Lazy holds the message item back until its first text (Open): a
	// response with tools may answer with calls only.
	Lazy   bool
	opened bool

	seq         int
	deltaPrefix []byte // a delta's JSON after its sequence_number up to its text
	// live records the function_call items whose events went out as the
	// call was generated: callAdded (with its arguments so far) or
	// callDone.
	live map[string]int
}

// States of a function_call item streamed live.
const (
	callAdded = 1 + iota
	callDone
)

// Seq is the sequence_number the next event will have.
func (r *Responder) Seq() int { return r.seq }

type responseEvent struct {
	Type           string    `json:"type"`
	SequenceNumber int       `json:"sequence_number"`
	Response       *Response `json:"response"`
}

type itemEvent struct {
	Type           string        `json:"type"`
	SequenceNumber int           `json:"sequence_number"`
	OutputIndex    int           `json:"output_index"`
	Item           OutputMessage `json:"item"`
}

type partEvent struct {
	Type           string     `json:"type"`
	SequenceNumber int        `json:"sequence_number"`
	ItemID         string     `json:"item_id"`
	OutputIndex    int        `json:"output_index"`
	ContentIndex   int        `json:"content_index"`
	Part           OutputText `json:"part"`
}

type textDoneEvent struct {
	Type           string     `json:"type"`
	SequenceNumber int        `json:"sequence_number"`
	ItemID         string     `json:"item_id"`
	OutputIndex    int        `json:"output_index"`
	ContentIndex   int        `json:"content_index"`
	Text           string     `json:"text"`
	Logprobs       []struct{} `json:"logprobs"`
}

func (r *Responder) next() int {
	n := r.seq
	r.seq++
	return n
}

func (r *Responder) responseEvent(typ string) []byte {
	return mustJSON(responseEvent{Type: typ, SequenceNumber: r.next(), Response: r.Resp})
}

func (r *Responder) item(status string, content []OutputText) OutputMessage {
	return OutputMessage{Type: "message", ID: r.ItemID, Status: status, Role: "assistant", Content: content}
}

// Start is the events that open the stream: response.created (status
// queued for a background response), response.in_progress, and unless
// Lazy the message's events of Open.
func (r *Responder) Start() [][]byte {
	created := r.responseEvent("response.created")
	r.Resp.Status = StatusInProgress
	out := [][]byte{created, r.responseEvent("response.in_progress")}
	if !r.Lazy {
		out = append(out, r.Open()...)
	}
	return out
}

// Open is the message's response.output_item.added and its text part's
// response.content_part.added, once; nil after the first time.
func (r *Responder) Open() [][]byte {
	if r.opened {
		return nil
	}
	r.opened = true
	return [][]byte{
		mustJSON(itemEvent{Type: "response.output_item.added", SequenceNumber: r.next(), Item: r.item(StatusInProgress, []OutputText{})}),
		mustJSON(partEvent{Type: "response.content_part.added", SequenceNumber: r.next(), ItemID: r.ItemID, Part: newOutputText("")}),
	}
}

// AppendDelta appends the response.output_text.delta event of text to
// dst. It is the hot path of a streamed response, so it appends the JSON
// directly (the bytes encoding/json writes, see TestResponseEvents).
func (r *Responder) AppendDelta(dst, text []byte) []byte {
	if r.deltaPrefix == nil {
		p := append([]byte(`,"item_id":`), jsonstr.Append(nil, r.ItemID)...)
		r.deltaPrefix = append(p, `,"output_index":0,"content_index":0,"delta":`...)
	}
	b := append(dst, `{"type":"response.output_text.delta","sequence_number":`...)
	b = strconv.AppendInt(b, int64(r.next()), 10)
	b = append(b, r.deltaPrefix...)
	b = jsonstr.AppendBytes(b, text)
	return append(b, `,"logprobs":[]}`...)
}

// End is the events that close a stream whose response Finish (and
// AddCalls) has ended: the message's done events, each call's item and
// arguments events, then response.completed or response.incomplete.
func (r *Responder) End() [][]byte {
	var out [][]byte
	for i, item := range r.Resp.Output {
		if item.Type == "function_call" {
			switch r.live[item.ID] {
			case 0:
				out = append(out, r.CallAdded(i, item), r.CallDelta(i, item.ID, item.Arguments))
				out = append(out, r.CallDone(i, item)...)
			case callAdded: // cut off while it streamed
				out = append(out, r.CallDone(i, item)...)
			}
			continue
		}
		out = append(out, r.Open()...)
		text := item.Content[0]
		out = append(out,
			mustJSON(textDoneEvent{Type: "response.output_text.done", SequenceNumber: r.next(), ItemID: r.ItemID, OutputIndex: i, Text: text.Text, Logprobs: []struct{}{}}),
			mustJSON(partEvent{Type: "response.content_part.done", SequenceNumber: r.next(), ItemID: r.ItemID, OutputIndex: i, Part: text}),
			mustJSON(itemEvent{Type: "response.output_item.done", SequenceNumber: r.next(), OutputIndex: i, Item: item}))
	}
	final := "response.completed"
	if r.Resp.Status == StatusIncomplete {
		final = "response.incomplete"
	}
	return append(out, r.responseEvent(final))
}

// CallAdded is the response.output_item.added event of the
// function_call item at output index i, its arguments empty.
func (r *Responder) CallAdded(i int, item OutputMessage) []byte {
	if r.live == nil {
		r.live = map[string]int{}
	}
	r.live[item.ID] = callAdded
	item.Arguments, item.Status = "", StatusInProgress
	return mustJSON(itemEvent{Type: "response.output_item.added", SequenceNumber: r.next(), OutputIndex: i, Item: item})
}

// CallDelta is the response.function_call_arguments.delta event of a
// piece of the arguments of the call item itemID at output index i.
func (r *Responder) CallDelta(i int, itemID, delta string) []byte {
	return mustJSON(argsEvent{Type: "response.function_call_arguments.delta", SequenceNumber: r.next(), ItemID: itemID, OutputIndex: i, Delta: delta})
}

// CallDone is the response.function_call_arguments.done and
// response.output_item.done events of the call item at output index i.
func (r *Responder) CallDone(i int, item OutputMessage) [][]byte {
	r.live[item.ID] = callDone
	return [][]byte{
		mustJSON(argsEvent{Type: "response.function_call_arguments.done", SequenceNumber: r.next(), ItemID: item.ID, OutputIndex: i, Name: item.Name, Arguments: item.Arguments}),
		mustJSON(itemEvent{Type: "response.output_item.done", SequenceNumber: r.next(), OutputIndex: i, Item: item}),
	}
}

type argsEvent struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	ItemID         string `json:"item_id"`
	OutputIndex    int    `json:"output_index"`
	Delta          string `json:"delta,omitempty"`
	Name           string `json:"name,omitempty"`
	Arguments      string `json:"arguments,omitempty"`
}

// Failed is the response.failed event of a response Fail has ended.
func (r *Responder) Failed() []byte { return r.responseEvent("response.failed") }

type errorEvent struct {
	Type           string  `json:"type"`
	SequenceNumber int     `json:"sequence_number"`
	Code           string  `json:"code"`
	Message        string  `json:"message"`
	Param          *string `json:"param"`
}

// ErrorEvent is the Responses stream's "error" event with sequence
// number seq: an error that is no part of the response (a stream read
// again whose producer was lost), so no Response goes with it.
func ErrorEvent(seq int, code, message, param string) []byte {
	e := errorEvent{Type: "error", SequenceNumber: seq, Code: code, Message: message}
	if param != "" {
		e.Param = &param
	}
	return mustJSON(e)
}

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"
	"github.com/streamgate/streamgate/engine/llama2/tokenizer/hfref"
)

// A GGUF model with a real vocabulary and chat template (Qwen3's, random
// weights) served by `streamgate serve --model FILE.gguf` streams the same
// greedy answer over every client surface: a chat.completions frame on the
// WebSocket, /v2 generate_stream with the prompt the template renders, and
// the playground in headless Chromium, and the official openai SDK
// (node/gguf.test.mjs). Each streams several
// pieces, and the token counts are the reference tokenizer's (Hugging
// Face's, on the prompt @huggingface/jinja renders) and max_tokens.
func TestGGUFModelEveryClient(t *testing.T) {
	path, files := tinyQwen3(t, 256, 5)
	const model, maxTokens = "tiny-qwen3", 12
	messages := []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2? Ça va? 日本語"}}
	rendered := hfref.Render(t, files.Config.ChatTemplate, []map[string]any{{"messages": messages, "add_generation_prompt": true}})[0]
	if rendered.Error != "" {
		t.Fatal(rendered.Error)
	}
	promptTokens := len(hfref.Encode(t, "qwen3", []string{rendered.Prompt})[0])
	msgs, _ := json.Marshal(messages)

	srv := startServe(t, buildStreamgate(t), "--model", path)

	// The WebSocket: a chat.completions frame, its chunks as data frames.
	c := dialWSURL(t, srv.url)
	frames := wsAsk(t, c, `{"type":"chat.completions","id":"g1","body":{"model":"`+model+`","messages":`+string(msgs)+
		`,"max_tokens":`+strconv.Itoa(maxTokens)+`,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}}`)
	var content string
	pieces := 0
	var usage struct{ PromptTokens, CompletionTokens int }
	for _, raw := range frames[:len(frames)-1] {
		var f struct {
			Data struct {
				Choices []struct {
					Delta        struct{ Content string }
					FinishReason string `json:"finish_reason"`
				}
				Usage *struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				}
			}
		}
		if err := json.Unmarshal([]byte(raw), &f); err != nil {
			t.Fatalf("frame %s: %v", raw, err)
		}
		for _, ch := range f.Data.Choices {
			if ch.Delta.Content != "" {
				content += ch.Delta.Content
				pieces++
			}
			if ch.FinishReason != "" && ch.FinishReason != "length" {
				t.Errorf("finish_reason %q, want length", ch.FinishReason)
			}
		}
		if u := f.Data.Usage; u != nil {
			usage.PromptTokens, usage.CompletionTokens = u.PromptTokens, u.CompletionTokens
		}
	}
	if pieces < 2 || usage.PromptTokens != promptTokens || usage.CompletionTokens != maxTokens {
		t.Fatalf("WebSocket: %d pieces, usage %+v; want several pieces, %d prompt and %d completion tokens\n%s",
			pieces, usage, promptTokens, maxTokens, strings.Join(frames, "\n"))
	}

	t.Logf("WebSocket: %d pieces, %d prompt tokens: %q", pieces, promptTokens, content)

	// /v2 generate_stream with the rendered prompt: the same answer.
	params, _ := json.Marshal(map[string]any{"max_tokens": maxTokens, "temperature": 0})
	body, _ := json.Marshal(map[string]any{"text_input": rendered.Prompt, "stream": true, "exclude_input_in_output": true,
		"sampling_parameters": string(params)})
	resp := post(t, t.Context(), httpClient(t), srv.url+"/v2/models/"+model+"/generate_stream", string(body))
	defer resp.Body.Close()
	var text string
	events, in, out := 0, 0, 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e struct {
			TextOutput      string `json:"text_output"`
			NumInputTokens  int    `json:"num_input_tokens"`
			NumOutputTokens int    `json:"num_output_tokens"`
			Error           string `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil || e.Error != "" {
			t.Fatalf("generate_stream event %s: %v", data, err)
		}
		events++
		text += e.TextOutput
		in, out = max(in, e.NumInputTokens), max(out, e.NumOutputTokens)
	}
	if events < 2 || text != content || in != promptTokens || out != maxTokens {
		t.Errorf("generate_stream: %d events, %d input and %d output tokens, text %q; want several, %d, %d and the chat's %q",
			events, in, out, text, promptTokens, maxTokens, content)
	}

	t.Run("playground", func(t *testing.T) { ggufPlayground(t, srv.url, model, maxTokens) })

	// The official openai SDK.
	dir, node := nodeTool(t)
	cmd := exec.CommandContext(t.Context(), node, "--test", "--test-reporter=spec", "gguf.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+srv.url+"/v1", "OPENAI_API_KEY=unused", "NO_COLOR=1",
		"STREAMGATE_GGUF_MODEL="+model, "STREAMGATE_GGUF_MESSAGES="+string(msgs),
		"STREAMGATE_GGUF_PROMPT_TOKENS="+strconv.Itoa(promptTokens), "STREAMGATE_GGUF_MAX_TOKENS="+strconv.Itoa(maxTokens),
		"STREAMGATE_GGUF_CONTENT="+content)
	o, err := cmd.CombinedOutput()
	t.Logf("node --test gguf.test.mjs:\n%s", o)
	if err != nil {
		t.Fatalf("node test failed: %v", err)
	}
}

// ggufPlayground streams a chat from model in the playground (headless
// Chromium): the card shows the answer the same request gets without
// streaming, and max_tokens tokens.
func ggufPlayground(t *testing.T, url, model string, maxTokens int) {
	requireTool(t, "chromium", "/usr/bin/chromium")
	page := startChromium(t).openPage(t)
	p := &playground{t: t, s: &testStack{url: url}, page: page, c: httpClient(t)}
	page.load(t, url+"/", fmt.Sprintf(`[...document.getElementById("model").options].some((o) => o.value === %q)`, model))
	p.js(playgroundHelpers, nil)
	p.js(`pgt.pick("route", "chat")`, nil)
	p.set("model", model)
	waitFor(t, "the chat body", func() bool { return strings.Contains(p.body(), `"model": "`+model+`"`) })
	p.set("temperature", "0")
	p.set("max-tokens", strconv.Itoa(maxTokens))
	body := p.body()
	c := p.waitCard(p.send()[0], "done", finished)
	_, answer := p.unary("/v1/chat/completions", body)
	var want struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal([]byte(answer), &want); err != nil || len(want.Choices) != 1 {
		t.Fatalf("the same request without streaming: %s", answer)
	}
	if c.State != "done" || c.Text != want.Choices[0].Message.Content || c.Tokens != maxTokens {
		t.Errorf("card %+v; want done, the text %q and %d tokens", c, want.Choices[0].Message.Content, maxTokens)
	}
	if problems := page.takeProblems(); len(problems) > 0 {
		t.Errorf("the page logged problems:\n%s", strings.Join(problems, "\n"))
	}
}

// tinyQwen3 writes Tiny-Qwen3.gguf: Qwen3's real vocabulary (151k tokens)
// and chat template, random Q8_0 weights from seed, context positions.
func tinyQwen3(t *testing.T, context int, seed uint64) (string, hfref.Files) {
	t.Helper()
	files := hfref.Load(t, "qwen3")
	v, err := files.Vocab("qwen2")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "Tiny-Qwen3.gguf")
	spec := ggufmodel.Spec{Arch: "qwen3", Type: gguf.Q8_0, Dim: 64, Hidden: 128, Layers: 1, Heads: 2, KVHeads: 1,
		Context: context, Seed: seed, Vocab: &v, ChatTemplate: files.Config.ChatTemplate, RopeBase: 1000000, OutputScale: 0.1}
	if err := ggufmodel.Write(path, spec); err != nil {
		t.Fatal(err)
	}
	return path, files
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/streamgate/streamgate/engine/llama2"
	"github.com/streamgate/streamgate/gateway/chattemplate"
	"github.com/streamgate/streamgate/gateway/openai"
)

// llamacppRuns is how many times the ttft preset has llama.cpp process
// the prompt.
const llamacppRuns = 20

// defaultLlamacppDir is where the repository keeps the npm project that
// runs llama.cpp (node-llama-cpp's prebuilt CPU libraries), relative to
// the repository root.
const defaultLlamacppDir = "engine/internal/llamacpp"

// Reference is llama.cpp's time to first token for the ttft preset's
// prompt, on the same GGUF file and as many threads as the engine has: the
// same chat prompt, rendered by the file's template and tokenized by
// llama.cpp, evaluated until its first greedy token, llamacppRuns times.
type Reference struct {
	Threads int `json:"threads"`
	// Tokens is llama.cpp's prompt length; EngineTokens the engine's, as
	// the usage of a chat request with the same message reports it.
	Tokens       int  `json:"prompt_tokens"`
	EngineTokens int  `json:"engine_prompt_tokens"`
	Wall         Dist `json:"wall"`
	CPU          Dist `json:"cpu"`
	// GoalMs is 1.2 × Wall.P50 + 2 ms, the bound for the
	// engine's TTFT p50 through /v1/chat/completions.
	GoalMs float64 `json:"goal_ms"`
}

// llamacppDir returns the folder of the npm project that runs llama.cpp:
// dir if given, else defaultLlamacppDir under the working directory when
// it is installed there; "" when there is none.
func llamacppDir(dir string) (string, error) {
	if dir == "" {
		if _, err := os.Stat(filepath.Join(defaultLlamacppDir, "node_modules", "node-llama-cpp")); err != nil {
			return "", nil
		}
		dir = defaultLlamacppDir
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("--llamacpp: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp")); err != nil {
		return "", fmt.Errorf("--llamacpp %s: node-llama-cpp is not installed there (npm install --omit=optional --ignore-scripts): %w", dir, err)
	}
	return dir, nil
}

// referenceTTFT measures llama.cpp's side of the ttft preset for prompt on
// the GGUF file path served as model at httpAddr, on threads threads (0:
// GOMAXPROCS).
func referenceTTFT(ctx context.Context, dir string, threads int, path, model, prompt, httpAddr, apiKey string) (*Reference, error) {
	text, err := renderChat(model, path, prompt)
	if err != nil {
		return nil, err
	}
	engineTokens, err := enginePromptTokens(ctx, httpAddr, apiKey, model, prompt)
	if err != nil {
		return nil, fmt.Errorf("engine prompt length: %w", err)
	}
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	type special struct {
		BOS    int  `json:"bos"`
		AddBOS bool `json:"addBos"`
	}
	type run struct {
		Seconds    float64 `json:"seconds"`
		CPUSeconds float64 `json:"cpuSeconds"`
	}
	type result struct {
		Tokens  [][]int  `json:"tokens"`
		Special *special `json:"special"`
		Prompts []run    `json:"prompts"`
	}
	call := func(job map[string]any) (result, error) {
		job["model"] = path
		job["vocab"] = 0
		req, _ := json.Marshal(map[string]any{"jobs": []any{job}, "threads": threads})
		cmd := exec.CommandContext(ctx, "node", "run.mjs")
		cmd.Dir = dir
		cmd.Stdin = bytes.NewReader(req)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return result{}, fmt.Errorf("llama.cpp: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
		}
		var res struct {
			Results []result `json:"results"`
		}
		if err := json.Unmarshal(out, &res); err != nil || len(res.Results) != 1 {
			return result{}, fmt.Errorf("llama.cpp reply (%v): %.300s", err, out)
		}
		return res.Results[0], nil
	}
	tok, err := call(map[string]any{"tokenize": []string{text}, "special": true})
	if err != nil {
		return nil, err
	}
	if len(tok.Tokens) != 1 || tok.Special == nil {
		return nil, errors.New("llama.cpp: no tokens for the prompt")
	}
	tokens := tok.Tokens[0]
	if tok.Special.AddBOS && tok.Special.BOS >= 0 {
		tokens = append([]int{tok.Special.BOS}, tokens...)
	}
	timed, err := call(map[string]any{"tokens": tokens, "promptRuns": llamacppRuns, "context": len(tokens) + 64})
	if err != nil {
		return nil, err
	}
	var wall, cpu []int64
	for _, r := range timed.Prompts {
		wall = append(wall, int64(r.Seconds*1e9))
		cpu = append(cpu, int64(r.CPUSeconds*1e9))
	}
	ref := &Reference{Threads: threads, Tokens: len(tokens), EngineTokens: engineTokens, Wall: summarize(wall), CPU: summarize(cpu)}
	ref.GoalMs = 1.2*ref.Wall.P50 + 2
	return ref, nil
}

// renderChat renders prompt as the one user message of a chat as the
// gateway does for model: with the GGUF file's chat template, or the
// gateway's default template when the file has none.
func renderChat(model, path, prompt string) (string, error) {
	cfg, err := llama2.GGUFConfig(model, path)
	if err != nil {
		return "", err
	}
	p := cfg.GetParameters()
	src := p[llama2.ParamChatTemplate].GetStringValue()
	if src == "" {
		return openai.MustParseTemplate("default", openai.DefaultTemplate).Render([]openai.ChatMessage{{Role: "user", Content: prompt}})
	}
	tmpl, err := chattemplate.Parse(src)
	if err != nil {
		return "", fmt.Errorf("chat template of %s: %w", path, err)
	}
	return tmpl.Render(chattemplate.Input{
		Messages: []chattemplate.Message{{Role: "user", Content: prompt}},
		BOSToken: p[llama2.ParamBOSToken].GetStringValue(), EOSToken: p[llama2.ParamEOSToken].GetStringValue(),
		AddGenerationPrompt: true,
	})
}

// enginePromptTokens asks the server for a one-token chat completion of
// prompt and returns the prompt length its usage reports.
func enginePromptTokens(ctx context.Context, httpAddr, apiKey, model, prompt string) (int, error) {
	body, _ := json.Marshal(map[string]any{
		"model": model, "max_tokens": 1, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil || out.Usage.PromptTokens == 0 {
		return 0, fmt.Errorf("%s: %.300s", resp.Status, raw)
	}
	return out.Usage.PromptTokens, nil
}

// writeReference prints llama.cpp's side of the ttft preset beside the
// engine's TTFT in res; busy says the machine had more runnable work than
// cores, which makes the verdict unreliable (llama.cpp's threads spin at
// each barrier, and suffer more from a busy box than the engine's).
func writeReference(w io.Writer, ref *Reference, res *Result, busy bool) {
	fmt.Fprintf(w, "\nllama.cpp (node-llama-cpp, same file, %d threads, %d runs): prompt of %d tokens to its first token: wall p50 %.2f ms, p99 %.2f ms; CPU p50 %.2f ms\n",
		ref.Threads, ref.Wall.N, ref.Tokens, ref.Wall.P50, ref.Wall.P99, ref.CPU.P50)
	if ref.EngineTokens != ref.Tokens {
		fmt.Fprintf(w, "warning: the engine's prompt has %d tokens, llama.cpp's %d: the two sides are not the same work\n", ref.EngineTokens, ref.Tokens)
	}
	if res == nil || res.TTFT.N == 0 {
		return
	}
	verdict := "met"
	if res.TTFT.P50 > ref.GoalMs {
		verdict = "not met"
	}
	if busy {
		verdict += " (on a busy machine: measure again on a quiet one)"
	}
	fmt.Fprintf(w, "TTFT goal (≤ 1.2 × llama.cpp's p50 + 2 ms = %.2f ms): ours p50 %.2f ms, %.2f× llama.cpp's p50: %s", ref.GoalMs, res.TTFT.P50, res.TTFT.P50/ref.Wall.P50, verdict)
	if res.Embedded && res.Requests > 0 {
		fmt.Fprintf(w, "; our process's CPU per request %.2f ms (server and load generator)", res.ClientCPU*1e3/float64(res.Requests))
	}
	fmt.Fprintln(w)
}

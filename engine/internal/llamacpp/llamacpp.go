// Package llamacpp runs llama.cpp itself, through node-llama-cpp's
// prebuilt CPU libraries (the npm project in this folder; `npm install
// --omit=optional --ignore-scripts` here first), as the reference for the
// engine's GGUF tests: logits and greedy continuations of token ids, and
// the token ids of texts, all on the same file the engine loads.
//
// Every helper skips its test when node or node_modules is missing, and
// fails it instead when STREAMGATE_REQUIRE is set (as in CI).
package llamacpp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/streamgate/streamgate/engine/llama2/kernels"
	"github.com/streamgate/streamgate/engine/llama2/transformer"
)

// Job is one file to evaluate.
type Job struct {
	Model  string `json:"model"`
	Vocab  int    `json:"vocab"`            // logits per step
	Tokens []int  `json:"tokens,omitempty"` // the prompt
	Steps  int    `json:"steps"`            // 0: no evaluation
	// LogitSteps is how many steps, from the first, report their logits
	// (0: all); the others report only their token.
	LogitSteps int `json:"logitSteps,omitempty"`
	Context    int `json:"context,omitempty"`
	// Bench, instead of Steps, times llama.cpp's own greedy generation of
	// Bench tokens after the first (Result.DecodeSeconds).
	Bench int `json:"bench,omitempty"`
	// Parallel, with Bench, runs that many sequences of one context at
	// once, batched by node-llama-cpp as llama.cpp's server batches its
	// slots: DecodeSeconds is then the time in which each of them
	// generates Bench tokens.
	Parallel int `json:"parallel,omitempty"`
	// Tokenize lists texts to tokenize with the file's vocabulary.
	Tokenize []string `json:"tokenize,omitempty"`
	// Pieces asks for the text of each of the Vocab tokens alone.
	Pieces bool `json:"pieces,omitempty"`
	// Special asks for the vocabulary's special tokens (Result.Special).
	Special bool `json:"special,omitempty"`
}

// Special is a vocabulary's special tokens as llama.cpp reads them.
type Special struct {
	BOS    int   `json:"bos"` // -1: none
	EOS    int   `json:"eos"`
	EOT    int   `json:"eot"`
	AddBOS bool  `json:"addBos"`
	AddEOS bool  `json:"addEos"`
	EOG    []int `json:"eog"` // every token that ends a generation
}

// Step is one position's next-token logits and their argmax, which is the
// next step's input.
type Step struct {
	Token  int       `json:"token"`
	Logits []float32 `json:"logits"`
}

// Result is one Job's answer.
type Result struct {
	Steps  []Step  `json:"steps"`
	Tokens [][]int `json:"tokens"` // per Tokenize text
	// Pieces are the tokens' texts (Job.Pieces), as llama.cpp gives them
	// to a JavaScript string: UTF-8 with each invalid sequence replaced by
	// U+FFFD, hex-encoded.
	Pieces  []string `json:"pieces"`
	Special *Special `json:"special"`
	// DecodeSeconds is the wall time of steps 1 and after, one token each.
	DecodeSeconds float64 `json:"decodeSeconds"`
	// PromptSeconds (Bench jobs) is the wall time from the call to the
	// first token: the prompt as one batch and one sampling.
	PromptSeconds float64 `json:"promptSeconds"`
	// DecodeCPUSeconds and PromptCPUSeconds (Bench jobs) are the process's
	// CPU time, user and system, in the same spans.
	DecodeCPUSeconds float64 `json:"decodeCPUSeconds"`
	PromptCPUSeconds float64 `json:"promptCPUSeconds"`
	// RSS (Bench jobs) is node's resident bytes after generating.
	RSS int64 `json:"rss"`
}

// Available reports whether llama.cpp can run here (node and the npm
// project's node_modules), for benchmarks that add its numbers when it can.
func Available() bool {
	_, file, _, _ := runtime.Caller(0)
	_, errNode := exec.LookPath("node")
	_, errPkg := os.Stat(filepath.Join(filepath.Dir(file), "node_modules", "node-llama-cpp", "package.json"))
	return errNode == nil && errPkg == nil
}

// dir returns the npm project's folder, skipping or failing t when it
// cannot run.
func dir(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	d := filepath.Dir(file)
	if Available() {
		return d
	}
	_, errNode := exec.LookPath("node")
	_, errPkg := os.Stat(filepath.Join(d, "node_modules", "node-llama-cpp", "package.json"))
	why := fmt.Sprintf("node: %v; node_modules: %v (run npm install --omit=optional --ignore-scripts in %s)", errNode, errPkg, d)
	if os.Getenv("STREAMGATE_REQUIRE") != "" {
		t.Fatalf("llama.cpp reference unavailable and STREAMGATE_REQUIRE is set: %s", why)
	}
	t.Skipf("llama.cpp reference unavailable: %s", why)
	return ""
}

// Run evaluates jobs with llama.cpp (one thread, KV cache in F32, no flash
// attention) and returns their results in order.
func Run(t testing.TB, jobs ...Job) []Result {
	t.Helper()
	return RunThreads(t, 1, jobs...)
}

// RunThreads is Run on the given number of threads.
func RunThreads(t testing.TB, threads int, jobs ...Job) []Result {
	t.Helper()
	d := dir(t)
	req, err := json.Marshal(map[string]any{"jobs": jobs, "threads": threads})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "run.mjs")
	cmd.Dir = d
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama.cpp: %v\n%s", err, stderr.Bytes())
	}
	var res struct {
		Results []Result `json:"results"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Results) != len(jobs) {
		t.Fatalf("llama.cpp reply (%v): %.300s", err, out)
	}
	return res.Results
}

// Greedy runs prompt through m (one batched pass), then steps-1 greedy
// steps, and returns each step's logits and argmax: this engine's side of
// a Run job.
func Greedy(t testing.TB, m *transformer.Model, prompt []int, steps int) []Step {
	t.Helper()
	pool := kernels.NewPool(2)
	defer pool.Close()
	ws := m.NewWorkspace(kernels.NewCPU(pool), transformer.WorkspaceOptions{MaxRows: len(prompt)})
	s := m.NewSession()
	batch := make([]transformer.Step, len(prompt))
	for i, tok := range prompt {
		batch[i] = transformer.Step{Session: s, Pos: i, Token: tok}
	}
	var out []Step
	for len(out) < steps {
		logits := make([]float32, m.Config().Vocab)
		batch[len(batch)-1].Logits = logits
		if err := ws.Forward(batch); err != nil {
			t.Fatal(err)
		}
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		out = append(out, Step{Token: best, Logits: logits})
		batch = []transformer.Step{{Session: s, Pos: len(prompt) + len(out) - 1, Token: best}}
	}
	return out
}

// Compare checks this engine's steps against llama.cpp's: every step's
// logits (where llama.cpp reported them) within tol of llama.cpp's, and
// the same greedy token at every step. It logs the largest difference and the smallest margin between
// the two best logits.
func Compare(t testing.TB, got, want []Step, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d steps, llama.cpp %d", len(got), len(want))
	}
	worst, margin := 0.0, math.Inf(1)
	for s := range want {
		if want[s].Logits == nil { // not asked for
			if got[s].Token != want[s].Token {
				t.Fatalf("step %d: greedy token %d, llama.cpp %d (tokens so far agree)", s, got[s].Token, want[s].Token)
			}
			continue
		}
		if len(want[s].Logits) != len(got[s].Logits) {
			t.Fatalf("step %d: llama.cpp gave %d logits, the engine %d", s, len(want[s].Logits), len(got[s].Logits))
		}
		d := 0.0
		for j, v := range want[s].Logits {
			d = max(d, math.Abs(float64(v-got[s].Logits[j])))
		}
		worst = max(worst, d)
		margin = min(margin, topMargin(want[s].Logits))
		if d > tol {
			t.Errorf("step %d: logits differ from llama.cpp's by up to %.3g (tolerance %.3g)", s, d, tol)
		}
		if got[s].Token != want[s].Token {
			t.Fatalf("step %d: greedy token %d, llama.cpp %d (tokens so far agree)", s, got[s].Token, want[s].Token)
		}
	}
	t.Logf("%d greedy tokens identical; largest logit difference %.3g; smallest top-2 margin %.3g", len(want), worst, margin)
}

func topMargin(l []float32) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range l {
		switch x := float64(v); {
		case x > a:
			a, b = x, a
		case x > b:
			b = x
		}
	}
	return a - b
}

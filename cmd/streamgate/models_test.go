package main

import (
	"github.com/streamgate/streamgate/engine/gguf"
	"github.com/streamgate/streamgate/engine/gguf/ggufmodel"

	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamgate/streamgate/cmd/internal/modelcache"
	"github.com/streamgate/streamgate/engine/llama2/llama2test"
)

// writeStories15M puts a generated checkpoint and tokenizer into dir under
// stories15M's file names, as `models pull stories15M` leaves them.
func writeStories15M(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := llama2test.WriteModel(filepath.Join(dir, "stories15M.bin"), filepath.Join(dir, "tokenizer.bin"), 7); err != nil {
		t.Fatal(err)
	}
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func postBody(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func stop(t *testing.T, cmd *exec.Cmd, logs *syncBuffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd, logs)
}

// hint260k is what a request for stories260k gets from bin without its
// weights: the files, and commands that run as bin was run.
func hint260k(bin string) string {
	return `The model 'stories260k' is known but not loaded: its files stories260K.bin and tok512.bin were not found when the engine started. Get them with '` +
		bin + ` models pull stories260K', then restart '` + bin + ` serve'`
}

// With no model anywhere, serve still starts, says once how to get a real
// model, and a request for stories260k says how to get its weights.
func TestServeWithoutWeights(t *testing.T) {
	bin := buildBinary(t)
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	xdg := t.TempDir()
	cmd, logs := startEnv(t, []string{"XDG_CACHE_HOME=" + xdg}, bin, "serve", "--http", httpAddr, "--grpc", grpcAddr)
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz")

	status, body := postBody(t, base+"/v1/chat/completions", `{"model":"stories260k","messages":[{"role":"user","content":"Once"}]}`)
	want := `{"error":{"message":"` + hint260k(bin) + `","type":"invalid_request_error","param":"model","code":"model_not_loaded"}}`
	if status != 404 || body != want {
		t.Errorf("stories260k without weights: %d %s\nwant 404 %s", status, body, want)
	}
	status, body = postBody(t, base+"/v2/models/stories260k/generate_stream", `{"text_input":"Once"}`)
	if status != 404 || body != `{"error":"`+hint260k(bin)+`"}` {
		t.Errorf("/v2 stories260k without weights: %d %s", status, body)
	}
	stop(t, cmd, logs)
	log := logs.String()
	if n := len(logRecords(log, "for a larger model, run: "+bin+" models pull stories15M (then start again)")); n != 1 {
		t.Errorf("the pull command is logged %d times:\n%s", n, log)
	}
	// One line names both files, the command, and where to copy them
	// offline; the directories searched leave out Go's build directories.
	cache := filepath.Join(xdg, "streamgate", "models")
	warn := "stories260k not loaded: stories260K.bin and tok512.bin not found; get them with '" + bin + " models pull stories260K', " +
		"or offline copy stories260K.bin and tok512.bin (from https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/stories260K.bin and " +
		"https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/tok512.bin) into " + cache
	if recs := logRecords(log, warn); len(recs) != 1 || strings.Contains(fmt.Sprint(recs[0]["looked_in"]), "go-build") {
		t.Errorf("no warning %q:\n%s", warn, log)
	}
}

// A model in the cache is served without flags, under its lower-case name,
// with the raw chat template.
func TestServeModelFromCache(t *testing.T) {
	bin := buildBinary(t)
	xdg := t.TempDir()
	cache := filepath.Join(xdg, "streamgate", "models")
	writeStories15M(t, cache)
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	cmd, logs := startEnv(t, []string{"XDG_CACHE_HOME=" + xdg}, bin, "serve", "--http", httpAddr, "--grpc", grpcAddr)
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz")

	status, body := getBody(t, base+"/v1/models")
	if status != 200 || !strings.Contains(body, `{"id":"stories15m","object":"model"`) || strings.Contains(body, "stories260k") {
		t.Errorf("/v1/models: %d %s", status, body)
	}
	var completion struct {
		Choices []struct{ Text, FinishReason string }
		Usage   struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	status, body = postBody(t, base+"/v1/completions", `{"model":"stories15m","prompt":"Once upon a time","max_tokens":4,"temperature":0}`)
	if err := json.Unmarshal([]byte(body), &completion); status != 200 || err != nil || completion.Usage.CompletionTokens < 1 || completion.Usage.CompletionTokens > 4 {
		t.Errorf("completion from the cached model: %d %s %v", status, body, err)
	}
	// The raw template: the chat prompt is the message as it is, so the
	// chat answer is the completion's.
	var chat struct {
		Choices []struct{ Message struct{ Content string } }
	}
	status, body = postBody(t, base+"/v1/chat/completions", `{"model":"stories15m","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":4,"temperature":0}`)
	if err := json.Unmarshal([]byte(body), &chat); status != 200 || err != nil || len(chat.Choices) != 1 || len(completion.Choices) != 1 ||
		chat.Choices[0].Message.Content != completion.Choices[0].Text {
		t.Errorf("chat with the raw template: %d %s, want the completion's text %+v", status, body, completion.Choices)
	}
	stop(t, cmd, logs)
	log := logs.String()
	if !hasLog(log, "stories15m weights found", "dir", cache) || strings.Contains(log, "for a larger model") {
		t.Errorf("log:\n%s", log)
	}
}

// --model serves exactly the named models and fails at once when one is
// missing, naming the command that gets it.
func TestServeModelFlag(t *testing.T) {
	bin := buildBinary(t)
	cache := t.TempDir()
	cmd, logs := startEnv(t, nil, bin, "serve", "--model", "stories42M", "--model-cache", cache, "--http", freeAddr(t), "--grpc", freeAddr(t))
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 ||
		!strings.Contains(logs.String(), "streamgate: model stories42M: stories42M.bin and tokenizer.bin not found; get them with '"+bin+" models pull stories42M', or offline copy stories42M.bin and tokenizer.bin (from ") ||
		!strings.Contains(logs.String(), ") into "+cache+"; looked in ") {
		t.Fatalf("serve --model with a missing model: %v\n%s", err, logs.String())
	}
	cmd, logs = startEnv(t, nil, bin, "serve", "--model", "stories7B", "--http", freeAddr(t), "--grpc", freeAddr(t))
	if err := cmd.Wait(); err == nil || !strings.Contains(logs.String(), `--model: unknown model "stories7B": known models are stories260K, stories15M, stories42M, stories110M`) {
		t.Fatalf("serve --model with an unknown model: %v\n%s", err, logs.String())
	}

	writeStories15M(t, cache)
	httpAddr := freeAddr(t)
	// STREAMGATE_MODEL (the flag's variable) works as well.
	cmd, logs = startEnv(t, []string{"STREAMGATE_MODEL=stories15M"}, bin, "serve", "--model-cache", cache, "--http", httpAddr, "--grpc", freeAddr(t))
	waitHTTP(t, "http://"+httpAddr+"/readyz")
	if status, body := postBody(t, "http://"+httpAddr+"/v1/completions", `{"model":"stories15m","prompt":"Once","max_tokens":2}`); status != 200 {
		t.Errorf("completion: %d %s", status, body)
	}
	stop(t, cmd, logs)
}

// The models command in process: list, and its errors.
func TestModelsCommand(t *testing.T) {
	t.Setenv("STREAMGATE_MODEL_DIR", "")
	t.Chdir(t.TempDir())
	xdg := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", xdg)
	cache := filepath.Join(xdg, "streamgate", "models")
	writeStories15M(t, cache)
	if err := os.WriteFile(filepath.Join(cache, "stories260K.bin"), nil, 0o644); err != nil { // but no tok512.bin
		t.Fatal(err)
	}
	gg := filepath.Join(cache, "Tiny-Qwen2-Q8_0.gguf")
	if err := ggufmodel.Write(gg, ggufmodel.Small("qwen2", gguf.Q8_0, 1)); err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"models", "list"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) != 16 || !strings.HasPrefix(lines[0], "NAME ") ||
		!strings.Contains(lines[1], "missing tok512.bin in "+cache+": "+modelcache.Program()+" models pull stories260K") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), "stories15M stories15m 61 MB "+cache+" TinyStories, 15M") ||
		!strings.HasPrefix(lines[6], "GGUF MODEL ") ||
		strings.Join(strings.Fields(lines[7]), " ") != "tiny-qwen2-q8_0 qwen2 Q8_0 1.4M 256 1.5 MB "+gg ||
		lines[9] != "model cache: "+cache || lines[11] != "offline, copy a model's files into "+cache+":" ||
		lines[12] != "  stories260K: stories260K.bin and tok512.bin" || strings.Contains(lines[1], "built-in") {
		t.Errorf("models list:\n%s", out.String())
	}

	for _, tc := range []struct {
		args []string
		err  string
	}{
		{nil, "models: no command given"},
		{[]string{"nope"}, `models: unknown command "nope"`},
		{[]string{"pull"}, "models pull: name the models to pull (see 'streamgate models list')"},
		{[]string{"pull", "stories15M", "stories7B"}, `unknown model "stories7B"`},
		{[]string{"list", "extra"}, `unexpected argument "extra"`},
	} {
		err := run(context.Background(), append([]string{"models"}, tc.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("models %v: %v, want %q", tc.args, err, tc.err)
		}
	}

	// Offline: flags may follow the names.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hub := "http://" + l.Addr().String()
	l.Close()
	errOut.Reset()
	err = run(context.Background(), []string{"models", "pull", "stories42M", "--hub", hub, "--model-cache", t.TempDir()}, io.Discard, &errOut)
	if err == nil || !strings.HasPrefix(err.Error(), "stories42M.bin: cannot reach "+l.Addr().String()+" (offline?)") {
		t.Errorf("offline pull: %v\n%s", err, errOut.String())
	}
}

// The real files, served by a local stand-in for the Hub: `models pull`
// checks them against the pinned hashes, and serve then streams the golden
// story from the cache.
func TestModelsPullThenServe(t *testing.T) {
	real := modelDir(t)
	files := map[string][]byte{}
	for name, src := range map[string]string{
		"stories260K/stories260K.bin": "stories260K.bin",
		"stories260K/tok512.bin":      "tok512.bin",
	} {
		b, err := os.ReadFile(filepath.Join(real, src))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	// A stand-in for stories15M.bin: random weights, the 32k vocabulary.
	gen := filepath.Join(t.TempDir(), "stories15M.bin")
	if err := llama2test.WriteCheckpoint(gen, 32000, 3); err != nil {
		t.Fatal(err)
	}
	files["stories15M.bin"], _ = os.ReadFile(gen)
	const prefix = "/karpathy/tinyllamas/resolve/main/"
	// The Hub redirects a resolve URL to its CDN, another host.
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := strings.CutPrefix(r.URL.Path, "/cdn/"); ok && files[name] != nil {
			http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(files[name]))
			return
		}
		http.NotFound(w, r)
	}))
	defer cdn.Close()
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := strings.CutPrefix(r.URL.Path, prefix); ok && files[name] != nil {
			s := sha256.Sum256(files[name])
			w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(s[:])+`"`)
			http.Redirect(w, r, cdn.URL+"/cdn/"+name, http.StatusFound)
			return
		}
		http.NotFound(w, r)
	}))
	defer hub.Close()

	bin := buildBinary(t)
	xdg := t.TempDir()
	cache := filepath.Join(xdg, "streamgate", "models")
	// The 32k tokenizer.bin comes from GitHub, not the Hub: put the real
	// one in the cache, where pull checks it against its pinned hash.
	tok, err := os.ReadFile(filepath.Join(real, "tokenizer.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "tokenizer.bin"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"XDG_CACHE_HOME=" + xdg, "HF_ENDPOINT=" + hub.URL}
	cmd, logs := startEnv(t, env, bin, "models", "pull", "stories260K", "stories15M")
	waitExit(t, cmd, logs)
	out := logs.String()
	for _, w := range []string{
		"pulling stories260K into " + cache + "\n",
		"stories260K.bin: downloading 1.1 MB from " + hub.URL + prefix + "stories260K/stories260K.bin\n",
		"stories260K.bin: 100% (1.1 MB of 1.1 MB)\n",
		"stories260K.bin: sha256 ok (pinned)\n",
		"tok512.bin: sha256 ok (pinned)\n",
		"stories260K is ready: serve it with '" + bin + " serve --model stories260K' (model \"stories260k\")\n",
		"stories15M.bin: sha256 ok (published by " + strings.TrimPrefix(hub.URL, "http://") + ")\n",
		"tokenizer.bin: already in the cache, sha256 ok (pinned)\n",
		"stories15M is ready: serve it with '" + bin + " serve --model stories15M' (model \"stories15m\")\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("models pull output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "\r") {
		t.Errorf("progress redrawn in place on a pipe:\n%q", out)
	}

	httpAddr := freeAddr(t)
	cmd, logs = startEnv(t, env, bin, "serve", "--http", httpAddr, "--grpc", freeAddr(t))
	base := "http://" + httpAddr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve log:\n%s", logs.String())
		}
	})
	waitHTTP(t, base+"/readyz")
	status, body := postBody(t, base+"/v1/completions", `{"model":"stories260k","prompt":"Once upon a time","max_tokens":30,"temperature":0}`)
	if status != 200 || !strings.Contains(body, `"text":", there was a little girl named Lily.`) {
		t.Errorf("stories260k from the cache: %d %s", status, body)
	}
	if status, body := postBody(t, base+"/v1/completions", `{"model":"stories15m","prompt":"Once","max_tokens":2}`); status != 200 {
		t.Errorf("stories15m from the cache: %d %s", status, body)
	}
	stop(t, cmd, logs)
	if log := logs.String(); !hasLog(log, "stories260k weights found", "dir", cache) {
		t.Errorf("stories260k not loaded from the cache:\n%s", log)
	}
}

// A new user's path to a GGUF chat model, against a local stand-in for
// the Hugging Face Hub serving a generated file: `models pull
// OWNER/REPO:QUANT` lists the repository and downloads the file (SHA-256
// checked against the Hub's X-Linked-Etag), pulling it again by the URL
// the Hub's page links finds it in the cache, `models list` describes it,
// and `serve --model NAME` streams a chat completion from it.
func TestModelsPullGGUFThenChat(t *testing.T) {
	gen := filepath.Join(t.TempDir(), "gen.gguf")
	if err := ggufmodel.Write(gen, ggufmodel.Small("qwen3", gguf.Q8_0, 3)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(gen)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	const repo, file = "Org/Tiny-Chat-GGUF", "Tiny-Chat-Q8_0.gguf"
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/models/" + repo:
			json.NewEncoder(w).Encode(map[string]any{"id": repo, "siblings": []map[string]string{
				{"rfilename": "README.md"}, {"rfilename": "Tiny-Chat-Q4_K_M.gguf"}, {"rfilename": file}}})
		case "/" + repo + "/resolve/main/" + file:
			w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(sum[:])+`"`)
			http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(data))
		default:
			http.NotFound(w, r)
		}
	}))
	defer hub.Close()

	bin := buildBinary(t)
	xdg := t.TempDir()
	cache := filepath.Join(xdg, "streamgate", "models")
	env := []string{"XDG_CACHE_HOME=" + xdg, "HF_ENDPOINT=" + hub.URL}
	pageURL := hub.URL + "/" + repo + "/blob/main/" + file
	cmd, logs := startEnv(t, env, bin, "models", "pull", repo+":q8_0", pageURL)
	waitExit(t, cmd, logs)
	for _, w := range []string{
		"pulling " + repo + ":q8_0 into " + cache + "\n",
		file + ": sha256 ok (published by " + strings.TrimPrefix(hub.URL, "http://") + ")\n",
		repo + ":q8_0 is ready: serve it with '" + bin + " serve --model tiny-chat-q8_0' (model \"tiny-chat-q8_0\")\n",
		file + ": already in the cache",
		pageURL + " is ready: serve it with '" + bin + " serve --model tiny-chat-q8_0'",
	} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("models pull output lacks %q:\n%s", w, logs.String())
		}
	}

	cmd, logs = startEnv(t, env, bin, "models", "list")
	waitExit(t, cmd, logs)
	if row := regexp.MustCompile(`(?m)^tiny-chat-q8_0\s+qwen3\s+Q8_0\s+\S+\s+256\s`); !row.MatchString(logs.String()) {
		t.Errorf("models list has no row for the pulled file:\n%s", logs.String())
	}

	httpAddr := freeAddr(t)
	cmd, logs = startEnv(t, env, bin, "serve", "--model", "tiny-chat-q8_0", "--http", httpAddr, "--grpc", freeAddr(t))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve log:\n%s", logs.String())
		}
	})
	base := "http://" + httpAddr
	waitHTTP(t, base+"/readyz")
	status, body := postBody(t, base+"/v1/chat/completions",
		`{"model":"tiny-chat-q8_0","messages":[{"role":"user","content":"Hello world"}],"max_tokens":8,"temperature":0,"stream":true}`)
	if status != 200 || strings.Count(body, `"content":`) < 2 || !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
		t.Errorf("streamed chat from the pulled file: %d\n%s", status, body)
	}
	stop(t, cmd, logs)
}

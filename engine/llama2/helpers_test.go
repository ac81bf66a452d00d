package llama2

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/llama2/internal/testmodel"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { cleanupBenchDir() }))
}

// modelDir returns the directory of the real stories260K files, skipping
// the test when they are absent unless STREAMGATE_REQUIRE=1.
func modelDir(t testing.TB) string {
	t.Helper()
	dir, looked := FindModelDir("")
	if dir == "" {
		dir, looked = FindModelDir(filepath.Join("..", "..", "..", "shared", "models"))
	}
	if dir == "" {
		if os.Getenv("STREAMGATE_REQUIRE") == "1" {
			t.Fatalf("stories260K not found (looked in %v) and STREAMGATE_REQUIRE=1", looked)
		}
		t.Skipf("stories260K not found (looked in %v)", looked)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// openBackend builds a backend from a model config whose files are in dir,
// closed at the end of the test.
func openBackend(t testing.TB, dir, ckpt, tok string, params map[string]string) *Backend {
	t.Helper()
	cfg := Config("test", ckpt, tok)
	for k, v := range params {
		cfg.Parameters[k] = &pb.ModelParameter{StringValue: v}
	}
	return openConfig(t, backend.Config{Model: cfg, Dir: dir})
}

// openConfig builds a backend from cfg, closed at the end of the test.
func openConfig(t testing.TB, cfg backend.Config) *Backend {
	t.Helper()
	b, err := open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func realBackend(t testing.TB, params map[string]string) *Backend {
	return openBackend(t, modelDir(t), CheckpointFile, TokenizerFile, params)
}

// scripted writes a checkpoint whose greedy output after the prompt's last
// token follows chain (token ids), then EOS, with the synthetic vocabulary
// of testmodel.Pieces(260) (specials and byte tokens only), and opens it.
func scripted(t testing.TB, seqLen int, chain []int, params map[string]string) *Backend {
	t.Helper()
	return openBackend(t, scriptFiles(t, seqLen, chain), "m.bin", "t.bin", params)
}

// scriptFiles writes scripted's model files, m.bin and t.bin, into a new
// directory and returns it.
func scriptFiles(t testing.TB, seqLen int, chain []int) string {
	t.Helper()
	dir := t.TempDir()
	next := map[int]int{}
	for i := 0; i+1 < len(chain); i++ {
		next[chain[i]] = chain[i+1]
	}
	if err := testmodel.Script(filepath.Join(dir, "m.bin"), 260, seqLen, next); err != nil {
		t.Fatal(err)
	}
	if err := testmodel.WriteTokenizer(filepath.Join(dir, "t.bin"), testmodel.Pieces(260), nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// bytesChain returns the chain BOS, then the byte tokens of s.
func bytesChain(s string) []int {
	c := []int{1}
	for i := range len(s) {
		c = append(c, testmodel.Byte(s[i]))
	}
	return c
}

// recorder is a backend.Responder that records what Execute sends. block,
// if set, is called before recording each Send and may return an error.
type recorder struct {
	t        testing.TB
	mu       sync.Mutex
	pieces   []string
	released int
	block    func(ctx context.Context, n int) error
}

func (r *recorder) Send(ctx context.Context, resp *backend.Response) error {
	r.mu.Lock()
	n := len(r.pieces)
	r.mu.Unlock()
	if r.block != nil {
		if err := r.block(ctx, n); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return backend.ErrCancelled
	}
	if len(resp.Outputs) != 1 || resp.Outputs[0].Name != outputText || len(resp.Outputs[0].Shape) != 1 || resp.Outputs[0].Shape[0] != 1 {
		r.t.Errorf("streamed response must carry only text_output [1], got %+v", resp.Outputs)
	}
	s, err := resp.Outputs[0].Strings()
	if err != nil || len(s) != 1 {
		r.t.Errorf("text_output: %v %d", err, len(s))
		return nil
	}
	if len(s[0]) == 0 {
		r.t.Errorf("empty streamed piece")
	}
	if !utf8.Valid(s[0]) {
		r.t.Errorf("streamed piece %q is not valid UTF-8", s[0])
	}
	r.mu.Lock()
	r.pieces = append(r.pieces, string(s[0]))
	r.mu.Unlock()
	return nil
}

func (r *recorder) Release() {
	r.mu.Lock()
	r.released++
	r.mu.Unlock()
}

func (r *recorder) sent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.pieces...)
}

// call is one request.
type call struct {
	prompt    string
	stream    bool
	params    string // sampling_parameters JSON, "" to omit
	exclude   *bool
	reqParams map[string]*pb.InferParameter // request parameters
}

func (c call) request() *backend.Request {
	in := map[string]*tensor.Tensor{
		inputText:   tensor.NewString(inputText, c.prompt),
		inputStream: tensor.NewBool(inputStream, []int64{1}, []bool{c.stream}),
	}
	if c.params != "" {
		in[inputParams] = tensor.NewString(inputParams, c.params)
	}
	if c.exclude != nil {
		in[inputExclude] = tensor.NewBool(inputExclude, []int64{1}, []bool{*c.exclude})
	}
	return &backend.Request{ID: "r", ModelName: "test", Inputs: in, Parameters: c.reqParams}
}

// result is the decoded final response.
type result struct {
	text, finish        string
	inTokens, outTokens uint32
	pieces              []string
}

func (r result) streamed() string { return strings.Join(r.pieces, "") }

func decodeFinal(t testing.TB, resp *backend.Response) result {
	t.Helper()
	var res result
	if resp == nil {
		t.Fatal("nil final response")
	}
	seen := map[string]bool{}
	for _, o := range resp.Outputs {
		seen[o.Name] = true
		switch o.Name {
		case outputText, outputFinish:
			s, err := o.Strings()
			if err != nil || len(s) != 1 {
				t.Fatalf("%s: %v (%d elements)", o.Name, err, len(s))
			}
			if o.Name == outputText {
				res.text = string(s[0])
			} else {
				res.finish = string(s[0])
			}
		case outputInputTokens, outputOutputTokens:
			if o.Datatype != "UINT32" || len(o.Raw) != 4 {
				t.Fatalf("%s: %s with %d bytes", o.Name, o.Datatype, len(o.Raw))
			}
			v := binary.LittleEndian.Uint32(o.Raw)
			if o.Name == outputInputTokens {
				res.inTokens = v
			} else {
				res.outTokens = v
			}
		default:
			t.Fatalf("unexpected output %q", o.Name)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("final response has outputs %v, want all four", seen)
	}
	return res
}

// run executes c and returns the final response decoded, failing the test
// on an error.
func run(t testing.TB, b *Backend, c call) result {
	t.Helper()
	res, err := tryRun(t, context.Background(), b, c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func tryRun(t testing.TB, ctx context.Context, b *Backend, c call) (result, error) {
	t.Helper()
	rec := &recorder{t: t}
	resp, err := b.Execute(ctx, c.request(), rec)
	if rec.released != 1 {
		t.Errorf("Release called %d times, want 1", rec.released)
	}
	if err != nil {
		return result{}, err
	}
	res := decodeFinal(t, resp)
	res.pieces = rec.sent()
	if !c.stream && len(res.pieces) > 0 {
		t.Errorf("non-streaming request sent %d pieces", len(res.pieces))
	}
	return res, nil
}

// waitFor polls cond for up to 5 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func params(format string, args ...any) string { return fmt.Sprintf(format, args...) }

package llama2

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/streamgate/streamgate/engine/backend"
	"github.com/streamgate/streamgate/engine/llama2/internal/testmodel"
)

var greedy = `{"temperature": 0, "max_tokens": 100}`

func TestStreamNeverSplitsUTF8(t *testing.T) {
	// Every byte is its own token: € is three, 😀 four.
	const want = "a€b😀é"
	b := scripted(t, 64, bytesChain(want), nil)
	res := run(t, b, call{stream: true, params: greedy})
	if got := res.streamed() + res.text; got != want {
		t.Fatalf("streamed %q, want %q", got, want)
	}
	// The recorder checks each piece is valid UTF-8; the pieces are exactly
	// the characters.
	if !slices.Equal(res.pieces, []string{"a", "€", "b", "😀", "é"}) {
		t.Errorf("pieces %q", res.pieces)
	}
	if res.finish != finishStop || res.outTokens != uint32(len(want))+1 {
		t.Errorf("finish %q, output tokens %d, want stop and %d (EOS included)", res.finish, res.outTokens, len(want)+1)
	}
	res = run(t, b, call{params: greedy})
	if res.text != want {
		t.Errorf("non-streaming text %q", res.text)
	}
}

func TestIncompleteUTF8AtEndIsReplaced(t *testing.T) {
	b := scripted(t, 64, append(bytesChain("ok"), testmodel.Byte(0xE2), testmodel.Byte(0x82)), nil)
	res := run(t, b, call{stream: true, params: greedy})
	if got := res.streamed() + res.text; got != "ok\uFFFD" {
		t.Fatalf("got %q, want the dangling bytes replaced", got)
	}
	if res.text != "\uFFFD" {
		t.Errorf("final text %q, want the held-back bytes", res.text)
	}
}

func TestStopSequences(t *testing.T) {
	b := scripted(t, 64, bytesChain("xab€cd"), nil)
	for _, tc := range []struct {
		stop, want, finish string
	}{
		{`"b€c"`, "xa", finishStop},         // spans four tokens
		{`["zz", "€"]`, "xab", finishStop},  // a multi-byte stop
		{`["bz"]`, "xab€cd", finishStop},    // "b" is held, then released; EOS ends it
		{`["d"]`, "xab€c", finishStop},      // the last token
		{`["x"]`, "", finishStop},           // the first token
		{`["cd", "ab€"]`, "x", finishStop},  // the earliest match wins
		{`[]`, "xab€cd", finishStop},        // no stops
		{`"xab€cd!"`, "xab€cd", finishStop}, // held text is released at the end
	} {
		for _, stream := range []bool{false, true} {
			res := run(t, b, call{stream: stream, params: `{"temperature":0,"stop":` + tc.stop + `}`})
			got := res.text
			if stream {
				got = res.streamed() + res.text
			}
			if got != tc.want || res.finish != tc.finish {
				t.Errorf("stop %s stream=%v: got %q (%s), want %q (%s)", tc.stop, stream, got, res.finish, tc.want, tc.finish)
			}
		}
	}
	// A possible start of a stop sequence is held until decided: "b" waits
	// for the next byte, "€" (which as a stop prefix could be "b€x") too.
	res := run(t, b, call{stream: true, params: `{"temperature":0,"stop":"bc"}`})
	if !slices.Equal(res.pieces, []string{"x", "a", "b", "€", "c", "d"}) {
		t.Errorf("pieces %q", res.pieces)
	}
	res = run(t, b, call{stream: true, params: `{"temperature":0,"stop":"b€x"}`})
	if !slices.Equal(res.pieces, []string{"x", "a", "b€c", "d"}) {
		t.Errorf("pieces %q, want \"b€\" held until \"c\"", res.pieces)
	}
}

func TestLengthLimits(t *testing.T) {
	b := scripted(t, 8, bytesChain("abcdefghijklmnop"), nil)
	res := run(t, b, call{params: `{"temperature":0,"max_tokens":3}`})
	if res.text != "abc" || res.finish != finishLength || res.outTokens != 3 {
		t.Errorf("max_tokens: %q %s %d", res.text, res.finish, res.outTokens)
	}
	// Context of 8: BOS at 0, samples at positions 0..7.
	res = run(t, b, call{params: `{"temperature":0,"max_tokens":100}`})
	if res.text != "abcdefgh" || res.finish != finishLength || res.outTokens != 8 {
		t.Errorf("context: %q %s %d", res.text, res.finish, res.outTokens)
	}
	// A prompt of exactly the context still gets one token.
	res = run(t, b, call{prompt: "abcdefg", params: `{"temperature":0,"max_tokens":100}`})
	if res.text != "abcdefgh" || res.inTokens != 8 || res.outTokens != 1 || res.finish != finishLength {
		t.Errorf("full prompt: %q in=%d out=%d %s", res.text, res.inTokens, res.outTokens, res.finish)
	}
	_, err := tryRun(t, context.Background(), b, call{prompt: "abcdefgh"})
	if err == nil || !strings.Contains(err.Error(), "prompt is 9 tokens, longer than the model's context of 8 tokens") {
		t.Errorf("long prompt: err = %v", err)
	}
}

func TestPromptEcho(t *testing.T) {
	b := scripted(t, 64, bytesChain("hi!"), nil)
	yes, no := true, false
	for _, tc := range []struct {
		stream  bool
		exclude *bool
		want    string
	}{
		{false, nil, "hi!"},
		{false, &no, "hi!"},
		{false, &yes, "!"},
		{true, nil, "!"},
		{true, &no, "!"},
	} {
		// The prompt "hi" (BOS, h, i) continues with "!".
		res := run(t, b, call{prompt: "hi", stream: tc.stream, exclude: tc.exclude, params: greedy})
		got := res.text
		if tc.stream {
			got = res.streamed() + res.text
		}
		if got != tc.want || res.inTokens != 3 {
			t.Errorf("stream=%v exclude=%v: %q (in=%d), want %q", tc.stream, tc.exclude, got, res.inTokens, tc.want)
		}
	}
}

func TestIgnoreEOS(t *testing.T) {
	b := scripted(t, 16, bytesChain("ab"), nil)
	// After "b" comes EOS, whose piece is "\n</s>\n"; then EOS again.
	res := run(t, b, call{params: `{"temperature":0,"max_tokens":4,"ignore_eos":true}`})
	if res.text != "ab\n</s>\n\n</s>\n" || res.finish != finishLength {
		t.Errorf("got %q %s", res.text, res.finish)
	}
}

func TestBadRequests(t *testing.T) {
	b := scripted(t, 16, bytesChain("ab"), nil)
	for _, tc := range []struct{ params, msg string }{
		{`nope`, "sampling_parameters must be a JSON object"},
		{`[1]`, "sampling_parameters must be a JSON object"},
		{`null`, "sampling_parameters must be a JSON object"},
		{`{"temperature": -1}`, "temperature must be a number >= 0, got -1"},
		{`{"temperature": "hot"}`, "temperature must be a number >= 0"},
		{`{"top_p": 0}`, "top_p must be a number in (0, 1], got 0"},
		{`{"top_p": 1.5}`, "top_p must be a number in (0, 1]"},
		{`{"max_tokens": 0}`, "max_tokens must be an integer >= 1, got 0"},
		{`{"max_tokens": 2.5}`, "max_tokens must be an integer >= 1, got 2.5"},
		{`{"seed": 1.5}`, "seed must be a 64-bit integer"},
		{`{"stop": 3}`, "stop must be a string or an array of strings"},
		{`{"stop": [""]}`, "stop sequence 0 must be 1 to 256 bytes long, got 0"},
		{`{"stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}`, "stop has 17 sequences, at most 16"},
		{`{"ignore_eos": 1}`, "ignore_eos must be true or false"},
		{`{"top_k": -2}`, "top_k must be an integer >= -1 (0 and -1 turn it off), got -2"},
		{`{"top_k": 2.5}`, "top_k must be an integer >= -1"},
		{`{"min_p": 1.5}`, "min_p must be a number in [0, 1], got 1.5"},
		{`{"min_p": -0.1}`, "min_p must be a number in [0, 1]"},
		{`{"repetition_penalty": 0}`, "repetition_penalty must be a number > 0, got 0"},
		{`{"repetition_penalty": 1e-50}`, "repetition_penalty must be a number > 0"},
		{`{"repetition_penalty": "x"}`, "repetition_penalty must be a number > 0"},
		{`{"frequency_penalty": 2.5}`, "frequency_penalty must be a number in [-2, 2], got 2.5"},
		{`{"presence_penalty": -3}`, "presence_penalty must be a number in [-2, 2], got -3"},
		{`{"best_of": 2}`, `unknown key "best_of" (supported: temperature, top_p, top_k, min_p, repetition_penalty, frequency_penalty, presence_penalty, max_tokens, seed, stop, ignore_eos, guided_decoding)`},
		{`{"best_of": null}`, `unknown key "best_of"`},
	} {
		_, err := tryRun(t, context.Background(), b, call{params: tc.params})
		if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "llama2: ") {
			t.Errorf("%s: err = %v, want %q", tc.params, err, tc.msg)
		}
	}
	// Nulls mean defaults; seeds may be negative or beyond int64.
	for _, p := range []string{`{}`, `{"temperature":null,"stop":null}`, `{"seed":-5,"max_tokens":1}`, `{"seed":18446744073709551615}`,
		`{"top_k":-1,"min_p":1,"repetition_penalty":2,"frequency_penalty":-2,"presence_penalty":2}`, `{"top_k":null,"min_p":null}`} {
		if _, err := tryRun(t, context.Background(), b, call{params: p}); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	_, err := b.Execute(context.Background(), &backend.Request{Inputs: nil}, &recorder{t: t})
	if err == nil || !strings.Contains(err.Error(), "missing input 'text_input'") {
		t.Errorf("no text_input: %v", err)
	}
}

func TestDefaultMaxTokens(t *testing.T) {
	b := scripted(t, 64, bytesChain("abcdefghijklmnopqrstuvwxyz"), nil)
	res := run(t, b, call{params: `{"temperature":0}`})
	if res.outTokens != defaultMaxTokens || res.finish != finishLength {
		t.Errorf("default max_tokens: %d tokens, %s", res.outTokens, res.finish)
	}
}

// cycle returns a scripted backend whose output loops forever over a
// few byte tokens, so only max_tokens and the context end it.
func cycle(t *testing.T, seqLen int, params map[string]string) *Backend {
	chain := bytesChain("abcd")
	chain = append(chain, testmodel.Byte('a'))
	return scripted(t, seqLen, chain, params)
}

// TestCancelFreesKVSlot runs in a synctest bubble, on one worker (the
// kernel pool's helpers spin on the clock, which stands still in a
// bubble): once every goroutine waits, the scheduler has parked, so the
// passes it ran after the cancellation are all it will run.
func TestCancelFreesKVSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := cycle(t, 4096, map[string]string{paramMaxSequences: "1", paramWorkers: "1"})
		long := `{"temperature":0,"max_tokens":100000}`
		started := make(chan struct{})
		b.onPass = func(n int64) {
			if n == 5 {
				close(started)
			}
		}

		// A non-streaming request waits in Execute's select: cancel it mid-way.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			resp, err := b.Execute(ctx, call{params: long}.request(), &recorder{t: t})
			if resp != nil {
				err = fmt.Errorf("got a response after cancellation")
			}
			done <- err
		}()
		<-started
		if b.slotsInUse.Load() != 1 {
			t.Fatalf("slots in use %d, want 1", b.slotsInUse.Load())
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		passes := b.passes.Load()
		synctest.Wait() // the scheduler waits for work
		if n := b.slotsInUse.Load(); n != 0 {
			t.Fatalf("slots in use %d after the only request was cancelled", n)
		}
		// The pass under way when Execute returned may finish; no more.
		if p := b.passes.Load(); p > passes+1 {
			t.Errorf("scheduler ran %d passes after the only request was cancelled", p-passes)
		}
		// The single slot serves the next request.
		if res := run(t, b, call{params: `{"temperature":0,"max_tokens":5}`}); res.text != "abcda" {
			t.Errorf("next request: %q", res.text)
		}
	})
}

func TestCancelWhileStreamingLetsQueuedRequestRun(t *testing.T) {
	b := cycle(t, 4096, map[string]string{paramMaxSequences: "1", paramMaxQueue: "1"})
	long := `{"temperature":0,"max_tokens":100000}`

	// A streams; after its first piece its client stalls, so the scheduler
	// pauses it (backlog full) but it keeps the only KV cache.
	ctxA, cancelA := context.WithCancel(context.Background())
	first := make(chan struct{})
	recA := &recorder{t: t, block: func(ctx context.Context, n int) error {
		if n == 1 {
			close(first)
			<-ctx.Done()
			return backend.ErrCancelled
		}
		return nil
	}}
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		if resp, err := b.Execute(ctxA, call{stream: true, params: long}.request(), recA); resp != nil || err != nil {
			t.Errorf("cancelled A: %v %v", resp, err)
		}
	}()
	<-first

	// B waits for the cache; C finds the queue full.
	doneB := make(chan result, 1)
	go func() { doneB <- run(t, b, call{params: `{"temperature":0,"max_tokens":3}`}) }()
	waitFor(t, "B to queue", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.waiting) == 1
	})
	_, err := tryRun(t, context.Background(), b, call{params: greedy})
	if err == nil || !strings.Contains(err.Error(), "llama2: too many requests (queue full") {
		t.Errorf("C: err = %v, want queue full", err)
	}
	select {
	case <-doneB:
		t.Fatal("B ran while A held the only KV cache")
	case <-time.After(20 * time.Millisecond):
	}

	cancelA()
	<-doneA
	select {
	case res := <-doneB:
		if res.text != "abc" {
			t.Errorf("B: %q", res.text)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("B did not run after A was cancelled")
	}
	waitFor(t, "slots to be freed", func() bool { return b.slotsInUse.Load() == 0 })
}

// TestConcurrentMatchesSolo runs requests alone, then all at once: with
// continuous batching each must produce exactly the same text.
func TestConcurrentMatchesSolo(t *testing.T) {
	b := realBackend(t, map[string]string{paramMaxSequences: "4", paramMaxQueue: "8"})
	var calls []call
	for i := range 10 {
		calls = append(calls, call{
			prompt: []string{"", "Once upon a time", "The cat", "Tim and Lily"}[i%4],
			stream: i%2 == 0,
			params: params(`{"temperature":0.8,"top_p":0.9,"seed":%d,"max_tokens":%d}`, i+1, 20+7*i),
		})
	}
	solo := make([]string, len(calls))
	for i, c := range calls {
		res := run(t, b, c)
		solo[i] = res.streamed() + res.text
	}
	var wg sync.WaitGroup
	got := make([]string, len(calls))
	for i, c := range calls {
		wg.Go(func() {
			res, err := tryRun(t, context.Background(), b, c)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = res.streamed() + res.text
		})
	}
	wg.Wait()
	for i := range calls {
		if got[i] != solo[i] {
			t.Errorf("request %d: concurrent %q, solo %q", i, got[i], solo[i])
		}
	}
}

func TestCloseFailsRunningRequests(t *testing.T) {
	b := cycle(t, 4096, map[string]string{paramMaxSequences: "1"})
	errs := make(chan error, 2)
	for range 2 { // one generating, one queued
		go func() {
			_, err := b.Execute(context.Background(), call{params: `{"temperature":0,"max_tokens":100000}`}.request(), &recorder{t: t})
			errs <- err
		}()
	}
	waitFor(t, "generation to start", func() bool { return b.passes.Load() > 2 })
	b.Close()
	for range 2 {
		if err := <-errs; !errors.Is(err, errClosing) {
			t.Errorf("in-flight request: err = %v, want %v", err, errClosing)
		}
	}
	if _, err := tryRun(t, context.Background(), b, call{}); !errors.Is(err, errClosing) {
		t.Errorf("after Close: err = %v", err)
	}
	b.Close() // idempotent
}

// TestLongPromptRefusedBeforeTokenizing checks the byte cap: a prompt
// longer than the context can hold in bytes is refused with its own
// message, without being tokenized; one under the cap but over the
// context in tokens gets the token count.
func TestLongPromptRefusedBeforeTokenizing(t *testing.T) {
	b := realBackend(t, nil)
	// stories260K: 512 positions, pieces of at most 7 bytes.
	if b.promptBytes != 511*7 {
		t.Fatalf("prompt byte limit %d, want 511·7 = %d", b.promptBytes, 511*7)
	}
	for _, tc := range []struct {
		prompt string
		msg    string
	}{
		{strings.Repeat("a", 1<<20), "llama2: prompt is 1048576 bytes, longer than the model's context of 512 tokens can hold (at most 3577 bytes: 7 per token)"},
		{strings.Repeat("a", 3578), "llama2: prompt is 3578 bytes, longer than the model's context of 512 tokens can hold"},
		{strings.Repeat("a b ", 894), "llama2: prompt is 1790 tokens, longer than the model's context of 512 tokens"},
	} {
		_, err := tryRun(t, context.Background(), b, call{prompt: tc.prompt, params: greedy})
		if err == nil || !strings.HasPrefix(err.Error(), tc.msg) {
			t.Errorf("%d-byte prompt: err = %v, want %q", len(tc.prompt), err, tc.msg)
		}
		if code, _ := backend.CodeOf(err); code != codes.InvalidArgument {
			t.Errorf("%d-byte prompt: code %v, want InvalidArgument", len(tc.prompt), code)
		}
	}
	if p := b.passes.Load(); p != 0 {
		t.Errorf("refused prompts ran %d forward passes", p)
	}
}

// TestCancelledBeforeTokenizing checks that a request whose context is
// already done is neither tokenized into the queue nor run.
func TestCancelledBeforeTokenizing(t *testing.T) {
	b := cycle(t, 4096, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	resp, err := b.Execute(ctx, call{prompt: strings.Repeat("abcd", 1000), params: greedy}.request(), &recorder{t: t})
	if resp != nil || err != nil {
		t.Fatalf("cancelled request: %v, %v; want nil, nil", resp, err)
	}
	b.mu.Lock()
	inflight := b.inflight
	b.mu.Unlock()
	if inflight != 0 || b.passes.Load() != 0 {
		t.Errorf("cancelled request was admitted (%d in flight, %d passes)", inflight, b.passes.Load())
	}
}

// TestCancelDuringPrefill cancels a request whose prompt takes 57 passes
// (3,601 tokens in chunks of 64) right after the first pass: the scheduler
// must drop it and free its KV cache at once rather than finish the prompt.
func TestCancelDuringPrefill(t *testing.T) {
	b := cycle(t, 4096, nil)
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	b.onPass = func(n int64) {
		if n == 1 {
			cancel()
			<-returned // Execute has marked the sequence cancelled
		}
	}
	go func() {
		defer close(returned)
		resp, err := b.Execute(ctx, call{prompt: strings.Repeat("abcd", 900), params: greedy}.request(), &recorder{t: t})
		if resp != nil || err != nil {
			t.Errorf("cancelled request: %v, %v; want nil, nil", resp, err)
		}
	}()
	<-returned
	waitFor(t, "the KV cache to be freed", func() bool { return b.slotsInUse.Load() == 0 })
	if p := b.passes.Load(); p != 1 {
		t.Errorf("%d passes ran, want 1: the prefill went on after the client left", p)
	}
}

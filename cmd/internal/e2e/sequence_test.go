package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/streamgate/streamgate/cmd/internal/stack"
	"github.com/streamgate/streamgate/engine"
	"github.com/streamgate/streamgate/engine/builtin"
	"github.com/streamgate/streamgate/gateway"
	"github.com/streamgate/streamgate/gateway/ws"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/upstream"
)

// The transcribe model turns chunks into partial transcripts: each
// response's text_output is what the transcript gained up to its last
// space, the END chunk's the rest.

// seqClient drives sequences on one socket and collects what comes back.
type seqClient struct {
	t *testing.T
	c *websocket.Conn
}

func (sc seqClient) text(frame string) {
	sc.t.Helper()
	loadSpec(sc.t).checkWSClientFrame(sc.t, []byte(frame))
	wsSend(sc.t, sc.c, frame)
}

func (sc seqClient) start(id, model, body string) {
	sc.text(`{"type":"sequence.start","id":"` + id + `","model":"` + model + `","body":` + body + `}`)
}

func (sc seqClient) data(id, body string, end bool) {
	typ := "sequence.data"
	if end {
		typ = "sequence.end"
	}
	sc.text(`{"type":"` + typ + `","id":"` + id + `","body":` + body + `}`)
}

// binary sends a binary chunk: the documented header, a newline, bytes.
func (sc seqClient) binary(id, input string, data []byte, end bool) {
	sc.t.Helper()
	h, err := json.Marshal(map[string]any{"id": id, "input": input, "end": end})
	if err != nil {
		sc.t.Fatal(err)
	}
	var hdr any
	if err := json.Unmarshal(h, &hdr); err != nil {
		sc.t.Fatal(err)
	}
	loadSpec(sc.t).validate(sc.t, loadSpec(sc.t).schema(sc.t, "paths", "/v1/ws", "get", "x-websocket", "clientBinaryFrameHeader"), "binary frame header", h)
	if err := sc.c.Write(sc.t.Context(), websocket.MessageBinary, append(append(h, '\n'), data...)); err != nil {
		sc.t.Fatal(err)
	}
}

// seqResult is what one id got: its text deltas in order, the
// finish_reason, and its terminal frame.
type seqResult struct {
	deltas []string
	finish string
	term   wsFrame
}

// collect reads frames until n ids have their terminal frame.
func (sc seqClient) collect(n int) map[string]*seqResult {
	sc.t.Helper()
	out := map[string]*seqResult{}
	done := 0
	for done < n {
		f, raw, err := wsRead(sc.t, sc.c)
		if err != nil {
			sc.t.Fatal(err)
		}
		r := out[f.ID]
		if r == nil {
			r = &seqResult{}
			out[f.ID] = r
		}
		if r.term.Type != "" {
			for id, r := range out {
				sc.t.Logf("%s: %q %+v", id, r.deltas, r.term)
			}
			sc.t.Fatalf("frame after the terminal of %s: %s", f.ID, raw)
		}
		switch f.Type {
		case "data":
			if f.Seq != uint64(len(r.deltas)) {
				sc.t.Fatalf("%s: seq %d after %d frames", f.ID, f.Seq, len(r.deltas))
			}
			var d struct {
				Text   *string `json:"text_output"`
				Finish string  `json:"finish_reason"`
				Model  string  `json:"model_name"`
			}
			if err := json.Unmarshal(f.Data, &d); err != nil || d.Text == nil || d.Model != "transcribe" {
				sc.t.Fatalf("%s: data %s (%v)", f.ID, f.Data, err)
			}
			r.deltas = append(r.deltas, *d.Text)
			if d.Finish != "" {
				r.finish = d.Finish
			}
		default:
			r.term = f
			done++
		}
	}
	return out
}

// chunksOf cuts text into n pieces (words are split across chunks, as
// audio frames split words): at arbitrary bytes, or between characters
// when the pieces go in JSON strings.
func chunksOf(text string, n int, whole bool) []string {
	var out []string
	step := (len(text) + n - 1) / n
	for i := 0; i < len(text); {
		j := min(i+step, len(text))
		for whole && j < len(text) && !utf8.RuneStart(text[j]) {
			j++
		}
		out = append(out, text[i:j])
		i = j
	}
	return out
}

// TestWebSocketSequences: 20 sequences at once on one socket, their chunks
// interleaved, half of them sent as binary frames. Each sequence gets its
// partial transcripts in order under its own id, and they add up to
// exactly what it sent; then a done frame.
func TestWebSocketSequences(t *testing.T) {
	s := newStack(t, &gateway.Options{WebSocket: &ws.Options{ChunkRate: 10000}})
	sc := seqClient{t: t, c: s.dialWS(t)}
	const n, chunks = 20, 6
	texts := map[string][]string{}
	for i := range n {
		id := fmt.Sprintf("mic%02d", i)
		// Odd ones go as binary frames, cut anywhere (even inside a
		// character); even ones as JSON text.
		texts[id] = chunksOf(fmt.Sprintf("speaker %d says: the quick brown fox jumps over %d lazy dogs, ünïcödé ok", i, i*7), chunks, i%2 == 0)
		if len(texts[id]) != chunks {
			t.Fatalf("%s: %d chunks", id, len(texts[id]))
		}
		sc.start(id, "transcribe", `{"text_input":`+jsonString(texts[id][0])+`}`)
	}
	for k := 1; k < chunks; k++ {
		for i := range n {
			id := fmt.Sprintf("mic%02d", i)
			piece, end := texts[id][k], k == chunks-1
			if i%2 == 1 {
				sc.binary(id, "text_input", []byte(piece), end)
			} else {
				sc.data(id, `{"text_input":`+jsonString(piece)+`}`, end)
			}
		}
	}
	got := sc.collect(n)
	for id, pieces := range texts {
		r := got[id]
		if r == nil || r.term.Type != "done" || r.term.Reason != "final" {
			t.Fatalf("%s ended %+v", id, r)
		}
		if joined := strings.Join(r.deltas, ""); joined != strings.Join(pieces, "") {
			t.Fatalf("%s: deltas %q add up to %q, want %q", id, r.deltas, joined, strings.Join(pieces, ""))
		}
		if len(r.deltas) < 3 || r.finish != "stop" {
			t.Fatalf("%s: %d partial results (finish %q): %q", id, len(r.deltas), r.finish, r.deltas)
		}
		for _, d := range r.deltas[:len(r.deltas)-1] {
			if !strings.HasSuffix(d, " ") {
				t.Fatalf("%s: a partial result %q is not whole words", id, d)
			}
		}
	}
	if n := s.up.OpenSequences(); n != 0 {
		t.Fatalf("%d sequences still routed after their END", n)
	}
	c := sc.c
	c.Close(websocket.StatusNormalClosure, "")
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// engineStack runs an engine alone (the built-in models), stopped when
// the test ends.
func engineStack(t *testing.T) *stack.Stack {
	t.Helper()
	st, err := stack.Start(stack.Config{Engine: &engine.Options{Repository: builtin.FS, Backends: builtin.Backends(), Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.StopNow)
	return st
}

// gatewayTo runs a gateway alone in front of the engines.
func gatewayTo(t *testing.T, engines ...*stack.Stack) *testStack {
	t.Helper()
	return newStack(t, &gateway.Options{WebSocket: &ws.Options{ChunkRate: 10000}}, func(c *stack.Config) {
		c.Engine = nil
		for _, e := range engines {
			c.Upstream = append(c.Upstream, e.EngineAddr)
		}
		c.UpstreamOptions = &upstream.Options{HealthInterval: 100 * time.Millisecond}
	})
}

func transcribed(t *testing.T, e *stack.Stack) uint64 {
	t.Helper()
	r, err := e.Engine.ModelStatistics(context.Background(), &pb.ModelStatisticsRequest{Name: "transcribe"})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetModelStats()[0].GetInferenceCount()
}

// TestSequenceAffinityTwoEngines: sequences through one gateway in front
// of two engines. Every chunk of a sequence reaches the engine its start
// went to (each engine counts whole sequences of chunks, and a transcript
// split across engines would come out wrong), and both engines get
// sequences.
func TestSequenceAffinityTwoEngines(t *testing.T) {
	a, b := engineStack(t), engineStack(t)
	s := gatewayTo(t, a, b)
	// Until its first health check a target ranks below one checked
	// healthy, and a busy box may run one engine's check well after the
	// other's: start once both are checked.
	waitFor(t, "both engines checked", func() bool {
		targets := s.up.Stats().Targets
		for _, ts := range targets {
			if !ts.Checked || !ts.Healthy {
				return false
			}
		}
		return len(targets) == 2
	})
	sc := seqClient{t: t, c: s.dialWS(t)}
	const n, chunks = 10, 5
	for i := range n {
		sc.start(fmt.Sprintf("s%d", i), "transcribe", `{"text_input":"a"}`)
	}
	for k := 1; k < chunks; k++ {
		for i := range n {
			sc.data(fmt.Sprintf("s%d", i), `{"text_input":"b "}`, k == chunks-1)
		}
	}
	got := sc.collect(n)
	for i := range n {
		r := got[fmt.Sprintf("s%d", i)]
		if r.term.Type != "done" || strings.Join(r.deltas, "") != "ab b b b " {
			t.Fatalf("s%d: %q, %+v", i, r.deltas, r.term)
		}
	}
	na, nb := transcribed(t, a), transcribed(t, b)
	if na+nb != n*chunks || na%chunks != 0 || nb%chunks != 0 || na == 0 || nb == 0 {
		t.Fatalf("engines ran %d and %d chunks: want whole sequences of %d on each, %d in all", na, nb, chunks, n*chunks)
	}
}

// TestSequenceEngineKilled: the engine holding a sequence stops between
// two chunks; the next chunk ends the sequence with sequence_lost (not
// re-sent to the other engine, which never saw the sequence), and a new
// sequence works on the engine left.
func TestSequenceEngineKilled(t *testing.T) {
	a, b := engineStack(t), engineStack(t)
	s := gatewayTo(t, a, b)
	sc := seqClient{t: t, c: s.dialWS(t)}
	sc.start("s1", "transcribe", `{"text_input":"hello "}`)
	if f, _, err := wsRead(t, sc.c); err != nil || f.Type != "data" {
		t.Fatalf("first partial: %+v %v", f, err)
	}
	holder, other := a, b
	if transcribed(t, b) == 1 {
		holder, other = b, a
	}
	holder.StopNow()
	sc.data("s1", `{"text_input":"world "}`, false)
	f, raw, err := wsRead(t, sc.c)
	if err != nil || f.Type != "error" || f.ID != "s1" || f.Error.Code != "sequence_lost" ||
		!strings.Contains(f.Error.Message, "its state is gone, start it again") {
		t.Fatalf("after the engine stopped: %s %v", raw, err)
	}
	if transcribed(t, other) != 0 {
		t.Fatal("a chunk of the lost sequence reached the other engine")
	}
	sc.start("s2", "transcribe", `{"text_input":"again "}`)
	sc.data("s2", `{"text_input":"ok"}`, true)
	if r := sc.collect(1)["s2"]; r.term.Type != "done" || strings.Join(r.deltas, "") != "again ok" {
		t.Fatalf("a new sequence: %q %+v", r.deltas, r.term)
	}
}

// TestSequenceIdleLimit: a sequence whose client stops sending is ended by
// the gateway with sequence_idle (before the engine's reaper would), and
// the socket serves on.
func TestSequenceIdleLimit(t *testing.T) {
	s := newStack(t, &gateway.Options{WebSocket: &ws.Options{SequenceIdle: 50 * time.Millisecond}})
	sc := seqClient{t: t, c: s.dialWS(t)}
	sc.start("quiet", "transcribe", `{"text_input":"one "}`)
	r := sc.collect(1)["quiet"]
	if r.term.Type != "error" || r.term.Error.Code != ws.CodeSequenceIdle || strings.Join(r.deltas, "") != "one " {
		t.Fatalf("a stalled sequence ended with %+v after %q", r.term, r.deltas)
	}
	sc.start("next", "transcribe", `{"text_input":"two "}`)
	sc.data("next", `{"text_input":"three"}`, true)
	if r := sc.collect(1)["next"]; r.term.Type != "done" {
		t.Fatalf("after the idle end: %+v", r.term)
	}
}

// TestSequenceErrors: a sequence frame's errors in the protocol's shape.
func TestSequenceErrors(t *testing.T) {
	s := newStack(t, nil)
	c := s.dialWS(t)
	for _, tc := range []struct{ frame, want string }{
		{`{"type":"sequence.start","id":"e1","model":"echo","body":{"text_input":"x"}}`,
			`{"type":"error","id":"e1","error":{"code":"bad_request","message":"model 'echo' is not a sequence model: its config has no sequence_batching"}}`},
		{`{"type":"sequence.start","id":"e2","model":"transcribe","body":{"text_input":"x","sequence_id":5}}`,
			`{"type":"error","id":"e2","error":{"code":"bad_request","message":"'sequence_id' is set by the gateway in sequence frames"}}`},
		{`{"type":"sequence.data","id":"e3","body":{"text_input":"x"}}`,
			`{"type":"error","error":{"code":"unknown_sequence","message":"no open sequence e3"}}`},
		{`{"type":"sequence.start","id":"e4","model":"nope","body":{}}`,
			`{"type":"error","id":"e4","error":{"code":"not_found","message":"Request for unknown model: 'nope' is not found"}}`},
	} {
		wsSend(t, c, tc.frame)
		_, raw, err := wsRead(t, c)
		if err != nil || string(raw) != tc.want {
			t.Errorf("%s\n got %s %v\nwant %s", tc.frame, raw, err, tc.want)
		}
	}
	// A binary chunk for an input that is not BYTES ends its sequence.
	wsSend(t, c, `{"type":"sequence.start","id":"e5","model":"custom_sequence_int32","body":{"INPUT":[1]}}`)
	if f, _, err := wsRead(t, c); err != nil || f.Type != "data" {
		t.Fatalf("e5 start: %+v %v", f, err)
	}
	sc := seqClient{t: t, c: c}
	sc.binary("e5", "INPUT", []byte{1, 0, 0, 0}, true)
	if _, raw, err := wsRead(t, c); err != nil || string(raw) != `{"type":"error","id":"e5","error":{"code":"bad_request","message":"input 'INPUT' is INT32: binary chunks fill BYTES inputs"}}` {
		t.Fatalf("e5 binary: %s %v", raw, err)
	}
}

// TestGenerateSequence: Triton's HTTP sequence parameters on /generate,
// against the accumulator, and their errors.
func TestGenerateSequence(t *testing.T) {
	s := newStack(t, nil)
	url := "/v2/models/custom_sequence_int32/generate"
	for _, tc := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"INPUT":[4],"sequence_id":77,"sequence_start":true}`, 200, `"OUTPUT":4`},
		{`{"INPUT":[5],"parameters":{"sequence_id":77}}`, 200, `"OUTPUT":9`},
		{`{"INPUT":[1],"sequence_id":77,"sequence_end":true}`, 200, `"OUTPUT":10`},
		{`{"INPUT":[1],"sequence_id":77}`, 400, `{"error":"inference request for sequence 77 to model 'custom_sequence_int32' must specify the START flag on the first request of the sequence"}`},
		{`{"INPUT":[1],"sequence_id":"mic-1","sequence_start":true,"sequence_end":true}`, 200, `"OUTPUT":1`},
		{`{"INPUT":[1],"sequence_id":1.5}`, 400, `{"error":"Unable to parse 'sequence_id'"}`},
		{`{"INPUT":[1],"sequence_id":-3}`, 400, `{"error":"Unable to parse 'sequence_id'"}`},
		{`{"INPUT":[1],"sequence_id":7,"sequence_start":"yes"}`, 400, `{"error":"Unable to parse 'sequence_start'"}`},
		{`{"INPUT":[1]}`, 400, `{"error":"inference request to model 'custom_sequence_int32' must specify a non-zero or non-empty correlation ID"}`},
	} {
		resp, body := s.post(t, url, tc.body)
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.want) {
			t.Fatalf("%s: %d %s, want %d %s", tc.body, resp.StatusCode, body, tc.status, tc.want)
		}
		if tc.status != http.StatusOK && body != tc.want {
			t.Fatalf("%s: body %s, want %s", tc.body, body, tc.want)
		}
	}
}

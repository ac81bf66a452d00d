package upstream

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// textResp is a text delta as our engine sends it (raw_output_contents).
func textResp(s string, final bool) *pb.ModelInferResponse {
	r := &pb.ModelInferResponse{ModelName: "echo", ModelVersion: "1"}
	tensor.ToResponse(r, []*tensor.Tensor{tensor.NewString("text_output", s)})
	if final {
		r.Parameters = map[string]*pb.InferParameter{"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}}
	}
	return r
}

// typedTextResp is a text delta in typed contents (as some Tritons send).
func typedTextResp(s string) *pb.ModelInferResponse {
	return &pb.ModelInferResponse{ModelName: "echo", Outputs: []*pb.ModelInferResponse_InferOutputTensor{{
		Name: "text_output", Datatype: "BYTES", Shape: []int64{1},
		Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte(s)}},
	}}}
}

func intResp(v int32) *pb.ModelInferResponse {
	r := &pb.ModelInferResponse{ModelName: "repeat_int32"}
	tensor.ToResponse(r, []*tensor.Tensor{tensor.NewInt32("OUT", []int64{1}, []int32{v})})
	return r
}

func respText(tb testing.TB, r *pb.ModelInferResponse) string {
	tb.Helper()
	outs, err := tensor.FromResponse(r)
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for _, o := range outs {
		if o.Name != "text_output" {
			continue
		}
		els, err := o.Strings()
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range els {
			b.Write(e)
		}
	}
	return b.String()
}

func drainQueue(q *respQueue) []*pb.ModelInferResponse {
	var out []*pb.ModelInferResponse
	for {
		r, ok := q.pop()
		if !ok {
			return out
		}
		out = append(out, r)
	}
}

// TestQueueCoalescesText: once the queue is full, text deltas merge into
// the last queued one, bytes concatenated in order (a UTF-8 character
// split across deltas comes out whole), for both content encodings.
func TestQueueCoalescesText(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func(string) *pb.ModelInferResponse
	}{
		{"raw", func(s string) *pb.ModelInferResponse { return textResp(s, false) }},
		{"typed", typedTextResp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newRespQueue()
			pieces := []string{"a", "b", "h\xc3", "\xa9", "\xe2\x82", "\xac!", " end"}
			for i, p := range pieces {
				ok, merged := q.push(tc.mk(p), 2, 1<<20, false)
				if !ok || merged != (i >= 2) {
					t.Fatalf("push %d: ok %v merged %v", i, ok, merged)
				}
			}
			rs := drainQueue(&q)
			if len(rs) != 2 {
				t.Fatalf("%d responses queued, want 2", len(rs))
			}
			if got := respText(t, rs[0]) + "|" + respText(t, rs[1]); got != "a|bhé€! end" {
				t.Fatalf("text %q", got)
			}
			if q.bytes != 0 || q.n != 0 {
				t.Fatalf("empty queue holds %d bytes, %d responses", q.bytes, q.n)
			}
		})
	}
}

// TestQueueDoesNotCoalesceOthers: non-text responses, finals, other
// outputs and mixed encodings never merge: the push fails instead.
func TestQueueDoesNotCoalesceOthers(t *testing.T) {
	withReason := textResp("x", false)
	tensor.ToResponse(withReason, []*tensor.Tensor{tensor.NewString("finish_reason", "stop")})
	other := textResp("x", false)
	other.ModelName = "other"
	for _, tc := range []struct {
		name       string
		last, next *pb.ModelInferResponse
	}{
		{"int", intResp(1), intResp(2)},
		{"text after int", intResp(1), textResp("x", false)},
		{"final", textResp("a", false), textResp("b", true)}, // exceeds by one, not merged
		{"two outputs", textResp("a", false), withReason},
		{"other model", textResp("a", false), other},
		{"mixed encodings", textResp("a", false), typedTextResp("b")},
	} {
		q := newRespQueue()
		size := respSize(tc.last)
		if ok, _ := q.push(tc.last, 1, 1<<20, false); !ok {
			t.Fatalf("%s: first push refused", tc.name)
		}
		ok, merged := q.push(tc.next, 1, 1<<20, isFinal(tc.next))
		if merged || ok != isFinal(tc.next) {
			t.Errorf("%s: push gave ok %v merged %v", tc.name, ok, merged)
		}
		if rs := drainQueue(&q); rs[0] != tc.last || respSize(rs[0]) != size {
			t.Errorf("%s: queue changed: %v", tc.name, rs)
		}
	}
}

// TestQueueByteBound: the byte bound caps queued and coalesced bytes, but
// one large response always fits an empty queue.
func TestQueueByteBound(t *testing.T) {
	q := newRespQueue()
	big := strings.Repeat("x", 100)
	if ok, _ := q.push(textResp(big, false), 10, 50, false); !ok {
		t.Fatal("empty queue refused a large response")
	}
	if ok, _ := q.push(textResp("y", false), 10, 50, false); ok {
		t.Fatal("accepted past the byte bound")
	}
	// Each delta counts 4+10 bytes queued and 10 more when merged, and
	// merges only while its whole 14 fit: 2×14 + 6×10 = 88, then 88+14 >
	// 100.
	q = newRespQueue()
	for i := range 8 {
		if ok, _ := q.push(textResp("0123456789", false), 2, 100, false); !ok {
			t.Fatalf("push %d refused under the byte bound", i)
		}
	}
	if ok, _ := q.push(textResp("0123456789", false), 2, 100, false); ok {
		t.Fatal("coalesced past the byte bound")
	}
	if ok, _ := q.push(textResp("", true), 2, 100, true); !ok {
		t.Fatal("an empty final refused")
	}
	if rs := drainQueue(&q); len(rs) != 3 || respText(t, rs[1]) != strings.Repeat("0123456789", 7) {
		t.Fatalf("queue %v", rs)
	}
}

// TestStalledTextConsumerCoalesces: a text stream whose consumer does not
// read until the request has ended upstream does not fail: its deltas
// coalesce, and the text read afterwards is complete and in order, while a
// non-text request with the same stall on the same stream fails alone.
func TestStalledTextConsumerCoalesces(t *testing.T) {
	const queue, words = 32, 3000
	e := startEngine(t, "")
	c := newTestClient(t, []string{e.addr}, &Options{
		MaxStreamsPerTarget: 1,
		QueueSize:           queue,
		Cancel:              CancelInband,
		HealthInterval:      -1,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ws := make([]string, words)
	for i := range ws {
		ws[i] = "wörd" + string(rune('a'+i%26)) + "€"
	}
	text := strings.Join(ws, " ")
	req := &pb.ModelInferRequest{ModelName: "echo"}
	tensorsToRequest(req, tensor.NewString("text_input", text), tensor.NewBool("stream", []int64{1}, []bool{true}))
	textCall, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	intCall, err := c.Start(ctx, repeatN(0, 1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	// Neither consumer reads yet; a prompt one beside them is unaffected.
	var wg sync.WaitGroup
	wg.Go(func() {
		cl, err := c.Start(ctx, repeatN(5000, 50, 2))
		if err != nil {
			t.Error(err)
			return
		}
		rs, err := readAll(ctx, cl)
		if err != nil {
			t.Errorf("prompt request: %v", err)
			return
		}
		checkRepeat(t, rs, 5000, 50)
	})
	for _, cl := range []*Call{textCall, intCall} {
		select {
		case <-cl.Done():
		case <-ctx.Done():
			t.Fatal("a stalled request never ended")
		}
	}
	wg.Wait()

	rs, err := readAll(ctx, textCall)
	if err != nil {
		t.Fatalf("text request failed: %v", err)
	}
	if len(rs) > queue+1 {
		t.Fatalf("%d responses read, want at most %d (queue + final)", len(rs), queue+1)
	}
	var got strings.Builder
	for _, r := range rs[:len(rs)-1] { // the final carries the non-streamed text (empty)
		got.WriteString(respText(t, r))
	}
	if got.String() != text {
		t.Fatalf("coalesced text differs: got %d bytes, want %d", got.Len(), len(text))
	}
	rs, err = readAll(ctx, intCall)
	wantKind(t, err, KindTooSlow)
	checkRepeat(t, rs, 0, queue)
	s := c.Stats()
	if s.QueueOverflows != 1 || s.Coalesced < words-2*queue || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

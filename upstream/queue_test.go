package upstream

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/streamgate/streamgate/upstream/budget"

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

// pushOK pushes m onto q and reports whether it was queued.
func pushOK(q *respQueue, m []byte, lim *queueLimits) bool {
	res, _ := q.push(m, lim)
	return res.ok()
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

// fakeClock is an injected clock for the stall check.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) now() time.Duration      { return time.Duration(c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func wire(tb testing.TB, r *pb.ModelInferResponse) []byte {
	tb.Helper()
	b, err := proto.Marshal(&pb.ModelStreamInferResponse{InferResponse: r})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestQueueOrderAndMemory: messages come out in order and byte for byte;
// the buffer grows by doubling, borrows from the shared budget only
// beyond the call's own allowance, and is given back once drained.
func TestQueueOrderAndMemory(t *testing.T) {
	bud := budget.New(1 << 20)
	clk := newFakeClock()
	lim := &queueLimits{own: 8 << 10, bud: bud, stall: time.Minute, now: clk.now}
	q := newRespQueue()
	var msgs [][]byte
	for i := range 400 {
		m := wire(t, intResp(int32(i)))
		msgs = append(msgs, m)
		if got, _ := q.push(m, lim); !got.ok() {
			t.Fatalf("push %d: %v", i, got)
		}
	}
	n, size := q.queued()
	if n != 400 || size < 400*20 || size&(size-1) != 0 {
		t.Fatalf("%d queued in a %d-byte buffer", n, size)
	}
	if want := int64(size) - lim.own; bud.Used() != want {
		t.Fatalf("borrowed %d, want %d", bud.Used(), want)
	}
	var dst []byte
	for i, m := range msgs {
		var ok bool
		if dst, ok = q.pop(dst, lim); !ok || !bytes.Equal(dst, m) {
			t.Fatalf("pop %d: %v % x", i, ok, dst)
		}
	}
	if _, ok := q.pop(dst, lim); ok {
		t.Fatal("pop from an empty queue")
	}
	if n, size := q.queued(); n != 0 || size != 0 || bud.Used() != 0 {
		t.Fatalf("drained queue: %d messages, %d bytes, %d borrowed", n, size, bud.Used())
	}
	// A small buffer goes back to the pool too: an idle call holds none.
	q.push(msgs[0], lim)
	q.pop(dst, lim)
	if _, size := q.queued(); size != 0 {
		t.Fatalf("an emptied queue holds a %d-byte buffer", size)
	}
	// Discarding gives everything back and drops later pushes.
	for _, m := range msgs {
		q.push(m, lim)
	}
	q.discard(lim)
	q.push(msgs[0], lim)
	if n, _ := q.queued(); n != 0 || bud.Used() != 0 {
		t.Fatalf("after discard: %d queued, %d borrowed", n, bud.Used())
	}
}

// TestQueueBudget: a queue that must grow past its own allowance while the
// shared budget is spent is refused, and its refusal takes nothing.
func TestQueueBudget(t *testing.T) {
	bud := budget.New(16 << 10)
	clk := newFakeClock()
	lim := &queueLimits{own: 4 << 10, bud: bud, stall: time.Minute, now: clk.now}
	hog, other := newRespQueue(), newRespQueue()
	m := wire(t, intResp(1))
	i := 0
	for ; pushOK(&hog, m, lim); i++ {
		if i > 10000 {
			t.Fatal("never refused")
		}
	}
	if used := bud.Used(); used > bud.Limit() || used < bud.Limit()/2 {
		t.Fatalf("refused with %d of %d borrowed", used, bud.Limit())
	}
	// Another queue still gets its own allowance.
	for range (4 << 10) / (len(m) + 4) {
		if got, _ := other.push(m, lim); !got.ok() {
			t.Fatalf("a queue within its own allowance was refused: %v", got)
		}
	}
	hog.discard(lim)
	other.discard(lim)
	if bud.Used() != 0 {
		t.Fatalf("%d bytes still borrowed", bud.Used())
	}
}

// TestQueueStall: a push finds the consumer stalled once it has taken
// nothing for the stall timeout while messages waited; a consumer that
// keeps taking, however slowly, is never stalled.
func TestQueueStall(t *testing.T) {
	clk := newFakeClock()
	lim := &queueLimits{own: 1 << 20, stall: 30 * time.Second, now: clk.now}
	q := newRespQueue()
	m := wire(t, intResp(1))
	var dst []byte
	for range 100 { // slow but progressing: 29 s between takes
		q.push(m, lim)
		q.push(m, lim)
		clk.advance(29 * time.Second)
		if got, _ := q.push(m, lim); !got.ok() {
			t.Fatalf("a progressing consumer was stalled: %v", got)
		}
		dst, _ = q.pop(dst, lim)
	}
	clk.advance(time.Hour) // nothing waits from the consumer's point of view...
	for q.n > 0 {
		dst, _ = q.pop(dst, lim)
	}
	if got, _ := q.push(m, lim); !got.ok() { // ...so an empty queue is no stall
		t.Fatalf("push into an empty queue: %v", got)
	}
	q.push(m, lim)
	clk.advance(30 * time.Second)
	if got, _ := q.push(m, lim); got != stalled {
		t.Fatalf("a consumer idle for 30s with responses waiting: %v", got)
	}
}

// TestCallRecvReusesMemory: Recv decodes into memory the call reuses, so
// relaying a response allocates nothing once warm.
func TestCallRecvReusesMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items at random: allocation counts mean nothing")
	}
	c := newTestClient(t, []string{"127.0.0.1:1"}, &Options{HealthInterval: -1})
	cl := newTestCall(c, CancelInband)
	msg := wire(t, intResp(42))
	cl.origID = "caller-id"
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if !pushOK(&cl.q, msg, &c.lim) {
			t.Fatal("push refused")
		}
		r, err := cl.Recv(ctx)
		if err != nil || r.GetId() != "caller-id" || len(r.GetRawOutputContents()) != 1 {
			t.Fatalf("recv %v %v", r, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per response", allocs)
	}
}

// deliverySetup is a call registered on a stream that is never opened,
// and the wire bytes (as grpc-go hands them to the codec) of a response
// for it.
func deliverySetup(tb testing.TB, resp *pb.ModelInferResponse) (*stream, *Call, mem.BufferSlice) {
	c := newTestClient(tb, []string{"127.0.0.1:1"}, &Options{HealthInterval: -1})
	s := c.targetList()[0].newStream(false)
	tb.Cleanup(s.cancelCtx)
	cl := newTestCall(c, CancelInband)
	if !s.add(cl) {
		tb.Fatal("add failed")
	}
	resp.Id = cl.id
	resp.Parameters = map[string]*pb.InferParameter{"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{}}}
	return s, cl, mem.BufferSlice{mem.SliceBuffer(wire(tb, resp))}
}

// deliver is the reader's and the consumer's work for one response: the
// codec takes the bytes, the reader routes them into the call's queue, the
// consumer decodes them.
func deliver(tb testing.TB, s *stream, cl *Call, data mem.BufferSlice) *pb.ModelInferResponse {
	if err := (codec{}).Unmarshal(data, &s.msg); err != nil {
		tb.Fatal(err)
	}
	if err := s.route(s.msg.b); err != nil {
		tb.Fatal(err)
	}
	r, ok, err := cl.TryRecv()
	if !ok || err != nil {
		tb.Fatalf("TryRecv: %v %v", ok, err)
	}
	return r
}

// BenchmarkDeliver is upstream's part of relaying one response: receive
// (the codec), route, queue, decode. It allocates nothing.
func BenchmarkDeliver(b *testing.B) {
	for _, tc := range []struct {
		name string
		resp *pb.ModelInferResponse
	}{{"repeat", intResp(7)}, {"text", textResp(" word", false)}} {
		b.Run(tc.name, func(b *testing.B) {
			s, cl, data := deliverySetup(b, tc.resp)
			b.ReportAllocs()
			for b.Loop() {
				deliver(b, s, cl, data)
			}
		})
	}
}

// BenchmarkDeliverPaced is BenchmarkDeliver at a paced load's cache
// footprint: 4,096 calls on 64 streams, each op one response to the next
// call round-robin, taken by its Notify function as the gateway's relay
// takes it (on the reader, at once). Each call's state was last touched
// 65,535 responses ago, as a stream's is 50 ms ago under 1,000 streams of
// paced tokens: the figure is the cache misses and pointer chasing of one
// response, which BenchmarkDeliver's one warm call hides.
func BenchmarkDeliverPaced(b *testing.B) {
	const nStreams, nCalls = 4096, 65536
	c := newTestClient(b, []string{"127.0.0.1:1"}, &Options{HealthInterval: -1, MaxRequestsPerStream: nCalls / nStreams})
	tg := c.targetList()[0]
	streams := make([]*stream, nStreams)
	for i := range streams {
		streams[i] = tg.newStream(false)
		b.Cleanup(streams[i].cancelCtx)
	}
	type delivery struct {
		s    *stream
		data []byte
	}
	ds := make([]delivery, nCalls)
	var got int
	for i := range ds {
		cl := newTestCall(c, CancelInband)
		s := streams[i%nStreams]
		if !s.add(cl) {
			b.Fatal("add failed")
		}
		cl.Notify(NotifyFunc(func() {
			for {
				r, ok, err := cl.TryRecv()
				if !ok || err != nil {
					return
				}
				got += len(r.GetRawOutputContents())
			}
		}))
		resp := textResp(" word", false)
		resp.Id = cl.id
		resp.Parameters = map[string]*pb.InferParameter{"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{}}}
		ds[i] = delivery{s, wire(b, resp)}
	}
	// In an order unrelated to the calls' allocation, as responses come
	// in production: no prefetcher guesses the next call's memory.
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d := &ds[i]
		if err := d.s.route(d.data); err != nil {
			b.Fatal(err)
		}
		if i++; i == nCalls {
			i = 0
		}
	}
	if got == 0 {
		b.Fatal("nothing delivered")
	}
}

// TestDeliverAllocs: receiving, routing, queuing and decoding a response
// allocates nothing once the call is warm.
func TestDeliverAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items at random: allocation counts mean nothing")
	}
	for _, resp := range []*pb.ModelInferResponse{intResp(7), textResp(" word", false)} {
		s, cl, data := deliverySetup(t, resp)
		want := proto.CloneOf(resp)
		want.Id = cl.origID
		if r := deliver(t, s, cl, data); !proto.Equal(r, want) {
			t.Fatalf("delivered %v, want %v", r, want)
		}
		if n := testing.AllocsPerRun(1000, func() { deliver(t, s, cl, data) }); n != 0 {
			t.Errorf("%s: %v allocations per response", resp.GetModelName(), n)
		}
	}
}

// TestQueueBurstsReuseBuffers: a queue that grows in a burst and is
// drained again takes its buffers from the pool, allocating nothing.
func TestQueueBurstsReuseBuffers(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items at random: allocation counts mean nothing")
	}
	lim := &queueLimits{own: 1 << 20, stall: time.Minute, now: monoClock()}
	q := newRespQueue()
	m := wire(t, intResp(1))
	var dst []byte
	burst := func() {
		for range 200 {
			q.push(m, lim)
		}
		for q.n > 0 {
			dst, _ = q.pop(dst, lim)
		}
	}
	burst()
	if n := testing.AllocsPerRun(100, burst); n != 0 {
		t.Fatalf("%v allocations per burst", n)
	}
}

// TestCallLayout guards the Call's layout (see its comment): it takes
// the 320-byte size class, whose objects start on a cache line, and
// what every response touches lies in its first three lines.
func TestCallLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is tuned for 64-bit builds")
	}
	var cl Call
	if size := unsafe.Sizeof(cl); size <= 288 || size > 320 {
		t.Errorf("Call is %d bytes, not in the 320-byte size class (289 to 320)", size)
	}
	hot := map[string]uintptr{
		"q":         unsafe.Offsetof(cl.q) + unsafe.Sizeof(cl.q),
		"c":         unsafe.Offsetof(cl.c) + unsafe.Sizeof(cl.c),
		"cur":       unsafe.Offsetof(cl.cur) + unsafe.Sizeof(cl.cur),
		"origID":    unsafe.Offsetof(cl.origID) + unsafe.Sizeof(cl.origID),
		"progress":  unsafe.Offsetof(cl.progress) + unsafe.Sizeof(cl.progress),
		"delivered": unsafe.Offsetof(cl.delivered) + unsafe.Sizeof(cl.delivered),
		"ended":     unsafe.Offsetof(cl.ended) + unsafe.Sizeof(cl.ended),
		"aborted":   unsafe.Offsetof(cl.aborted) + unsafe.Sizeof(cl.aborted),
		"decoupled": unsafe.Offsetof(cl.decoupled) + unsafe.Sizeof(cl.decoupled),
	}
	for name, end := range hot {
		if end > 3*64 {
			t.Errorf("Call.%s ends at byte %d, past the first three cache lines", name, end)
		}
	}
}

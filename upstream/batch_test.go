package upstream

import (
	"bytes"
	"io"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// wakeup is what a call's consumer found when it was told once: how
// many responses, and whether the call had ended.
type wakeup struct {
	responses int
	ended     bool
}

// wakeups has cl's Notifier drain cl at each Ready and note what it
// found there in *got, then call then(len(*got)) (on the goroutine that
// tells it). A wake-up that finds nothing new is not noted.
func wakeups(cl *Call, got *[]wakeup, then func(int)) {
	ended := false
	cl.Notify(NotifyFunc(func() {
		var w wakeup
		for !ended {
			r, ok, err := cl.TryRecv()
			if !ok {
				break
			}
			if r == nil {
				w.ended, ended = err != nil, true
				break
			}
			w.responses++
		}
		if w != (wakeup{}) {
			*got = append(*got, w)
			then(len(*got))
		}
	}))
}

// TestReaderDeliversPerRead: the responses one read of the connection
// brings reach each call's consumer in one wake-up, after the reader has
// routed them all. A call whose last data response and its flags-only
// final come in one TCP write (as a decoupled model sends them) is told
// once and finds both: its relay sends the last event and the end in one
// write. Another call's response in the same read is told apart, before
// the reader reads again; its final, in a later read, wakes it again.
func TestReaderDeliversPerRead(t *testing.T) {
	c := newTestClient(t, []string{"127.0.0.1:1"}, &Options{HealthInterval: -1})
	s := c.targetList()[0].newStream(false)
	t.Cleanup(s.cancelCtx)
	a, b := newTestCall(c, CancelInband), newTestCall(c, CancelInband)
	for _, cl := range []*Call{a, b} {
		if !s.add(cl) {
			t.Fatal("add failed")
		}
	}
	msg := func(cl *Call, data, final bool) []byte {
		r := &pb.ModelInferResponse{ModelName: "repeat_int32"}
		if data {
			r = intResp(7)
		}
		r.Id = cl.id
		r.Parameters = map[string]*pb.InferParameter{"triton_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: final}}}
		return grpcMsg(wire(t, r))
	}
	// frames is the frames' bytes, for one write of the connection.
	frames := func(fill func(fr *http2.Framer)) []byte {
		var buf bytes.Buffer
		fill(http2.NewFramer(&buf, nil))
		return buf.Bytes()
	}
	next := make(chan struct{})
	addr := serveRawH2(t, nil, func(srv *rawH2) {
		srv.respond()
		_, err := srv.conn.Write(frames(func(fr *http2.Framer) {
			fr.WriteData(h2StreamID, false, msg(a, true, false))
			fr.WriteData(h2StreamID, false, append(msg(b, true, false), msg(a, false, true)...))
			fr.WriteData(h2StreamID, false, msg(b, true, false))
		}))
		srv.check(err)
		<-next // b took the first read's responses: its final comes in a read of its own
		_, err = srv.conn.Write(frames(func(fr *http2.Framer) {
			fr.WriteData(h2StreamID, false, msg(b, true, true))
		}))
		srv.check(err)
		srv.trailers(codes.OK, "")
	})
	h := dialTest(t, t.Context(), addr, 1<<20)
	var gotA, gotB []wakeup
	wakeups(a, &gotA, func(int) {})
	wakeups(b, &gotB, func(n int) {
		if n == 1 {
			close(next)
		}
	})
	s.readLoop(h) // until the trailers

	if want := []wakeup{{1, true}}; !equalWakeups(gotA, want) {
		t.Errorf("call a woke up %v, want %v: its last response and its end at once", gotA, want)
	}
	if want := []wakeup{{2, false}, {1, true}}; !equalWakeups(gotB, want) {
		t.Errorf("call b woke up %v, want %v: once per read", gotB, want)
	}
	if err := b.err; err != io.EOF {
		t.Errorf("call b ended with %v", err)
	}
}

func equalWakeups(got, want []wakeup) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/streamgate/streamgate/engine"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// The sequence preset: client-side streaming into the transcribe model.
// Each "request" of the runner is one sequence of wl.Responses chunks sent
// wl.Delay apart (a fixed chunk rate, as audio frames come), whatever the
// answers; each chunk is one word and a space, so it gains the transcript
// exactly one partial result. The figure of interest is each chunk's
// latency: its send → its partial result (stream.partial), beside the
// usual TTFT (first chunk → first partial) and gaps.

// chunkText is chunk k of a sequence: one word and a space.
func chunkText(k int) string { return "w" + strconv.Itoa(k) + " " }

// seqID is the correlation id of the direct transport's sequence serial.
func seqID(serial int32) int64 { return int64(serial) }

// schedule sends n chunks, the k-th at start + k·every, with send(k),
// while handing every message that arrives on in to recv; it returns once
// every chunk is sent and recv reports the end (done), or at the first
// error.
func schedule[T any](ctx context.Context, n int, every time.Duration, send func(k int) error, in <-chan T, dead <-chan struct{}, recv func(T) (done bool, err error)) error {
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	due := timer.C
	next := 0
	for {
		select {
		case <-due:
			if err := send(next); err != nil {
				return err
			}
			if next++; next < n {
				timer.Reset(time.Until(start.Add(time.Duration(next) * every)))
			} else {
				due = nil
			}
		case m := <-in:
			done, err := recv(m)
			if err != nil {
				return err
			}
			if done {
				if next < n {
					return errKindf("protocol", "the sequence ended after %d of %d chunks", next, n)
				}
				return nil
			}
		case <-dead:
			return errKindf("closed", "connection ended mid-sequence")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// seqDirect runs each sequence on a ModelStreamInfer RPC of its own,
// straight to the engine: the baseline.
type seqDirect struct{ *direct }

func (d seqDirect) do(ctx context.Context, serial int32, s *stream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := d.client.ModelStreamInfer(ctx)
	if err != nil {
		return err
	}
	in := make(chan *pb.ModelStreamInferResponse, 64)
	dead := make(chan struct{})
	var rerr error
	go func() { // ends with the RPC, which cancel ends at the latest
		defer close(dead)
		for {
			m, err := st.Recv()
			if err != nil {
				rerr = err
				return
			}
			select {
			case in <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	n := d.wl.Responses
	finals := 0
	err = schedule(ctx, n, d.wl.Delay, func(k int) error {
		req := &pb.ModelInferRequest{ModelName: d.wl.Model, Id: grpcID(serial) + "_" + strconv.Itoa(k),
			Parameters: map[string]*pb.InferParameter{
				"sequence_id":                        {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: seqID(serial)}},
				"sequence_start":                     {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: k == 0}},
				"sequence_end":                       {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: k == n-1}},
				"triton_enable_empty_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}},
			}}
		tensor.ToRequest(req, []*tensor.Tensor{tensor.NewString("text_input", chunkText(k))})
		if k == 0 {
			s.begin()
		}
		s.sent()
		return st.Send(req)
	}, in, dead, func(m *pb.ModelStreamInferResponse) (bool, error) {
		if m.GetErrorMessage() != "" {
			return true, errKindf("model_error", "%s", m.GetErrorMessage())
		}
		r := m.GetInferResponse()
		if hasContent(r, true) {
			s.partial()
		}
		if engine.FinalFlag(r) {
			finals++
		}
		return finals == n, nil
	})
	cancel()
	<-dead
	if err == nil && rerr != nil && !errors.Is(rerr, io.EOF) && ctx.Err() == nil {
		err = rerr
	}
	return err
}

// seqWS runs each sequence as sequence frames on a shared WebSocket.
type seqWS struct{ *wsTransport }

func (t seqWS) do(ctx context.Context, serial int32, st *stream) error {
	s, err := t.socket()
	if err != nil {
		return err
	}
	defer s.inflight.Add(-1)
	id := "q" + strconv.FormatInt(int64(serial), 10)
	call, life, unregister := s.register(id)
	defer unregister()
	n := t.wl.Responses
	err = schedule(ctx, n, t.wl.Delay, func(k int) error {
		typ := "sequence.data"
		switch {
		case k == 0:
			typ = "sequence.start"
			st.begin()
		case k == n-1:
			typ = "sequence.end"
		}
		m := map[string]any{"type": typ, "id": id, "body": map[string]string{"text_input": chunkText(k)}}
		if k == 0 {
			m["model"] = t.wl.Model
		}
		frame, _ := json.Marshal(m)
		st.sent()
		if err := t.write(s, frame); err != nil {
			return errKind("ws_closed", err)
		}
		return nil
	}, call.ch, life.dead, func(f wsFrame) (bool, error) {
		switch f.Type {
		case "data":
			if kind, msg := classifyGenerate(f.raw, true); kind == evError {
				return true, errKindf("error_event", "%s", msg)
			} else if kind == evResponse {
				st.partial()
			}
			return false, nil
		case "done":
			return true, nil
		case "error":
			if f.Error != nil {
				return true, errKindf("ws_"+f.Error.Code, "%s", f.Error.Message)
			}
			return true, errKindf("ws_error", "%s", f.raw)
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		// The run is over: end the sequence, without waiting.
		cancel, _ := json.Marshal(map[string]string{"type": "cancel", "id": id})
		t.write(s, cancel)
	}
	return err
}
